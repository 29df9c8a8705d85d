package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// DefaultRelabelBudget is how long relabeling n targets of one source may
// take, unless Options say otherwise: 5 s, and 20 µs a target on top —
// about ten times what a target costs with rules of the usual kind on a
// loaded 2-core machine, so only rules that are far slower than they should
// be (a regex that keeps many states alive over long label values) reach
// it. A million targets may take 25 s.
func DefaultRelabelBudget(n int) time.Duration {
	return 5*time.Second + time.Duration(n)*20*time.Microsecond
}

// relabeled is what relabeling one source's targets gave: the runner's
// worker makes it, and the pool's targets are put together from those of
// its sources (see Runner.assemble).
type relabeled struct {
	version uint64     // of the source's content
	rl      *relabeler // the rules, and the pool's labels
	total   int        // the targets the source gave
	targets part       // the targets given as addresses
	hosts   []hostTarget
	groups  int
	dropped map[string]int // by reason; reasonRelabel for the rules
	invalid int            // dropped for a reason other than the rules
	example string         // what was wrong with the first invalid target
}

// hostTarget is a target given by host name; it is looked up when the
// pool's targets are put together.
type hostTarget struct {
	host   string
	port   uint16
	labels labels.Labels
}

func (o *relabeled) kept() int { return len(o.targets.targets) + len(o.hosts) }

// Why a relabeling pass ends before its end.
var (
	// errAbandoned: a newer update of the source came; the pass starts
	// again with it.
	errAbandoned = errors.New("a newer update came")
	// errStopped: the runner closes.
	errStopped = errors.New("discovery stopped")
	// errOverBudget: the pass took longer than the relabel budget.
	errOverBudget = errors.New("relabeling took too long")
)

// refusal is the error of a pass whose targets are not used: too many of
// them are invalid (see refused).
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// refused says why the targets of a pass are refused, "" when they are
// not: more than half of the targets the source gave (those the rules did
// not drop) are invalid. Then the source's update would shrink or empty
// its pool because of what is wrong with it, not because the fleet
// changed: the source keeps the targets it gave last, and is reported.
func refused(o *relabeled) string {
	if o.invalid == 0 || o.invalid <= o.kept() {
		return ""
	}
	return fmt.Sprintf("%d of the %d targets it gave are invalid (%s; the first: %s)",
		o.invalid, o.invalid+o.kept(), reasonsText(o.dropped), o.example)
}

// reasonsText lists the invalid targets by reason: "bad __address__: 3".
func reasonsText(dropped map[string]int) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(dropped)) {
		if r != reasonRelabel {
			parts = append(parts, fmt.Sprintf("%s: %d", r, dropped[r]))
		}
	}
	return strings.Join(parts, ", ")
}

// relabelSource relabels every target of source s with rl, within the
// relabel budget. It gives up with errStopped when ctx ends, with
// errAbandoned when a newer update of s comes and mayAbandon is set, and
// with errOverBudget when it takes longer than the budget for its number of
// targets.
func relabelSource(ctx context.Context, s *source, rl *relabeler, budget func(int) time.Duration, mayAbandon bool) (*relabeled, error) {
	cs, version, n, groups := s.snapshot()
	// One word, set from timers, read for every target: a target's
	// relabeling is the unit of work, and the slowest a regex the
	// configuration accepts can make it is a few milliseconds per kilobyte
	// of label.
	var stop atomic.Int32
	const stopCtx, stopBudget = 1, 2
	t := time.AfterFunc(budget(n), func() { stop.CompareAndSwap(0, stopBudget) })
	defer t.Stop()
	defer context.AfterFunc(ctx, func() { stop.Store(stopCtx) })()
	out := &relabeled{version: version, rl: rl, total: n, groups: groups, dropped: map[string]int{}}
	in := interner{idx: map[uint64]uint32{}}
	var err error
	for _, c := range cs {
		c.each(func(gl, tl []label) bool {
			switch stop.Load() {
			case stopCtx:
				err = errStopped
				return false
			case stopBudget:
				err = errOverBudget
				return false
			}
			if mayAbandon && s.version.Load() != version {
				err = errAbandoned
				return false
			}
			ep, ls, kept, reason, detail := rl.process(gl, c.over, tl)
			switch {
			case !kept && reason == "":
				out.dropped[reasonRelabel]++
			case !kept:
				out.dropped[reason]++
				if out.invalid == 0 {
					out.example = detail
				}
				out.invalid++
			case ep.Host != "":
				out.hosts = append(out.hosts, hostTarget{ep.Host, ep.Port, in.sets[in.intern(ls)]})
			default:
				out.targets.targets = append(out.targets.targets, newAddrTarget(ep.Addr, ep.Port, in.intern(ls)))
			}
			return true
		})
		if err != nil {
			return &relabeled{version: version, rl: rl, total: n}, err
		}
	}
	out.targets.sets = in.sets
	if msg := refused(out); msg != "" {
		return out, &refusal{msg}
	}
	return out, nil
}

// interner numbers the label sets of a pass, each once: targets of one
// rack or zone share one copy of their labels.
type interner struct {
	idx  map[uint64]uint32 // by hash
	sets []labels.Labels
}

func (in *interner) intern(ls labels.Labels) uint32 {
	h := ls.Hash()
	if i, ok := in.idx[h]; ok && labels.Equal(in.sets[i], ls) {
		return i
	}
	i := uint32(len(in.sets))
	in.sets = append(in.sets, ls)
	if _, ok := in.idx[h]; !ok {
		in.idx[h] = i // a collision keeps the first: the second set is only not shared
	}
	return i
}
