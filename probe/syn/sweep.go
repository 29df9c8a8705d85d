package syn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

// SweepOptions configures a [Sweep].
type SweepOptions struct {
	// Prober configures the SYN prober that sends the sweep. Its Table holds
	// the endpoints, one probe each, sent in order of id; Lanes is the number
	// of concurrent senders (default 1). Sink must be nil: the sweep collects
	// the results itself.
	Prober Config
	// Rate is the number of probes per second over all lanes; 0 sends as fast
	// as the lanes can.
	Rate float64
	// Timeout is how long a probe waits for its reply after its latest
	// SYN: later replies count as timeouts, and the sweep waits at most this
	// long after its last send.
	Timeout time.Duration
	// Retries is how many more passes send the SYN again to the endpoints
	// that have not answered yet (as masscan's --retries and zmap's
	// --probes do, but only to those): same source port and cookie, so an
	// answer to any of an endpoint's SYNs counts once. Default 0: one SYN
	// each.
	Retries int
	// RetryWait is the pause between the end of one pass and the start of
	// the next; default 1s, the kernel's initial retransmission timeout.
	RetryWait time.Duration
}

// MaxSweepRetries bounds SweepOptions.Retries.
const MaxSweepRetries = 10

// Sweep sends one SYN probe to every endpoint of a table, once, and keeps one
// outcome per probe: the engine of `sonde scan`. [NewSweep] opens the prober,
// [Sweep.Run] sends and collects, then stops the prober, and [Sweep.Result]
// reads each probe's outcome. Run and Result belong to one goroutine;
// Progress may be called from any while Run runs.
type Sweep struct {
	p         *Prober
	res       *sweepResults
	rate      float64
	timeout   time.Duration
	retries   int
	retryWait time.Duration
	ran       atomic.Bool
}

// SweepStats describes a finished sweep.
type SweepStats struct {
	Probes   int                    // endpoints in the table
	Sent     int                    // probes sent: ids [0, Sent), fewer than Probes when the sweep was cancelled
	Sending  time.Duration          // from the first send to the end of the last of the first pass
	Replies  int                    // probes answered within the timeout
	Resent   int                    // SYNs sent again by the retry passes (Counters.Retransmits)
	Late     int                    // replies that came after the timeout, counted as timeouts
	Outcomes [probe.NumOutcomes]int // outcomes of the probes sent; unanswered ones are timeouts
	Counters Counters               // the prober's counters at the end of the sweep

	Attach           bpf.Attach // how the eBPF program was attached, when Counters.Path is syn-bpf
	Source4, Source6 netip.Addr // source addresses (zero for a family not probed)
	Ports            PortRange  // source-port range
	Fallback         error      // why the eBPF capture was not used, when the sweep fell back to syn-packet
}

// ErrSweepRan is returned by [Sweep.Run] when the sweep has already run: a
// Sweep runs once.
var ErrSweepRan = errors.New("sweep has already run")

// NewSweep validates o and opens the sweep's prober (sockets and capture) in
// the calling thread's network namespace. Without CAP_NET_RAW it returns an
// error wrapping [ErrNoRawSocket]. Close releases it when Run is not called.
func NewSweep(o SweepOptions) (*Sweep, error) {
	return newSweep(o, New)
}

// newSweep is NewSweep with the prober's constructor as a seam for tests.
func newSweep(o SweepOptions, open func(Config) (*Prober, error)) (*Sweep, error) {
	switch {
	case o.Prober.Table == nil:
		return nil, errors.New("sweep needs a table of endpoints")
	case o.Prober.Sink != nil:
		return nil, errors.New("sweep collects its results itself: leave Prober.Sink nil")
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return nil, fmt.Errorf("sweep rate %v: want 0 (no limit) or a positive number of probes per second", o.Rate)
	case o.Timeout <= 0:
		return nil, fmt.Errorf("sweep timeout %v: want a positive duration", o.Timeout)
	case o.Retries < 0 || o.Retries > MaxSweepRetries:
		return nil, fmt.Errorf("sweep retries %d: want 0..%d", o.Retries, MaxSweepRetries)
	case o.RetryWait < 0:
		return nil, fmt.Errorf("sweep retry wait %v: want a positive duration, or 0 for the default", o.RetryWait)
	}
	if o.RetryWait == 0 {
		o.RetryWait = time.Second
	}
	s := &Sweep{res: newSweepResults(o.Prober.Table.Len(), o.Timeout), rate: o.Rate, timeout: o.Timeout,
		retries: o.Retries, retryWait: o.RetryWait}
	cfg := o.Prober
	cfg.Sink = s.res
	p, err := open(cfg)
	if err != nil {
		return nil, err
	}
	s.p = p
	return s, nil
}

