package syn

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// OneShot probes a fixed set of endpoints on demand, one SYN per call, for
// one-shot tools such as `sonde probe syn://host:port`. It is a
// [probe.Prober] and a [probe.Reporter] over one [Prober]; every endpoint it
// may probe is given to [NewOneShot]. It is safe for concurrent use.
type OneShot struct {
	p   *Prober
	ids map[netip.AddrPort]uint32

	launch  sync.Mutex // serialises Launch: the prober has one lane
	mu      sync.Mutex // guards waiting and gen
	waiting map[uint32]chan probe.Result
	gen     uint32
}

var (
	_ probe.Prober   = (*OneShot)(nil)
	_ probe.Reporter = (*OneShot)(nil)
)

// NewOneShot starts a SYN prober for endpoints. cfg's Table, Sink and Lanes
// are set by NewOneShot; the other fields keep their meaning. Without
// CAP_NET_RAW it returns an error wrapping [ErrNoRawSocket].
func NewOneShot(endpoints []netip.AddrPort, cfg Config) (*OneShot, error) {
	o := &OneShot{ids: make(map[netip.AddrPort]uint32, len(endpoints)), waiting: map[uint32]chan probe.Result{}}
	table := probe.NewTable(len(endpoints))
	for _, ep := range endpoints {
		ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
		if _, ok := o.ids[ep]; !ok {
			o.ids[ep] = table.Add(ep)
		}
	}
	cfg.Table, cfg.Sink, cfg.Lanes = table, o, 1
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	o.p = p
	return o, nil
}

// Deliver hands a reply to the call waiting for it.
func (o *OneShot) Deliver(r probe.Result) {
	o.mu.Lock()
	ch := o.waiting[r.ID]
	o.mu.Unlock()
	if ch != nil {
		select {
		case ch <- r:
		default: // a second answer to the same probe
		}
	}
}

// Probe sends one SYN to t and waits for the reply or ctx's end (Timeout).
// It never retransmits; see [OneShot.Retransmitting].
func (o *OneShot) Probe(ctx context.Context, t probe.Target) probe.Result {
	return o.Report(ctx, t).Result
}

// Report is Probe with an error saying why the probe failed.
func (o *OneShot) Report(ctx context.Context, t probe.Target) probe.Report {
	return o.report(ctx, t, 0)
}

// Retransmitting returns a prober that probes like o and sends an
// unanswered SYN again after rto, then after twice as long again, and so on
// until ctx ends, as a kernel retransmits a SYN (T5). rto 0 never does. The
// latency of a probe answered after a retransmission counts from the first
// send, as for the daemon.
func (o *OneShot) Retransmitting(rto time.Duration) probe.Reporter {
	return retransmitting{o, rto}
}

type retransmitting struct {
	o   *OneShot
	rto time.Duration
}

func (r retransmitting) Probe(ctx context.Context, t probe.Target) probe.Result {
	return r.Report(ctx, t).Result
}

func (r retransmitting) Report(ctx context.Context, t probe.Target) probe.Report {
	return r.o.report(ctx, t, r.rto)
}

// report probes t, retransmitting every rto (doubling) when rto > 0.
func (o *OneShot) report(ctx context.Context, t probe.Target, rto time.Duration) probe.Report {
	ep := netip.AddrPortFrom(t.Addr.Unmap(), t.Port)
	id, ok := o.ids[ep]
	if !ok {
		return probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: fmt.Errorf("syn: %s was not given to NewOneShot", ep)}
	}
	ch := make(chan probe.Result, 1)
	start := time.Now()
	o.mu.Lock()
	if o.waiting[id] != nil {
		o.mu.Unlock()
		return probe.Report{Result: probe.Result{Outcome: probe.Error}, Err: fmt.Errorf("syn: %s is already being probed", ep)}
	}
	o.waiting[id] = ch
	o.gen++
	req := probe.Request{ID: id, Gen: o.gen}
	o.mu.Unlock()
	// Launch may deliver at once (a send that fails), which takes mu.
	o.launch.Lock()
	o.p.Launch(0, []probe.Request{req})
	o.launch.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.waiting, id)
		o.mu.Unlock()
	}()
	var resend <-chan time.Time // nil without retransmissions: never ready
	if rto > 0 {
		tm := time.NewTimer(rto)
		defer tm.Stop()
		resend = tm.C
	}
	retransmits := uint8(0)
	for wait := rto; ; {
		select {
		case r := <-ch:
			return oneShotReport(ep, r, start, retransmits)
		case <-ctx.Done():
			return probe.Report{
				Result: probe.Result{ID: id, Gen: req.Gen, Outcome: probe.Timeout, Latency: time.Since(start), Retransmits: retransmits},
				Err:    fmt.Errorf("no SYN-ACK or RST from %s after %d SYNs: %w", ep, retransmits+1, ctx.Err()),
			}
		case <-resend:
		}
		o.launch.Lock()
		o.p.Resend(0, []probe.Request{req})
		o.launch.Unlock()
		retransmits++
		wait *= 2
		resend = time.After(wait)
	}
}

// oneShotReport turns the reply to a probe of ep into its report. After
// retransmissions the latency counts from the first send.
func oneShotReport(ep netip.AddrPort, r probe.Result, start time.Time, retransmits uint8) probe.Report {
	if r.Retransmits = retransmits; retransmits > 0 {
		r.Latency = time.Since(start)
	}
	rep := probe.Report{Result: r}
	switch r.Outcome {
	case probe.Refused:
		rep.Err = fmt.Errorf("%s answered the SYN with RST: nothing listens on port %d", ep.Addr(), ep.Port())
	case probe.Unreachable:
		rep.Err = fmt.Errorf("%s is unreachable (ICMP destination unreachable or no route)", ep.Addr())
	case probe.Error:
		rep.Err = fmt.Errorf("syn: the probe to %s could not be sent", ep)
	case probe.LocalError:
		rep.Err = fmt.Errorf("syn: the probe to %s could not be sent from this host (%s)", ep, r.Cause)
	}
	return rep
}

// Path returns the path in use: [probe.PathSynBPF] or [probe.PathSynPacket].
func (o *OneShot) Path() probe.TCPPath { return o.p.Path() }

// Close releases the prober's sockets and eBPF objects.
func (o *OneShot) Close() error { return o.p.Close() }
