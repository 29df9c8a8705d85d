package http

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// connState is where a loop's connection is in its probe.
type connState uint8

const (
	stateFree       connState = iota // no probe: on the free list
	stateConnecting                  // connect() in progress
	stateWriting                     // connected, request not fully written
	stateReading                     // request written, reading the response
	stateClosing                     // io_uring: result delivered, the socket's completions not all in
)

// smallBuffer is the read buffer every connection has; a response head with
// a line that does not fit borrows a buffer of maxHeaderBytes.
const smallBuffer = ioBufferSize

// conn is one probe's connection on a loop, reused from probe to probe.
// It is owned by its loop's goroutine.
type conn struct {
	idx   int32 // index in loop.conns: the epoll data
	seq   int32 // probe number in this slot, in the epoll data too: events of an earlier probe are ignored
	state connState
	fd    int
	timer int // position in the loop's timer heap, -1 when not in it

	job      job
	p        *Prober    // nil for a connect() probe
	src      netip.Addr // source address; the zero Addr: the kernel's choice
	deadline int64      // probe.Nanotime
	startLag int64      // scheduler time from the request's Sent to the probe's start
	late     bool       // started past half its time: a timeout is this host's doing

	start, connected, request, first, last int64 // probe.Nanotime; 0 when not reached

	out   []byte // the request; points into wbuf or the prober's full request
	wpos  int    // bytes of out written
	wbuf  []byte // this connection's request storage when the Host depends on the target
	inPen bool   // an input event came before the request was written
	// peerClosed: the peer closed its side (FIN, or a reset): closing
	// leaves no TIME_WAIT here, so no RST is needed.
	peerClosed bool

	buf   []byte // read buffer: small, or a borrowed big one
	small []byte
	n     int   // unconsumed bytes at the start of buf
	got   int64 // bytes received
	resp  respParser

	// io_uring (see loopring.go): completions still to come, whether the
	// chain was queued, the close's completion came, the close is to set
	// SO_LINGER 0, and the sockaddrs the kernel reads at submission.
	ops                    int32
	opened, closed, linger bool
	sa, bsa                rawSockaddr
}

// Deadline errors, one per phase, so a timeout costs no allocation.
var (
	errConnectTimeout  = fmt.Errorf("connect: %w", os.ErrDeadlineExceeded)
	errWriteTimeout    = fmt.Errorf("write request: %w", os.ErrDeadlineExceeded)
	errResponseTimeout = fmt.Errorf("read response: %w", os.ErrDeadlineExceeded)
	errBodyTimeout     = fmt.Errorf("read body: %w", os.ErrDeadlineExceeded)
)

// lingerZero makes close() abort a connection with an RST: no TIME_WAIT.
// It is set at close, and only on a connection whose peer has not closed
// its side (see [loop.release]).
var lingerZero = unix.Linger{Onoff: 1, Linger: 0}

// alloc returns a free connection, nil when a ring's loop has one in every
// slot of its socket table.
func (l *loop) alloc() *conn {
	if n := len(l.free); n > 0 {
		c := l.conns[l.free[n-1]]
		l.free = l.free[:n-1]
		return c
	}
	if l.ring != nil && len(l.conns) >= l.ring.files {
		return nil
	}
	c := &conn{idx: int32(len(l.conns)), timer: -1, small: make([]byte, smallBuffer)}
	l.conns = append(l.conns, c)
	return c
}