// Run sends the sweep, then up to Retries passes to the endpoints not
// answered RetryWait after the pass before, and waits until every probe is
// answered, Timeout has passed since the last send, or ctx is done; then it
// stops the prober.
// Cancelling ctx stops the sending too: the probes sent are then a prefix of
// the table, [0, SweepStats.Sent). The error is ctx's, when the sweep was cut
// short, or the prober's when it could not be stopped cleanly; the stats are
// valid either way.
func (s *Sweep) Run(ctx context.Context) (SweepStats, error) {
	if s.ran.Swap(true) {
		return SweepStats{}, ErrSweepRan
	}
	n := s.p.table.Len()
	start := time.Now()
	sent := s.send(ctx, n, nil)
	sending := time.Since(start)
	for range s.retries {
		if s.wait(ctx, sent, time.Now().Add(s.retryWait)) {
			break // every probe sent is answered, or the sweep is cancelled
		}
		ids := s.unanswered(sent)
		s.send(ctx, len(ids), ids)
	}
	s.wait(ctx, sent, time.Now().Add(s.timeout))
	st := SweepStats{
		Probes: n, Sent: sent, Sending: sending,
		Counters: s.p.Counters(), Attach: s.p.Attachment(), Ports: s.p.Ports(), Fallback: s.p.CaptureFallback(),
	}
	st.Source4, st.Source6 = s.p.Sources()
	st.Resent = int(st.Counters.Retransmits)
	closeErr := s.p.Close() // stops the reader: the results are final
	st.Replies, st.Late = int(s.res.replies.Load()), int(s.res.late.Load())
	for id := range sent {
		o, _, _ := s.Result(uint32(id))
		st.Outcomes[o]++
	}
	var err error
	if ctx.Err() != nil {
		err = fmt.Errorf("sweep stopped after %d of %d probes: %w", sent, n, context.Cause(ctx))
	}
	if closeErr != nil {
		err = errors.Join(err, fmt.Errorf("stop the SYN prober: %w", closeErr))
	}
	return st, err
}

// send sends one probe per id, ids [0, n) or, for a retry pass, the n ids
// of retry (resent with the first pass's generation), from every lane, each
// lane taking the next chunk of ids and pacing itself at its share of the
// rate. A chunk is a full batch at high rates and about 5 ms worth of probes
// at low ones, so slow sweeps are smooth. A chunk once taken is launched
// whole, so on cancellation the ids of the first pass sent are exactly
// [0, sent).
func (s *Sweep) send(ctx context.Context, n int, retry []uint32) (sent int) {
	lanes, batch := len(s.p.lanes), s.p.batch
	if s.rate > 0 {
		batch = max(1, min(batch, int(s.rate/float64(lanes)/200)))
	}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for lane := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pace := newPacer(s.rate/float64(lanes), batch)
			reqs := make([]probe.Request, batch)
			for ctx.Err() == nil {
				first := int(next.Add(int64(batch))) - batch
				if first >= n {
					return
				}
				k := min(batch, n-first)
				for i := range k {
					id := uint32(first + i)
					if retry != nil {
						id = retry[first+i]
					}
					reqs[i] = probe.Request{ID: id, Gen: 1}
				}
				pace.wait(k)
				if retry != nil {
					s.p.Resend(lane, reqs[:k])
				} else {
					s.p.Launch(lane, reqs[:k])
				}
				done.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	return int(done.Load())
}

// wait returns once n probes are answered, the deadline has passed or ctx is
// done; it reports whether the sweep has nothing left to wait for (every
// probe answered, or ctx done). It polls: answers arrive in the reader's
// batches anyway.
func (s *Sweep) wait(ctx context.Context, n int, deadline time.Time) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.res.replies.Load() < int64(n) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return true
		case <-tick.C:
		}
	}
	return s.res.replies.Load() >= int64(n) || ctx.Err() != nil
}

// unanswered returns the ids among [0, n) whose probe has no answer yet, as
// the prober's state says (the reader may deliver more meanwhile: those
// retransmissions are skipped by Resend or answered twice, counted as
// duplicates).
func (s *Sweep) unanswered(n int) []uint32 {
	var ids []uint32
	for id := range uint32(n) {
		if st, ok := s.p.probes.get(id); ok && st.sent.Load()&answered == 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// Progress returns how many probes have been sent and answered so far.
func (s *Sweep) Progress() (sent, replies int) {
	return int(s.p.sentTotal()), int(s.res.replies.Load())
}

// Result returns the outcome of probe id and its round-trip time; answered
// is false (and the outcome Timeout) when no reply came in time. It is
// valid once Run has returned.
func (s *Sweep) Result(id uint32) (o probe.Outcome, rtt time.Duration, answered bool) {
	if s.res.outcome[id] == 0 {
		return probe.Timeout, 0, false
	}
	return probe.Outcome(s.res.outcome[id] - 1), time.Duration(s.res.rtt[id]), true
}

// Close releases the prober when Run was not called (Run releases it itself).
func (s *Sweep) Close() error { return s.p.Close() }

// sweepResults is a sweep's probe.Sink: one outcome and RTT per id, 9 bytes a
// probe. The prober delivers each id at most once per probe, from its reader
// goroutine (and from senders for probes without a route); replies that come
// after the timeout count as timeouts, as they would for the daemon.
type sweepResults struct {
	outcome []uint8 // 0: no answer yet; else Outcome+1
	rtt     []int64
	timeout time.Duration
	replies atomic.Int64
	late    atomic.Int64
}

func newSweepResults(n int, timeout time.Duration) *sweepResults {
	return &sweepResults{outcome: make([]uint8, n), rtt: make([]int64, n), timeout: timeout}
}

// Deliver records r.
func (r *sweepResults) Deliver(res probe.Result) {
	if int(res.ID) >= len(r.outcome) {
		return
	}
	if res.Latency > r.timeout {
		r.late.Add(1)
		return
	}
	r.outcome[res.ID] = uint8(res.Outcome) + 1
	r.rtt[res.ID] = int64(res.Latency)
	r.replies.Add(1)
}
