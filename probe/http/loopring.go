package http

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// The loops on io_uring. A probe's system calls go into the loop's ring as
// one linked chain — socket, [setsockopt and bind for a source address,]
// connect, send, recv — and the ring takes the chains of many probes in one
// io_uring_enter, so a probe costs a fraction of a system call instead of
// six. The socket is a direct one: it lives in the ring's table, in the
// slot of the probe's connection, and never in the process's descriptor
// table. Each SQE's user data is its connection's index and what it does;
// every SQE gets a completion, counted in conn.ops, and a connection is
// reused only when all of them came, so no buffer or slot is reused while
// the kernel may still touch it.
//
// A probe's result is delivered when its answer (or failure, or deadline)
// is known; closing the socket follows: cancel what is in flight, set
// SO_LINGER 0 when the server has not closed its side (see
// [loop.release]), close the slot. After a complete response whose end was
// not the server's close, a non-blocking recv first asks whether the
// server's FIN has come.

// What an SQE does, in the low byte of its user data.
const (
	udSocket uint8 = iota + 1
	udBindOpt
	udBind
	udConnect
	udSend
	udRecv
	udEOF // the non-blocking recv after a complete response
	udCancel
	udLinger
	udClose
)

// Ring sizes: SQEs per loop (a chain takes at most six; the queue is
// submitted when it fills) and direct sockets per loop, the most
// connections one loop has open at once.
const (
	ringEntries = 2048
	ringFiles   = 65536
)

// ipBindNoPort is the option value of IP_BIND_ADDRESS_NO_PORT, which the
// kernel reads when the SQE runs.
var ipBindNoPort int32 = 1

// errNoSlot fails a probe that finds every direct-socket slot of its loop
// in use: this host's limit (counted as descriptors), not the target's.
var errNoSlot = fmt.Errorf("connect: %w", os.NewSyscallError("socket", unix.EMFILE))

// ud is the user data of an SQE of c that does what.
func ud(c *conn, what uint8) uint64 { return uint64(c.idx)<<8 | uint64(what) }

// sqeFor returns the next SQE, for op on c's slot with flags, its user
// data set; it counts the completion to come in c.ops. Room is reserved.
func (l *loop) sqeFor(c *conn, op, flags, what uint8) *sqe {
	s := l.ring.next()
	s.opcode, s.flags, s.fd, s.userData = op, flags, c.idx, ud(c, what)
	c.ops++
	return s
}

// setsockoptSQE queues setsockopt(level, name) of c's socket to the value
// at val, of size bytes, which the kernel reads when the SQE runs.
func (l *loop) setsockoptSQE(c *conn, flags, what uint8, level, name uint64, val unsafe.Pointer, size uint32) {
	s := l.sqeFor(c, opUringCmd, sqeFixedFile|flags, what)
	s.off, s.addr = socketSetsockopt, level|name<<32
	s.addr3, s.fileIndex = uint64(uintptr(val)), size
}

// recvSQE queues a recv on c's socket into b, which is not empty.
func (l *loop) recvSQE(c *conn, what uint8, b []byte, msgFlags uint32) {
	s := l.sqeFor(c, opRecv, sqeFixedFile, what)
	s.addr, s.len, s.opFlags = uint64(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b)), msgFlags
}

