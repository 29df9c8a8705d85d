package discovery

import (
	"encoding/binary"
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode"

	"github.com/prometheus/prometheus/model/relabel"
)

// Limits on a relabel rule, checked when a configuration is loaded
// ([CheckRule]), so that relabeling a target costs a bounded time.
//
// Go's regular expressions run in time linear in their input, but the
// factor is the number of the automaton's states alive at once: a
// regex like (.*){1000}b keeps a thousand of them alive over every byte,
// and takes 135 ms to match a 4 KB label. The states a regex can keep alive
// are counted once its first regexStateDepth bytes are read — a long
// alternation of names is wide only at its start — and at most
// MaxRegexStates are allowed.
const (
	// MaxRegexBytes bounds the text of a rule's regex.
	MaxRegexBytes = 4096
	// MaxRegexInstructions bounds the size of a rule's compiled regex
	// (anchored as relabeling anchors it).
	MaxRegexInstructions = 10000
	// MaxRegexStates bounds the states of a rule's regex that can be alive
	// at once past its first regexStateDepth bytes.
	MaxRegexStates = 32
	// MaxSourceLabels bounds the labels whose values a rule joins.
	MaxSourceLabels = MaxLabels
	// MaxSeparatorBytes bounds the separator of a rule.
	MaxSeparatorBytes = 256
	// MaxReplacementBytes bounds a rule's replacement (before expansion).
	MaxReplacementBytes = MaxLabelValueBytes
	// MaxReplacementRefs bounds the references to the match ($1, ${name})
	// in a replacement or target label: each expands to as much as the
	// joined source values.
	MaxReplacementRefs = 16
)

// regexStateDepth is how many bytes of input a regex may read before the
// states it keeps alive are counted.
const regexStateDepth = 32

// regexWork bounds the closures the state count may compute; a regex
// whose automaton is too large to explore within it is judged by the
// number of its states that read input, all of which could be alive.
const regexWork = 200000

// RuleError is a relabel rule beyond one of the limits: Field is the rule's
// field at fault ("regex", "replacement"...), Msg says why, with the value
// and the limit.
type RuleError struct {
	Field string
	Msg   string
}

func (e *RuleError) Error() string { return e.Field + ": " + e.Msg }

// CheckRule checks a relabel rule, decoded and validated by Prometheus,
// against the limits above.
func CheckRule(c *relabel.Config) error {
	if n := len(c.SourceLabels); n > MaxSourceLabels {
		return &RuleError{"source_labels", fmt.Sprintf("%d labels, more than %d", n, MaxSourceLabels)}
	}
	if n := len(c.Separator); n > MaxSeparatorBytes {
		return &RuleError{"separator", fmt.Sprintf("%d bytes, more than %d", n, MaxSeparatorBytes)}
	}
	if n := len(c.Replacement); n > MaxReplacementBytes {
		return &RuleError{"replacement", fmt.Sprintf("%d bytes, more than %d", n, MaxReplacementBytes)}
	}
	if n := len(c.TargetLabel); n > MaxLabelNameBytes {
		return &RuleError{"target_label", fmt.Sprintf("%d bytes, more than %d", n, MaxLabelNameBytes)}
	}
	for _, f := range []struct{ field, text string }{{"replacement", c.Replacement}, {"target_label", c.TargetLabel}} {
		if n := refs(f.text); n > MaxReplacementRefs {
			return &RuleError{f.field, fmt.Sprintf("%q refers to the match %d times, more than %d", clip(f.text), n, MaxReplacementRefs)}
		}
	}
	if c.Regex.Regexp == nil {
		return nil
	}
	return checkRegex(c.Regex.String())
}

// checkRegex checks a rule's regex: its size, and the states it can keep
// alive.
func checkRegex(re string) error {
	if len(re) > MaxRegexBytes {
		return &RuleError{"regex", fmt.Sprintf("%d bytes, more than %d", len(re), MaxRegexBytes)}
	}
	parsed, err := syntax.Parse("^(?s:"+re+")$", syntax.Perl)
	if err != nil {
		return &RuleError{"regex", err.Error()} // Prometheus compiled it already: not expected
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return &RuleError{"regex", err.Error()}
	}
	if n := len(prog.Inst); n > MaxRegexInstructions {
		return &RuleError{"regex", fmt.Sprintf("%q compiles to %d instructions, more than %d; split it over several rules", clip(re), n, MaxRegexInstructions)}
	}
	if n := liveStates(prog, MaxRegexStates); n > MaxRegexStates {
		return &RuleError{"regex", fmt.Sprintf("%q can keep %d states alive at once while it matches, more than %d (each costs a step for every byte of label it reads): "+
			"repeat fewer groups that can match anything", clip(re), n, MaxRegexStates)}
	}
	return nil
}

// refs counts the references to the match in a replacement template: "$"
// followed by a name, a number or "{".
func refs(s string) int {
	n := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		if s[i+1] == '$' {
			i++ // "$$" is a literal dollar
			continue
		}
		if c := s[i+1]; c == '{' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			n++
		}
	}
	return n
}

// clip shortens a value quoted in a message.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:77] + "..."
}

