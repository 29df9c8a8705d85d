// Package tcp is sonde's connect() prober, the TCP check for hosts where raw
// sockets are not allowed (docs/semantics.md T1–T4). A probe is one connect(): an
// established connection is success, an RST is refused, silence until the
// deadline is a timeout, and a missing route is unreachable. No data is
// sent (T3); the connection is closed at once with an RST. A connect() that
// fails for this host's own reasons (descriptors, local ports, buffers,
// permissions) is a LocalError, no verdict on the target.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// Options configure a connect() prober. The zero value is ready to use.
type Options struct {
	// Source is the local address probes are sent from; the zero Addr lets
	// the kernel choose.
	Source netip.Addr
}

// Prober runs connect() probes. It is immutable and safe for concurrent use.
type Prober struct {
	dialer *probe.Dialer
	source netip.Addr
}

var (
	_ probe.Prober   = (*Prober)(nil)
	_ probe.Reporter = (*Prober)(nil)
)

// New returns a connect() prober for o.
func New(o Options) *Prober {
	return &Prober{dialer: probe.NewDialer(o.Source), source: o.Source}
}

// Source returns the local address p's probes are sent from; the zero Addr
// when the kernel chooses. Other paths of the same probe (the HTTP event
// loops' connect() launchers) take it from here.
func (p *Prober) Source() netip.Addr { return p.source }

// Probe connects to t and closes the connection; ctx carries the timeout
// (T2). Latency is the connect time: from connect() to the established
// connection, or to the failure.
func (p *Prober) Probe(ctx context.Context, t probe.Target) probe.Result {
	return p.Report(ctx, t).Result
}

// Report runs one probe like [Prober.Probe] and returns its detail; only
// Phases.Connect is set.
func (p *Prober) Report(ctx context.Context, t probe.Target) probe.Report {
	var rep probe.Report
	if !t.Addr.IsValid() {
		rep.Outcome, rep.Err = probe.Error, errors.New("connect: target has no address")
		return rep
	}
	start := time.Now()
	c, err := p.dialer.DialContext(ctx, netip.AddrPortFrom(t.Addr.Unmap(), t.Port))
	rep.Latency = time.Since(start)
	rep.Phases.Connect = rep.Latency
	if err != nil {
		// A cancelled ctx gives an error that is not a timeout: Error.
		rep.Outcome, rep.Cause, rep.Err = probe.NetOutcome(err), probe.LocalCauseOf(err), fmt.Errorf("connect: %w", err)
		return rep
	}
	_ = c.Close() // SO_LINGER 0: an RST; a close error changes nothing for the verdict
	rep.Outcome = probe.Success
	return rep
}