// start begins the probe of j: it opens and connects the socket. A request
// past its deadline is delivered as late; one whose target is gone is
// dropped.
func (l *loop) start(j job) {
	lr := j.l
	lr.pending.Add(-1)
	if lr.stopped.Load() || l.ls.stopping() {
		lr.abandoned.Add(1)
		return
	}
	sched := l.ls.opt.Now()
	if sched >= j.req.Deadline {
		lr.skippedLate.Add(1)
		l.ls.opt.Sink.Deliver(probe.Result{ID: j.req.ID, Gen: j.req.Gen, Outcome: probe.LocalError, Cause: probe.CauseLate, Done: sched})
		lr.delivered.Add(1)
		return
	}
	t := l.ls.opt.Target(j.req.ID)
	if !t.Addr.IsValid() {
		lr.abandoned.Add(1)
		return
	}
	c := l.alloc()
	if c == nil {
		l.noSlot(j, sched)
		return
	}
	lr.started.Add(1)
	lr.inFlight.Add(1)
	now := probe.Nanotime()
	*c = conn{idx: c.idx, seq: c.seq + 1, state: stateConnecting, fd: -1, timer: -1,
		job: j, p: lr.prober.Load(), deadline: now + (j.req.Deadline - sched),
		startLag: sched - j.req.Sent, late: sched-j.req.Sent > (j.req.Deadline-j.req.Sent)/2,
		start: now, wbuf: c.wbuf, small: c.small, resp: c.resp}
	c.buf = c.small
	if c.p == nil {
		c.src = *lr.source.Load()
	} else {
		c.src = c.p.opts.Source
		if c.p.wire.full != nil {
			c.out = c.p.wire.full
		} else {
			c.wbuf = c.p.wire.appendFor(c.wbuf[:0], c.p, t)
			c.out = c.wbuf
		}
		c.resp.reset(c.p.opts.Method == "HEAD", c.p.want, c.p.opts.MaxBodyBytes)
	}
	l.timers.push(c.deadline, c)
	if l.ring != nil {
		l.ringStart(c, t)
	} else if err := l.connect(c, t); err != nil {
		l.fail(c, phaseConnect, err, nil, now)
	}
}

// connect opens c's socket and starts connecting it to t.
func (l *loop) connect(c *conn, t probe.Target) error {
	dst := t.Addr.Unmap()
	family := unix.AF_INET
	if !dst.Is4() {
		family = unix.AF_INET6
	}
	fd, err := rawSocket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return fmt.Errorf("connect: %w", os.NewSyscallError("socket", err))
	}
	c.fd = fd
	if src := c.src; src.IsValid() {
		if err := l.bind(fd, src.Unmap()); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	l.ev = unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: c.idx, Pad: c.seq}
	if err := rawEpollAdd(l.epfd, fd, &l.ev); err != nil {
		return fmt.Errorf("connect: %w", os.NewSyscallError("epoll_ctl", err))
	}
	sa, n := l.dst.set(dst, t.Port)
	switch err := rawConnect(fd, sa, n); err {
	case nil, unix.EINPROGRESS:
		return nil // the outcome comes as an event
	default:
		return fmt.Errorf("connect: %w", os.NewSyscallError("connect", err))
	}
}

// bind binds fd to source address src without taking a port
// (IP_BIND_ADDRESS_NO_PORT, as [probe.Dialer] does).
func (l *loop) bind(fd int, src netip.Addr) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	var sa unix.Sockaddr
	if src.Is4() {
		l.src4.Addr = src.As4()
		sa = &l.src4
	} else {
		l.src6.Addr = src.As16()
		sa = &l.src6
	}
	if err := unix.Bind(fd, sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}

// Input events: data, the peer's close, or an error.
const inEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR

// handle runs c's probe on as far as the events ev allow.
func (l *loop) handle(c *conn, ev uint32, now int64) {
	if ev&unix.EPOLLRDHUP != 0 {
		c.peerClosed = true
	}
	if c.state == stateConnecting {
		if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			errno, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err == nil && errno != 0 {
				err = unix.Errno(errno)
			}
			if err == nil {
				err = unix.ECONNRESET // hung up without an error: reset before it was established
			}
			l.fail(c, phaseConnect, fmt.Errorf("connect: %w", os.NewSyscallError("connect", err)), nil, now)
			return
		}
		if ev&unix.EPOLLOUT == 0 {
			return
		}
		if c.p == nil { // a connect() probe: established is all it asks
			c.connected = now
			l.finish(c, probe.Success, probe.CauseNone, nil, now)
			return
		}
		c.connected, c.request, c.state = now, now, stateWriting
	}
	if c.state == stateWriting {
		if ev&inEvents != 0 {
			c.inPen = true
		}
		if !l.write(c, now) {
			return
		}
		if !c.inPen {
			return // the response comes with a later event
		}
	}
	if c.state == stateReading && (ev&inEvents != 0 || c.inPen) {
		c.inPen = false
		l.read(c, now)
	}
}

