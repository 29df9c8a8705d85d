package scheduler

import (
	"fmt"
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
	launcherOf []int            // per check, index into launchers; -1 without a launcher
	queueOf    []int            // per check, index of its timeout's deadline queue
	timeouts   []int64          // per deadline queue, its timeout in ns; only grows from table to table
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
		t.timeouts = append([]int64(nil), prev.timeouts...)
	}
	for ci := range t.checks {
		c := &t.checks[ci]
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("check %d: %w", ci, err)
		}
		t.queueOf[ci] = t.timeoutQueue(c.Timeout)
		t.launcherOf[ci] = -1
		if c.Launcher == nil {
			continue
		}
		for li, l := range t.launchers {
			if l == c.Launcher {
				t.launcherOf[ci] = li
				break
			}
		}
		if t.launcherOf[ci] < 0 {
			t.launcherOf[ci] = len(t.launchers)
			t.launchers = append(t.launchers, c.Launcher)
		}
	}
	return t, nil
}

// maxChecks is the number of checks a record's uint16 check index addresses.
const maxChecks = 1 << 16

// timeoutQueue returns the index of the deadline queue for timeout d,
// creating it on first use.
func (t *checkTable) timeoutQueue(d time.Duration) int {
	for qi, to := range t.timeouts {
		if to == int64(d) {
			return qi
		}
	}
	t.timeouts = append(t.timeouts, int64(d))
	return len(t.timeouts) - 1
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
	for qi := len(s.deadlines); qi < len(t.timeouts); qi++ {
		s.deadlines = append(s.deadlines, deadlineQueue{timeout: t.timeouts[qi]})
	}
	for len(s.batches) < len(t.launchers) {
		s.batches = append(s.batches, make([]probe.Request, 0, maxBatch))
	}
}
