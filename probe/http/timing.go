package http

import (
	"context"
	"crypto/tls"
	"net/http/httptrace"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// timing records the moments of one probe. Its hooks are installed as an
// httptrace.ClientTrace: net.Dialer calls ConnectStart and ConnectDone, the
// prober calls the others as it goes. A probe runs on one goroutine (a
// single-address dial does not spawn any), so timing needs no lock.
type timing struct {
	start        time.Time // probe start
	connectStart time.Time
	connectDone  time.Time
	tlsStart     time.Time
	tlsDone      time.Time
	request      time.Time // just before the request is written: latency starts
	firstByte    time.Time // first response byte
	lastByte     time.Time // last body byte read: latency ends
}

// trace returns ctx with t's hooks added to any trace ctx already carries,
// and the combined trace for the prober to call.
func (t *timing) trace(ctx context.Context) (context.Context, *httptrace.ClientTrace) {
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		ConnectStart:         func(string, string) { t.connectStart = time.Now() },
		ConnectDone:          func(string, string, error) { t.connectDone = time.Now() },
		TLSHandshakeStart:    func() { t.tlsStart = time.Now() },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { t.tlsDone = time.Now() },
		GotConn:              func(httptrace.GotConnInfo) { t.request = time.Now() },
		GotFirstResponseByte: func() { t.firstByte = time.Now() },
	})
	return ctx, httptrace.ContextClientTrace(ctx)
}

// phases returns the durations between the recorded moments; a phase whose
// end was not reached is zero.
func (t *timing) phases() probe.Phases {
	return probe.Phases{
		Connect:   span(t.connectStart, t.connectDone),
		TLS:       span(t.tlsStart, t.tlsDone),
		FirstByte: span(t.request, t.firstByte),
		LastByte:  span(t.firstByte, t.lastByte),
	}
}

// latency is H8's latency, from just before the request is written to the
// last byte read, when the probe got that far; otherwise it is the time from
// the probe's start until it failed.
func (t *timing) latency() time.Duration {
	if !t.lastByte.IsZero() {
		return t.lastByte.Sub(t.request)
	}
	return time.Since(t.start)
}

func span(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() {
		return 0
	}
	return to.Sub(from)
}
