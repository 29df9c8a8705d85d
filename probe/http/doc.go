// Package http is sonde's HTTP and HTTPS prober. It checks an endpoint the
// way cloud load balancers do (docs/semantics.md H1–H11): one GET or HEAD over a new
// TCP connection per probe, the status judged against a healthy set without
// following redirects, an optional body substring, Host header and SNI per
// check, and every failure named by a [probe.Outcome].
//
// The prober speaks HTTP/1.1 over connections it dials itself rather than
// through net/http's Transport: each probe runs on the caller's goroutine,
// its phases are timed through net/http/httptrace hooks, errors are
// classified by the phase they happened in, and the connection is closed
// with an RST so that no TIME_WAIT is left behind.
//
// The daemon runs plain-HTTP checks on [Loops] instead: a few epoll event
// loops driving non-blocking sockets, with the request prebuilt per check
// and an incremental response parser (respParser) that allocates nothing,
// so a probe costs no goroutine, timer or allocation. A loop closes a
// connection whose server already closed its side (the request asks it to)
// plainly, which leaves no TIME_WAIT on the prober either, and only the
// others with an RST. Both paths send the
// same bytes, apply the same bounds and classify failures through one
// function; the tests run every plain-HTTP case on both. The loops also run
// the daemon's TCP connect() probes ([Loops.ConnectLauncher]), the first
// half of an HTTP probe. HTTPS, and the one-shot probes of `sonde probe`
// and /probe, use [Prober.Report].
package http