// write writes what is left of c's request; it reports whether all of it
// is written (c is then reading), false when the socket is full or the
// probe ended.
func (l *loop) write(c *conn, now int64) bool {
	for c.wpos < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.wpos:])
		switch {
		case err == unix.EAGAIN:
			return false
		case err == unix.EINTR:
			continue
		case err != nil:
			l.fail(c, phaseWrite, fmt.Errorf("write request: %w", os.NewSyscallError("write", err)), nil, now)
			return false
		}
		c.wpos += n
	}
	c.state = stateReading
	return true
}

// read reads what the socket has and parses it, until the socket is empty
// or the probe ends.
func (l *loop) read(c *conn, now int64) {
	for {
		if c.n == len(c.buf) && !l.growBuffer(c) {
			l.fail(c, c.phase(), c.resp.tooLong(), nil, now)
			return
		}
		n, err := rawRead(c.fd, c.buf[c.n:])
		switch {
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR:
			continue
		case err != nil:
			ph := c.phase()
			l.fail(c, ph, fmt.Errorf("%s: %w", readWhat(ph), os.NewSyscallError("read", err)), err, now)
			return
		}
		if !l.took(c, n, now) {
			return
		}
	}
}

// took parses the n bytes a read added to the end of c's buffer (0: the
// server closed its side) and ends the probe when its answer is complete
// or wrong; it reports whether the probe reads on.
func (l *loop) took(c *conn, n int, now int64) bool {
	var err error
	if n == 0 {
		c.peerClosed = true
		if err = c.resp.eof(); err == nil {
			l.complete(c, now)
			return false
		}
	} else {
		if c.got == 0 {
			c.first = now
		}
		c.got += int64(n)
		c.n += n
		var used int
		used, err = c.resp.parse(c.buf[:c.n])
		if used > 0 {
			c.n = copy(c.buf, c.buf[used:c.n])
		}
		if err == nil && c.resp.done() {
			l.complete(c, now)
			return false
		}
	}
	if err != nil {
		ph := c.phase()
		l.fail(c, ph, fmt.Errorf("%s: %w", readWhat(ph), err), nil, now)
		return false
	}
	return true
}

// growBuffer moves c's unconsumed bytes, a head line that fills the small
// buffer, into a big one; it reports false when c may not grow (it already
// has, or it is past the head).
func (l *loop) growBuffer(c *conn) bool {
	if len(c.buf) != smallBuffer || !c.resp.inHead() {
		return false
	}
	var big []byte
	if n := len(l.big); n > 0 {
		big, l.big = l.big[n-1], l.big[:n-1]
	} else {
		big = make([]byte, maxHeaderBytes)
	}
	c.n = copy(big, c.buf[:c.n])
	c.buf = big
	return true
}

// phase is the phase of a read failure: the head or the body.
func (c *conn) phase() phase {
	if c.resp.inHead() {
		return phaseResponse
	}
	return phaseBody
}

func readWhat(ph phase) string {
	if ph == phaseBody {
		return "read body"
	}
	return "read response"
}

// complete ends c's probe with a complete response (or its body bound).
func (l *loop) complete(c *conn, now int64) {
	c.last = now
	out, err := c.p.judge(c.resp.status, c.resp.found)
	l.finish(c, out, probe.CauseNone, err, now)
}

// fail ends c's probe with err in phase ph; sockErr is the socket's
// error when a read failed. Classification is the one-shot path's.
func (l *loop) fail(c *conn, ph phase, err, sockErr error, now int64) {
	if ph == phaseBody {
		c.last = now
	}
	out := outcomeOf(ph, err, sockErr, false, false)
	cause := probe.CauseNone
	if out == probe.LocalError {
		cause = probe.LocalCauseOf(err)
	}
	l.finish(c, out, cause, err, now)
}

// timeout ends c's probe at its deadline: a Timeout, or a LocalError
// (CauseLate) when it started late or the loop saw the deadline late, by
// the rules of [probe.Workers].
func (l *loop) timeout(c *conn, now int64) {
	var err error
	switch c.state {
	case stateConnecting:
		err = errConnectTimeout
	case stateWriting:
		err = errWriteTimeout
	default:
		err = errResponseTimeout
		if !c.resp.inHead() {
			err, c.last = errBodyTimeout, now
		}
	}
	if c.late || now-c.deadline > int64(lateWake) {
		err = fmt.Errorf("this host started the probe %v after it was due and saw its end %v after its deadline: too busy to judge the target (%w)",
			time.Duration(c.startLag), time.Duration(max(now-c.deadline, 0)), err)
		l.finish(c, probe.LocalError, probe.CauseLate, err, now)
		return
	}
	l.finish(c, probe.Timeout, probe.CauseNone, err, now)
}

