package http

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// maxHeaderBytes bounds the status line and headers of a response.
const maxHeaderBytes = 64 << 10

// ioBufferSize is the size of the read and write buffers of a probe.
const ioBufferSize = 4 << 10

// Prober runs HTTP or HTTPS probes for one check. It is immutable after
// [New] and safe for concurrent use.
type Prober struct {
	opts        Options // with defaults
	dialer      *probe.Dialer
	url         *url.URL    // request target only (Opaque); shared, read-only
	header      http.Header // request headers; shared, read-only
	want        []byte      // body substring, nil for none
	defaultPort uint16      // 80 or 443
	tls         *tls.Config // nil for plain HTTP
	tlsFixed    bool        // tls.ServerName is set: the server name is the same for every target
	bufs        sync.Pool   // *buffers
	wire        wireRequest // the request as bytes, for the event-loop path
}

var (
	_ probe.Prober   = (*Prober)(nil)
	_ probe.Reporter = (*Prober)(nil)
)

// New returns a prober for o after applying its defaults, validating it and
// loading its TLS files; ctx bounds their reading.
func New(ctx context.Context, o Options) (*Prober, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.WithDefaults()
	p := &Prober{
		opts:        o,
		dialer:      probe.NewDialer(o.Source),
		url:         &url.URL{Scheme: o.Scheme, Opaque: strings.SplitN(o.Path, "#", 2)[0]},
		header:      requestHeader(o),
		defaultPort: 80,
	}
	if o.Body != "" {
		p.want = []byte(o.Body)
	}
	wire, err := newWireRequest(p)
	if err != nil {
		return nil, fmt.Errorf("new http prober: %w", err)
	}
	p.wire = wire
	scanSize := ioBufferSize + len(p.want)
	p.bufs.New = func() any { return newBuffers(scanSize) }
	if o.Scheme == "https" {
		p.defaultPort = 443
		cfg, err := loadTLSConfig(ctx, o.TLS)
		if err != nil {
			return nil, fmt.Errorf("new http prober: %w", err)
		}
		p.tls = cfg
		if name := p.fixedServerName(); name != "" {
			cfg.ServerName, p.tlsFixed = name, true
		}
	}
	return p, nil
}

// fixedServerName returns the server name when it does not depend on the
// target (SNI or Host set), else "".
func (p *Prober) fixedServerName() string {
	if p.opts.SNI == "" && p.opts.Host == "" {
		return ""
	}
	return p.serverName(probe.Target{}, p.opts.Host)
}

// requestHeader returns the headers every request of o carries.
func requestHeader(o Options) http.Header {
	h := o.Headers.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Set("User-Agent", o.UserAgent)
	if !o.Token.IsZero() {
		h.Set(TokenHeader, o.Token.HeaderValue())
	}
	return h
}

// Probe runs one probe of t; ctx carries its deadline (without one, a
// silent server holds the probe until ctx is cancelled). Result.Status is
// the response's status code whenever a response arrived; Result.Latency
// is as described for [Prober.Report].
func (p *Prober) Probe(ctx context.Context, t probe.Target) probe.Result {
	return p.Report(ctx, t).Result
}

// Report runs one probe of t like [Prober.Probe] and returns its detail.
// Latency runs from just before the request is written (after connect and
// TLS) to the last byte of the body read (H8); when no response arrived it
// is the time from the probe's start to its failure instead. Phases are
// described at [probe.Phases]; TLS is zero for plain HTTP.
func (p *Prober) Report(ctx context.Context, t probe.Target) probe.Report {
	tm := timing{start: time.Now()}
	ctx, trace := tm.trace(ctx)
	b := p.bufs.Get().(*buffers)
	defer p.putBuffers(b)

	rep := p.run(ctx, trace, &tm, t, b)
	rep.Latency = tm.latency()
	rep.Phases = tm.phases()
	return rep
}

