package scheduler

import (
	"fmt"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// checkTable is one version of the engine's checks with what the shards
// derive from them: the distinct launchers and the deadline queue of each
// check. A table is immutable once built; an edit that changes the checks
// builds a new one and hands it to every shard through its command inbox, so
// a shard switches tables between two steps, never during one.
type checkTable struct {
	checks     []Check
	launchers  []probe.Launcher // distinct launchers of checks
	resenders  []probe.Resender // per launcher, the launcher as a Resender, or nil
	settlers   []probe.Settler  // per launcher, the launcher as a Settler, or nil
	launcherOf []int            // per check, index into launchers; -1 without a launcher
	queueOf    []int            // per check, index of its deadline queue
	queues     []queueKey       // per deadline queue, what its probes share; only grows from table to table
}

// queueKey is what every probe of one deadline queue shares: its timeout,
// and its retransmission timeout (0 for none), in ns. Probes enter a queue
// in send order, so both their deadlines and their retransmissions come due
// in that order.
type queueKey struct {
	timeout, rto int64
}

// newCheckTable validates checks and builds their table. Deadline queues of
// prev (nil for the first table) keep their indices: shards hold in-flight
// probes in them.
func newCheckTable(checks []Check, prev *checkTable) (*checkTable, error) {
	if len(checks) > maxChecks {
		return nil, fmt.Errorf("%w: %d checks, more than %d", ErrInvalidCheck, len(checks), maxChecks)
	}
	t := &checkTable{
		checks:     append([]Check(nil), checks...),
		launcherOf: make([]int, len(checks)),
		queueOf:    make([]int, len(checks)),
	}
	if prev != nil {
		t.queues = append([]queueKey(nil), prev.queues...)
	}
	for ci := range t.checks {
		c := &t.checks[ci]
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("check %d: %w", ci, err)
		}
		if c.Retransmit != 0 && (c.Retransmit < time.Millisecond || c.Retransmit > MaxDelay) {
			return nil, fmt.Errorf("check %d: %w: retransmission timeout %v: want 0 or %v to %v", ci, ErrInvalidCheck, c.Retransmit, time.Millisecond, MaxDelay)
		}
		t.launcherOf[ci] = -1
		rto := time.Duration(0)
		if c.Launcher != nil {
			t.launcherOf[ci] = t.launcherIndex(c.Launcher)
			if t.resenders[t.launcherOf[ci]] != nil && c.Retransmit < c.Timeout {
				rto = c.Retransmit
			}
		}
		t.queueOf[ci] = t.queue(queueKey{timeout: int64(c.Timeout), rto: int64(rto)})
	}
	return t, nil
}

// launcherIndex returns l's index among the table's launchers, adding it on
// first use.
func (t *checkTable) launcherIndex(l probe.Launcher) int {
	for li, have := range t.launchers {
		if have == l {
			return li
		}
	}
	r, _ := l.(probe.Resender)
	st, _ := l.(probe.Settler)
	t.launchers = append(t.launchers, l)
	t.resenders = append(t.resenders, r)
	t.settlers = append(t.settlers, st)
	return len(t.launchers) - 1
}

// maxChecks is the number of checks a record's uint16 check index addresses.
const maxChecks = 1 << 16

// queue returns the index of the deadline queue for k, creating it on first
// use.
func (t *checkTable) queue(k queueKey) int {
	if qi := slices.Index(t.queues, k); qi >= 0 {
		return qi
	}
	t.queues = append(t.queues, k)
	return len(t.queues) - 1
}

// use makes the shard work with table t from now on: deadline queues for new
// timeouts, batches for new launchers, and a first-probe pacer for each
// launcher (kept while its pace is the same). Checks that share a launcher
// share its pacer, at the most generous pace any of them asks for: a burst
// of first probes of many checks is paced as the one prober they go to
// takes them. It runs between steps, when every batch has been flushed.
func (s *shard) use(t *checkTable) {
	paces := make([]Pace, len(t.launchers))
	unlimited := make([]bool, len(t.launchers))
	for ci := range t.checks {
		li := t.launcherOf[ci]
		if li < 0 {
			continue
		}
		p := t.checks[ci].FirstProbes
		unlimited[li] = unlimited[li] || p.Rate <= 0
		paces[li].Rate = max(paces[li].Rate, p.Rate)
		paces[li].Burst = max(paces[li].Burst, p.Burst)
	}
	for li := range paces {
		if unlimited[li] {
			paces[li] = Pace{}
		}
		switch {
		case li >= len(s.first):
			s.first = append(s.first, newPacer(paces[li], len(s.e.shards)))
			s.paces = append(s.paces, paces[li])
		case paces[li] != s.paces[li]:
			s.first[li], s.paces[li] = newPacer(paces[li], len(s.e.shards)), paces[li]
		}
	}
	s.tab = t
	for qi := len(s.deadlines); qi < len(t.queues); qi++ {
		s.deadlines = append(s.deadlines, newDeadlineQueue(t.queues[qi]))
	}
	for len(s.batches) < len(t.launchers) {
		s.batches = append(s.batches, make([]probe.Request, 0, maxBatch))
		s.resends = append(s.resends, nil)
		s.settled = append(s.settled, 0)
	}
}
