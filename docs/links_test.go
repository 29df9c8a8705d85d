package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// documents returns the paths of the README and of every document of
// docs/, relative to this directory.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 8 {
		t.Fatalf("found %d documents in docs/, want them all: %v", len(docs), docs)
	}
	return append([]string{"../README.md"}, docs...)
}

// prose returns the lines of a Markdown document outside fenced code
// blocks, where links are links.
func prose(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	fenced := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}

// slug returns the anchor GitHub gives a heading: lower case, punctuation
// other than "-" and "_" dropped, spaces turned into "-".
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a document's headings, with GitHub's
// "-1", "-2" … for repeated ones.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(t, path) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		text = strings.NewReplacer("`", "", "*", "").Replace(text)
		s := slug(text)
		if n := seen[s]; n > 0 {
			out[s+"-"+string(rune('0'+n))] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks checks every relative link of the README and of docs/: the
// file exists, and an anchor names a heading of the Markdown file it
// points into.
func TestLinks(t *testing.T) {
	for _, doc := range documents(t) {
		for i, line := range prose(t, doc) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s (prose line %d): link %s: %v", doc, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
					t.Errorf("%s (prose line %d): link %s: %s has no heading with anchor %q", doc, i+1, target, path, anchor)
				}
			}
		}
	}
}

// outside matches what documents must not name: the project's planning
// documents, which are not in the repository, issue numbers and seed files.
// The planning documents are named in capitals; docs/semantics.md is ours.
var outside = regexp.MustCompile(`\b(SEMANTICS\.md|DESIGN\.md|STYLE\.md)|(?i)\b(seeds?/|seed files?|issue #?\d+)`)

// TestNoOutsideReferences fails when a document names a file outside the
// repository, an issue or a seed: the documents stand on their own.
func TestNoOutsideReferences(t *testing.T) {
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: names %q, which is not part of the repository", doc, i+1, m)
			}
		}
	}
}