// run does the probe's phases in order and stops at the first failure.
func (p *Prober) run(ctx context.Context, trace *httptrace.ClientTrace, tm *timing, t probe.Target, b *buffers) (rep probe.Report) {
	fail := func(ph phase, err error, rr *respReader) probe.Report {
		rep.Outcome, rep.Err = classify(ctx, ph, err, rr), err
		if rep.Outcome == probe.LocalError {
			rep.Cause = probe.LocalCauseOf(err)
		}
		return rep
	}
	conn, err := p.connect(ctx, t)
	if err != nil {
		return fail(phaseConnect, err, nil)
	}
	defer conn.Close() // SO_LINGER 0: an RST, no TIME_WAIT
	defer watch(ctx, conn)()

	host := p.hostHeader(t)
	var rw net.Conn = conn
	if p.tls != nil {
		tc, err := p.handshake(trace, conn, p.serverName(t, host), &rep)
		if err != nil {
			return fail(phaseTLS, err, nil)
		}
		rw = tc // closing conn, not tc, skips the close_notify alert
	}

	req := p.request(host)
	if err := p.send(trace, rw, req, b); err != nil {
		return fail(phaseWrite, err, nil)
	}
	b.rr.reset(rw, maxHeaderBytes, p.tls != nil)
	b.br.Reset(&b.rr)
	resp, err := p.receive(trace, req, b)
	if err != nil {
		return fail(phaseResponse, err, &b.rr)
	}
	rep.Status, rep.ContentLength = uint16(resp.StatusCode), resp.ContentLength
	b.rr.limit = math.MaxInt64 // the body is bounded by MaxBodyBytes
	// resp.Body is never closed: Close would drain the whole body. The
	// connection's close ends it.
	found, n, err := scanBody(resp.Body, p.want, p.opts.MaxBodyBytes, b.scan)
	tm.lastByte = time.Now()
	rep.BodyBytes = n
	if err != nil {
		return fail(phaseBody, fmt.Errorf("read body: %w", err), &b.rr)
	}
	rep.Outcome, rep.Err = p.judge(resp.StatusCode, found)
	return rep
}

// connect dials t.
func (p *Prober) connect(ctx context.Context, t probe.Target) (*net.TCPConn, error) {
	if !t.Addr.IsValid() {
		return nil, errors.New("connect: target has no address")
	}
	c, err := p.dialer.DialContext(ctx, netip.AddrPortFrom(t.Addr.Unmap(), t.Port))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return c, nil
}

// watch makes ctx's deadline and cancellation apply to every I/O on c. Its
// result stops the watch.
func watch(ctx context.Context, c net.Conn) (stop func() bool) {
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d) // fails only on a closed conn, which I/O reports
	}
	return context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
}

// request returns the request of a probe with Host header host.
func (p *Prober) request(host string) *http.Request {
	return &http.Request{
		Method:     p.opts.Method,
		URL:        p.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     p.header,
		Host:       host,
		Close:      true, // "Connection: close": one request per connection (H8)
	}
}

// send writes req to c. The latency of H8 starts just before (GotConn).
func (p *Prober) send(trace *httptrace.ClientTrace, c net.Conn, req *http.Request, b *buffers) error {
	b.bw.Reset(c)
	defer b.bw.Reset(nil)
	trace.GotConn(httptrace.GotConnInfo{Conn: c})
	err := req.Write(b.bw)
	if err == nil {
		err = b.bw.Flush()
	}
	if trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

// receive reads the response head, skipping interim 1xx responses other
// than 101.
func (p *Prober) receive(trace *httptrace.ClientTrace, req *http.Request, b *buffers) (*http.Response, error) {
	if _, err := b.br.Peek(1); err != nil {
		if b.rr.n == 0 && err == io.EOF {
			return nil, fmt.Errorf("read response: %w", ErrEmptyResponse)
		}
		return nil, fmt.Errorf("read response: %w", err)
	}
	trace.GotFirstResponseByte()
	for {
		resp, err := http.ReadResponse(b.br, req)
		if err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// judge returns the outcome of a complete response (H3, H4, H5, H11).
func (p *Prober) judge(code int, found bool) (probe.Outcome, error) {
	if !p.opts.Healthy.Contains(code) {
		return probe.HTTPStatus, fmt.Errorf("%w: %d", ErrStatus, code)
	}
	if !found {
		return probe.BodyMismatch, ErrBodyMismatch
	}
	return probe.Success, nil
}

// buffers are a probe's reusable I/O buffers.
type buffers struct {
	rr   respReader
	br   *bufio.Reader
	bw   *bufio.Writer
	scan []byte // body search window
}

// putBuffers returns b to the pool without references to the probe's
// connection.
func (p *Prober) putBuffers(b *buffers) {
	b.rr.reset(nil, 0, false)
	b.br.Reset(&b.rr)
	p.bufs.Put(b)
}

func newBuffers(scanSize int) *buffers {
	b := &buffers{scan: make([]byte, scanSize)}
	b.br = bufio.NewReaderSize(&b.rr, ioBufferSize)
	b.bw = bufio.NewWriterSize(nil, ioBufferSize)
	return b
}
