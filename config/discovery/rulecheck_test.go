package discovery

import (
	"regexp/syntax"
	"strings"
	"testing"
)

// TestCheckRegex runs the regexes relabel rules use, and pathological ones,
// through the check: the usual ones pass, those that keep many states alive
// over long labels are refused with the number they keep and the limit.
func TestCheckRegex(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		re   string
		want string // part of the error; "" when accepted
	}{
		{"default", "(.*)", ""},
		{"address parts", `127\.\d+\.(\d+)\..*`, ""},
		{"host and port", `([^:]+)(?::\d+)?`, ""},
		{"host name", `[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63}){0,10}`, ""},
		{"names", "api|web|db|search-frontend|inventory-service-eu-west-1-production", ""},
		{"case folded", "(?i)foo.*bar", ""},
		{"unicode", `\pL+_(\d*)`, ""},
		{"a few groups", "(.*)_(.*)_(.*)_(.*)", ""},
		{"nested plus", "((a+)+)+b", ""},
		{"big DFA, few states", "(a|b)*a(a|b){20}", ""},
		{"repeated any", "(.*){31}b", ""},
		{"the issue's", "(.*){1000}b", `"(.*){1000}b" can keep 1001 states alive at once while it matches, more than 32`},
		{"repeated any, 100", "(.*){100}b", "can keep 101 states"},
		{"optional any", "(.?){1000}b", "more than 32"},
		{"optional letters", "(a?){500}a{500}", "more than 32"},
		{"counted any", "(.{0,50}){20}b", "more than 32"},
		{"too long", strings.Repeat("a", MaxRegexBytes+1), "4097 bytes, more than 4096"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkRegex(c.re)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

// TestLiveStatesDepth checks that a long alternation, wide only at its
// start, is judged by the states it keeps once past its first bytes.
func TestLiveStatesDepth(t *testing.T) {
	t.Parallel()
	const first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var names []string
	for i := range 200 {
		names = append(names, string(first[i%len(first)])+strings.Repeat("x", i%7)+"-service")
	}
	p, err := syntax.Parse("^(?s:"+strings.Join(names, "|")+")$", syntax.Perl)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := syntax.Compile(p.Simplify())
	if err != nil {
		t.Fatal(err)
	}
	e := explorer{prog: prog}
	if n := len(e.closure([]uint32{uint32(prog.Start)})); n <= MaxRegexStates {
		t.Fatalf("the alternation keeps %d states at its start: the test needs more than %d", n, MaxRegexStates)
	}
	if n := liveStates(prog, MaxRegexStates); n > MaxRegexStates {
		t.Errorf("an alternation of 200 names keeps %d states past its start, want at most %d", n, MaxRegexStates)
	}
}

// TestRefs counts the references to the match in replacements.
func TestRefs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"$1": 1, "${1}x": 1, "$$1": 0, "a$1b$2$name": 3, "$": 0, "cost: $$": 0} {
		if got := refs(in); got != want {
			t.Errorf("refs(%q) = %d, want %d", in, got, want)
		}
	}
}