// liveStates returns the largest number of prog's input-reading
// instructions that can be alive at once after regexStateDepth bytes of
// some input — the work a match does per byte from there on — counting no
// further than limit+1. It explores the automaton's subsets (the states of
// the DFA made from it) over one representative of each class of runes
// the program tells apart. When that takes more than regexWork closures,
// it returns the number of input-reading instructions the program has.
func liveStates(prog *syntax.Prog, limit int) int {
	var reading []uint32
	for pc, in := range prog.Inst {
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			reading = append(reading, uint32(pc))
		}
	}
	if len(reading) <= limit {
		return len(reading) // no subset can be larger
	}
	e := explorer{prog: prog, reps: runeClasses(prog, reading), seen: map[string]bool{}}
	if e.reps == nil {
		return len(reading)
	}
	level := [][]uint32{e.closure([]uint32{uint32(prog.Start)})}
	for range regexStateDepth {
		keys := map[string]bool{}
		var next [][]uint32
		for _, s := range level {
			for _, r := range e.reps {
				t := e.step(s, r)
				if k := key(t); len(t) > 0 && !keys[k] {
					keys[k] = true
					next = append(next, t)
				}
			}
		}
		level = next
		if e.work > regexWork {
			return len(reading)
		}
	}
	// Every subset reachable from the states at that depth.
	most := 0
	queue := level
	for _, s := range queue {
		e.seen[key(s)] = true
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		most = max(most, len(s))
		if most > limit {
			return most
		}
		if e.work > regexWork {
			return len(reading)
		}
		for _, r := range e.reps {
			t := e.step(s, r)
			if k := key(t); len(t) > 0 && !e.seen[k] {
				e.seen[k] = true
				queue = append(queue, t)
			}
		}
	}
	return most
}

// reads reports whether the input-reading instruction in matches r.
func reads(in *syntax.Inst, r rune) bool {
	switch in.Op {
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return in.MatchRune(r)
}

// explorer walks the subsets of a program's input-reading instructions.
type explorer struct {
	prog  *syntax.Prog
	reps  []rune
	seen  map[string]bool
	work  int
	mark  []uint32 // per instruction, the closure that last visited it
	stack []uint32
}

// step returns the subset alive after s reads r.
func (e *explorer) step(s []uint32, r rune) []uint32 {
	var from []uint32
	for _, pc := range s {
		if in := &e.prog.Inst[pc]; reads(in, r) {
			from = append(from, in.Out)
		}
	}
	return e.closure(from)
}

// closure returns the input-reading instructions reached from pcs without
// reading input, sorted. Empty-width assertions (^, $, \b) count as
// passable: the count is an upper bound.
func (e *explorer) closure(pcs []uint32) []uint32 {
	e.work++
	if e.mark == nil {
		e.mark = make([]uint32, len(e.prog.Inst))
	}
	stamp := uint32(e.work)
	var out []uint32
	stack := append(e.stack[:0], pcs...)
	defer func() { e.stack = stack[:0] }()
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e.mark[pc] == stamp {
			continue
		}
		e.mark[pc] = stamp
		in := &e.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Out, in.Arg)
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			stack = append(stack, in.Out)
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			out = append(out, pc)
		}
	}
	slices.Sort(out)
	return out
}

// key is a subset as a map key.
func key(s []uint32) string {
	b := make([]byte, 0, 4*len(s))
	for _, pc := range s {
		b = binary.LittleEndian.AppendUint32(b, pc)
	}
	return string(b)
}

// maxRuneClasses bounds the classes of runes runeClasses tells apart.
const maxRuneClasses = 256

// runeClasses returns a rune of each class of runes that the program's
// input-reading instructions tell apart (the runes each matches the same
// instructions as), or nil when there are more than maxRuneClasses.
func runeClasses(prog *syntax.Prog, reading []uint32) []rune {
	cands := []rune{0, 'a', '\n', '\n' + 1}
	addFolds := func(r rune) {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			cands = append(cands, f)
		}
	}
	for _, pc := range reading {
		in := &prog.Inst[pc]
		fold := syntax.Flags(in.Arg)&syntax.FoldCase != 0
		for i := 0; i+1 < len(in.Rune); i += 2 {
			lo, hi := in.Rune[i], in.Rune[i+1]
			cands = append(cands, lo, hi+1)
			if fold {
				addFolds(lo)
				addFolds(hi)
			}
		}
		if len(in.Rune) == 1 {
			cands = append(cands, in.Rune[0], in.Rune[0]+1)
			if fold {
				addFolds(in.Rune[0])
			}
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	bySig := map[string]bool{}
	var reps []rune
	sig := make([]byte, (len(reading)+7)/8)
	for _, r := range cands {
		if r < 0 || r > unicode.MaxRune {
			continue
		}
		clear(sig)
		for i, pc := range reading {
			if reads(&prog.Inst[pc], r) {
				sig[i/8] |= 1 << (i % 8)
			}
		}
		if k := string(sig); !bySig[k] {
			bySig[k] = true
			reps = append(reps, r)
			if len(reps) > maxRuneClasses {
				return nil
			}
		}
	}
	return reps
}