// ringStart queues the chain that opens, connects and (for HTTP) sends the
// request of c's probe, and reads the first of its answer.
func (l *loop) ringStart(c *conn, t probe.Target) {
	n := uint32(2) // socket, connect
	if c.src.IsValid() {
		n += 2
	}
	if c.p != nil {
		n += 2 // send, recv
	}
	if !l.reserve(n) {
		l.ringFull(c, "connect", c.start)
		return
	}
	c.opened = true
	dst := t.Addr.Unmap()
	family := unix.AF_INET
	if !dst.Is4() {
		family = unix.AF_INET6
	}
	s := l.sqeFor(c, opSocket, sqeIOLink, udSocket)
	s.fd, s.off, s.fileIndex = int32(family), unix.SOCK_STREAM, uint32(c.idx)+1
	if src := c.src; src.IsValid() {
		l.setsockoptSQE(c, sqeIOLink, udBindOpt, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, unsafe.Pointer(&ipBindNoPort), 4)
		sa, size := c.bsa.set(src.Unmap(), 0)
		s = l.sqeFor(c, opBind, sqeFixedFile|sqeIOLink, udBind)
		s.addr, s.off = uint64(uintptr(sa)), uint64(size)
	}
	link := uint8(0)
	if c.p != nil {
		link = sqeIOLink // the send and recv follow
	}
	sa, size := c.sa.set(dst, t.Port)
	s = l.sqeFor(c, opConnect, sqeFixedFile|link, udConnect)
	s.addr, s.off = uint64(uintptr(sa)), uint64(size)
	if c.p == nil {
		return
	}
	// MSG_WAITALL: the kernel sends all of the request or fails, so a
	// completion that is not an error is the whole request.
	s = l.sqeFor(c, opSend, sqeFixedFile|sqeIOLink, udSend)
	s.addr, s.len, s.opFlags = uint64(uintptr(unsafe.Pointer(&c.out[0]))), uint32(len(c.out)), unix.MSG_NOSIGNAL|unix.MSG_WAITALL
	l.recvSQE(c, udRecv, c.buf[c.n:], 0)
}

// reserve makes room for n SQEs in the ring, submitting the queue when it
// is full; it reports false when the kernel takes nothing (l.submitErr).
func (l *loop) reserve(n uint32) bool {
	if l.ring.room() >= n {
		return true
	}
	if err := l.ring.submit(); err != nil {
		l.submitErr = err
		return false
	}
	return l.ring.room() >= n
}

// reap handles every completion in the ring's queue.
func (l *loop) reap() {
	r := l.ring
	for r.ready() {
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			e := r.cqes[head&r.cqMask]
			atomic.StoreUint32(r.cqHead, head+1)
			// The time of each completion is when the loop takes it (the
			// kernel stamps none), read per completion: a connect and the
			// first bytes of its answer can come in one batch, and must
			// not share a time (a first byte 0 after the connect).
			l.onCQE(e.userData, e.res, probe.Nanotime())
		}
	}
}

// onCQE handles one completion of connection userData>>8.
func (l *loop) onCQE(userData uint64, res int32, now int64) {
	c := l.conns[userData>>8]
	what := uint8(userData)
	if c.ops == 0 { // cannot happen: every SQE of c is counted
		return
	}
	c.ops--
	if c.state == stateClosing {
		switch what {
		case udEOF: // 0: the server closed first; anything else: it has not
			l.ringClose(c, res != 0)
		case udClose:
			c.closed = true
		}
		if c.closed && c.ops == 0 {
			l.recycle(c)
		}
		return
	}
	if res == -int32(unix.ECANCELED) {
		return // a link after an SQE that failed: that one's completion ends the probe
	}
	switch what {
	case udSocket, udBindOpt, udBind:
		if res < 0 {
			call := "socket"
			if what == udBindOpt {
				call = "setsockopt"
			} else if what == udBind {
				call = "bind"
			}
			l.fail(c, phaseConnect, fmt.Errorf("connect: %w", os.NewSyscallError(call, errnoOfRes(res))), nil, now)
		}
	case udConnect:
		if res < 0 {
			l.fail(c, phaseConnect, fmt.Errorf("connect: %w", os.NewSyscallError("connect", errnoOfRes(res))), nil, now)
			return
		}
		c.connected = now
		if c.p == nil { // a connect() probe: established is all it asks
			l.finish(c, probe.Success, probe.CauseNone, nil, now)
			return
		}
		c.request, c.state = now, stateWriting // the send is queued behind the connect
	case udSend:
		switch {
		case res < 0:
			l.fail(c, phaseWrite, fmt.Errorf("write request: %w", os.NewSyscallError("write", errnoOfRes(res))), nil, now)
		case int(res) < len(c.out):
			l.fail(c, phaseWrite, fmt.Errorf("write request: %w", io.ErrShortWrite), nil, now)
		default:
			c.state = stateReading
		}
	case udRecv:
		l.onRecv(c, res, now)
	}
}

