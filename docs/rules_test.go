package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ruleCode matches a rule code as code and documents cite it: T1, H10, W3.
var ruleCode = regexp.MustCompile(`\b[THEWPRM][0-9]{1,2}\b`)

// definedRules returns the codes semantics.md defines: those in bold at the
// start of a row of its rule tables.
func definedRules(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("semantics.md")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| \*\*([A-Z][0-9]{1,2})\*\* \|`).FindAllStringSubmatch(string(b), -1) {
		defs[m[1]] = true
	}
	if len(defs) < 30 {
		t.Fatalf("semantics.md defines %d rule codes, want them all", len(defs))
	}
	return defs
}

// TestRuleCodesDefined fails when Go code or a document of the repository
// cites a rule code (T1, W3 …) that semantics.md does not define.
func TestRuleCodesDefined(t *testing.T) {
	defs := definedRules(t)
	cited := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "dist" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, code := range ruleCode.FindAllString(line, -1) {
				cited++
				if !defs[code] {
					t.Errorf("%s:%d: cites %s, which docs/semantics.md does not define", path, i+1, code)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 100 {
		t.Fatalf("found %d citations of rule codes in the repository, want the code's", cited)
	}
}