// lateWake is how long after a probe's deadline its loop may notice the
// timeout before the host counts as too busy to judge the probe, as for
// [probe.Workers].
const lateWake = 100 * time.Millisecond

// noSlot delivers j's probe as a LocalError: its loop's socket table is
// full.
func (l *loop) noSlot(j job, sched int64) {
	lr := j.l
	lr.started.Add(1)
	rep := &l.rep
	*rep = probe.Report{Result: probe.Result{ID: j.req.ID, Gen: j.req.Gen, Outcome: probe.LocalError, Cause: probe.CauseDescriptors, Done: sched}, Err: errNoSlot}
	if f := l.ls.opt.OnReport; f != nil {
		f(rep.ID, rep)
	}
	l.ls.opt.Sink.Deliver(rep.Result)
	lr.delivered.Add(1)
	rep.Err = nil
}

// finish closes c, delivers its result and frees it.
func (l *loop) finish(c *conn, out probe.Outcome, cause probe.LocalCause, err error, now int64) {
	free := l.release(c)
	lr := c.job.l
	lr.inFlight.Add(-1)
	if lr.stopped.Load() {
		lr.abandoned.Add(1)
		if free {
			l.recycle(c)
		}
		return
	}
	rep := &l.rep
	*rep = probe.Report{Result: probe.Result{ID: c.job.req.ID, Gen: c.job.req.Gen, Outcome: out, Cause: cause}, Err: err}
	if c.connected != 0 {
		rep.Phases.Connect = time.Duration(c.connected - c.start)
	}
	if c.first != 0 {
		rep.Phases.FirstByte = time.Duration(c.first - c.request)
	}
	if c.last != 0 {
		rep.Phases.LastByte = time.Duration(c.last - c.first)
		rep.Latency = time.Duration(c.last - c.request)
	} else {
		rep.Latency = time.Duration(now - c.start)
	}
	if c.p == nil { // a connect() probe: its latency is its connect phase, answered or not
		rep.Phases.Connect = rep.Latency
	} else {
		if !c.resp.inHead() {
			rep.Status = uint16(c.resp.status)
			rep.ContentLength = c.resp.contentLength()
		}
		rep.BodyBytes = c.resp.bodyN
	}
	rep.Done = l.ls.opt.Now()
	if free {
		l.recycle(c)
	}
	if f := l.ls.opt.OnReport; f != nil {
		f(rep.ID, rep)
	}
	l.ls.opt.Sink.Deliver(rep.Result)
	lr.delivered.Add(1)
	rep.Err = nil
}

// release closes c's socket and takes it off the timer heap. The prober
// must keep no TIME_WAIT, which a close of its own before the peer's
// would leave for a minute. So a socket whose peer has not closed its side
// is closed with an RST (SO_LINGER 0, set now); one whose peer has — the
// usual end of a probe, as the request asks the server to close — is
// closed plainly: the peer closed first, so no TIME_WAIT is left here, the
// server sees an orderly close (or an RST from the kernel if response bytes
// were left unread), and the probe makes one system call less. It reports
// whether c may be recycled now; on a ring, c is recycled when the last
// completion of its socket comes.
func (l *loop) release(c *conn) bool {
	l.timers.remove(c)
	if l.ring != nil {
		return l.ringRelease(c)
	}
	if c.fd >= 0 {
		if !c.peerClosed {
			_ = rawLingerZero(c.fd) // a failure leaves a TIME_WAIT at worst
		}
		_ = rawClose(c.fd) // closing removes it from epoll
		c.fd = -1
	}
	return true
}

// recycle returns c, and a big buffer it borrowed, to the free lists.
func (l *loop) recycle(c *conn) {
	if len(c.buf) != smallBuffer {
		l.big = append(l.big, c.buf)
	}
	c.buf, c.out, c.p, c.job = nil, nil, nil, job{}
	c.state = stateFree
	l.free = append(l.free, c.idx)
}

// abandon drops c's probe without a result: the loops stop.
func (l *loop) abandon(c *conn) {
	free := l.release(c)
	c.job.l.inFlight.Add(-1)
	c.job.l.abandoned.Add(1)
	if free {
		l.recycle(c)
	}
}