// onRecv parses what a recv of c's answer brought, and reads on when the
// answer is not complete.
func (l *loop) onRecv(c *conn, res int32, now int64) {
	if res < 0 {
		err := errnoOfRes(res)
		ph := c.phase()
		l.fail(c, ph, fmt.Errorf("%s: %w", readWhat(ph), os.NewSyscallError("read", err)), err, now)
		return
	}
	if !l.took(c, int(res), now) {
		return
	}
	if c.n == len(c.buf) && !l.growBuffer(c) {
		l.fail(c, c.phase(), c.resp.tooLong(), nil, now)
		return
	}
	if !l.reserve(1) {
		l.ringFull(c, readWhat(c.phase()), now)
		return
	}
	l.recvSQE(c, udRecv, c.buf[c.n:], 0) // growBuffer left room
}

// ringFull ends c's probe, whose next step the ring did not take
// (l.submitErr), as a LocalError: the kernel's resources of this host, no
// verdict on the target.
func (l *loop) ringFull(c *conn, what string, now int64) {
	l.finish(c, probe.LocalError, probe.CauseBuffers, fmt.Errorf("%s: %w", what, l.submitErr), now)
}

// ringRelease begins closing c's socket; the connection is reused when the
// last of its completions came (see [loop.onCQE]). It reports whether c is
// free for reuse now: nothing was ever queued for it.
func (l *loop) ringRelease(c *conn) bool {
	established := c.connected != 0 && !c.peerClosed
	c.state = stateClosing
	if !c.opened {
		return true // failed before its chain was queued
	}
	if established && c.ops == 0 && c.p != nil && c.resp.done() {
		// A complete response: has the server closed its side too?
		if l.reserve(1) {
			l.recvSQE(c, udEOF, l.scratch[:], unix.MSG_DONTWAIT)
			return false
		}
	}
	l.ringClose(c, established)
	return false
}

// ringClose queues the end of c's socket: cancel what is in flight, set
// SO_LINGER 0 when linger (the peer has not closed: no TIME_WAIT must be
// left here), close the slot. When the ring takes nothing, c waits in
// l.closing for the next pass.
func (l *loop) ringClose(c *conn, linger bool) {
	n := uint32(1)
	if c.ops > 0 {
		n++
	}
	if linger {
		n++
	}
	if !l.reserve(n) {
		c.linger = linger
		l.closing = append(l.closing, c.idx)
		return
	}
	if c.ops > 0 {
		s := l.sqeFor(c, opAsyncCancel, sqeHardLink, udCancel)
		s.opFlags = cancelAll | cancelFD | cancelFDFixed
	}
	if linger {
		l.setsockoptSQE(c, sqeHardLink, udLinger, unix.SOL_SOCKET, unix.SO_LINGER, unsafe.Pointer(&lingerZero), uint32(unsafe.Sizeof(lingerZero)))
	}
	s := l.sqeFor(c, opClose, 0, udClose)
	s.fd, s.fileIndex = 0, uint32(c.idx)+1 // a direct slot: fd must be 0
}

// retryClosing queues the closes that found the ring full.
func (l *loop) retryClosing() {
	for len(l.closing) > 0 {
		c := l.conns[l.closing[0]]
		if !l.reserve(3) {
			return
		}
		l.closing = l.closing[1:]
		l.ringClose(c, c.linger)
	}
}

// runRing is a loop's goroutine on io_uring.
func (l *loop) runRing() {
	for !l.ls.stopping() {
		l.takeInbox()
		l.retryClosing()
		l.reap()
		l.expire()
		l.waitRing()
	}
	l.takeInbox()
	for _, c := range l.conns {
		if c.state != stateFree && c.state != stateClosing {
			l.abandon(c)
		}
	}
	l.drain()
}

// drain waits, up to a few seconds, for the completions of every socket
// being closed, so that no buffer is released while the kernel may write it.
func (l *loop) drain() {
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		l.retryClosing()
		_ = l.ring.submit()
		l.reap()
		if len(l.free) == len(l.conns) {
			return
		}
		l.ring.notify(true)
		if !l.ring.ready() {
			_ = l.file.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			_ = l.rc.Read(l.poll)
		}
		l.ring.notify(false)
	}
}

// waitRing submits what is queued and, when no completion is ready, parks
// the goroutine (see [loop.sleep]).
func (l *loop) waitRing() {
	if err := l.ring.submit(); err != nil {
		l.submitErr = err // the chains stay queued: the next pass submits them
	}
	if !l.ring.ready() {
		l.sleep()
	}
}
