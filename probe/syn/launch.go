package syn

import (
	"errors"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// lane is one Launch caller's sockets, buffers and counters.
type lane struct {
	w    [2]batchWriter // by family: 0 IPv4, 1 IPv6
	buf  [2][]byte      // packet storage: slots of size bytes, the IP packet at the end
	size [2]int         // slot size: linkRoom + the IP packet
	pkt  [2][][]byte    // views of the IP packets of the batch being built
	out  [2][][]byte    // views the writer sends: the packets with their link header
	ids  [2][]uint32    // their target ids
	late [2][]int64     // per packet: the time after which its send is late (see sentLate)
	n    [2]int

	sent, errs, unreach, resent atomic.Uint64
	_                           [64]byte // keep lanes' counters on separate cache lines
}

// linkRoom is the room left in front of every packet for a link-layer header.
const linkRoom = 14

// setWriter gives the lane its writer for family fam and writes the writer's
// link-layer header in front of every packet slot, once.
func (l *lane) setWriter(fam int, w batchWriter) {
	l.w[fam] = w
	h := w.frameHeader()
	for i := range l.out[fam] {
		end := (i + 1) * l.size[fam]
		start := end - len(l.pkt[fam][i]) - len(h)
		copy(l.buf[fam][start:], h)
		l.out[fam][i] = l.buf[fam][start:end:end]
	}
}

// Launch sends one SYN per request, in batches of up to Config.Batch packets
// a system call. It never waits for replies; a send the kernel refuses is
// retried briefly when its buffers are full, then counted as a send error (and
// delivered as Unreachable when the kernel has no route, or as LocalError
// when buffers stayed full). A SYN that leaves after half its request's time
// (from Sent to Deadline) has passed is marked late: should the probe then
// go unanswered, [Prober.Expired] blames this host (CauseLate), not the
// target. lane must be below Config.Lanes, and calls for one lane (Launch
// and Resend) must not overlap.
func (p *Prober) Launch(lane int, batch []probe.Request) {
	p.send(p.lanes[lane], batch, false)
}

// Resend sends the SYN of each request's probe again, from the same source
// port with the same cookie, so an answer to either send counts once (T5):
// the scheduler's retransmission of a probe that has had no answer. A
// request whose probe has been answered or superseded is skipped. A
// retransmission the kernel refuses delivers nothing (the first SYN may
// still be answered), but one refused for lack of buffers marks the probe:
// if it then goes unanswered, [Prober.Expired] blames this host.
func (p *Prober) Resend(lane int, batch []probe.Request) {
	p.send(p.lanes[lane], batch, true)
}

// send builds one SYN per request into the lane's batches and sends them.
func (p *Prober) send(l *lane, batch []probe.Request, resend bool) {
	for _, req := range batch {
		id := req.ID
		if int(id) >= p.table.Len() {
			l.errs.Add(1)
			continue
		}
		dst, dport := p.table.Endpoint16(id)
		if dst == nil {
			continue // removed since it was due: the scheduler forgets its probe
		}
		fam, t := 0, p.tmpl4
		if !isMapped(dst) {
			fam, t = 1, p.tmpl6
		}
		if resend {
			st, ok := p.probes.get(id)
			if !ok || st.gen.Load() != req.Gen || st.sent.Load()&answered != 0 || t == nil {
				continue
			}
		} else {
			if t == nil {
				l.errs.Add(1)
				p.sink.Deliver(probe.Result{ID: id, Gen: req.Gen, Outcome: probe.Error, Done: p.now()})
				continue
			}
			st := p.probes.reserve(id)
			st.gen.Store(req.Gen) // sent is stamped, unanswered, when the batch leaves
		}
		sport := p.ports.Port(id, req.Gen)
		k := l.n[fam]
		t.write(l.pkt[fam][k], dst, sport, dport, p.key.seq(id, &t.src, dst, sport, dport))
		l.ids[fam][k] = id
		l.late[fam][k] = lateAfter(&req)
		l.n[fam]++
		if l.n[fam] == p.batch {
			p.flush(l, fam, resend)
		}
	}
	p.flush(l, 0, resend)
	p.flush(l, 1, resend)
}

// lateAfter returns the time after which a send of r's probe is late: half
// its time from Sent to Deadline. A request without a deadline (a sweep's)
// is never late.
func lateAfter(r *probe.Request) int64 {
	if r.Deadline <= r.Sent {
		return math.MaxInt64
	}
	return r.Sent + (r.Deadline-r.Sent)/2
}

// flush stamps and sends the lane's pending packets of one family: first
// sends, or retransmissions.
func (p *Prober) flush(l *lane, fam int, resend bool) {
	n := l.n[fam]
	if n == 0 {
		return
	}
	l.n[fam] = 0
	ids := l.ids[fam][:n]
	now := p.now() &^ flagBits
	for k, id := range ids {
		st, _ := p.probes.get(id) // reserved by Launch
		if !resend {
			late := int64(0)
			if now > l.late[fam][k] {
				late = sentLate
			}
			st.sent.Store(now | late)
			continue
		}
		// A retransmission restamps the send, keeping the flags, unless an
		// answer came meanwhile. It is never late itself: the first send
		// gave the target its whole time.
		for old := st.sent.Load(); old&answered == 0; old = st.sent.Load() {
			if st.sent.CompareAndSwap(old, now|old&flagBits) {
				break
			}
		}
	}
	pkts := l.out[fam][:n]
	retries := 0
	for off := 0; off < n; {
		k, err := l.w[fam].writeBatch(pkts[off:])
		off += k
		l.sent.Add(uint64(k))
		if resend {
			l.resent.Add(uint64(k))
		}
		if err == nil {
			continue
		}
		if k == 0 && retryable(err) && retries < maxRetries {
			retries++
			time.Sleep(retryPause)
			continue
		}
		retries = 0
		if off < n {
			l.errs.Add(1)
			p.sendFailed(l, ids[off], err, resend)
			off++
		}
	}
}

// sendFailed handles a SYN the kernel refused. A first send ends its probe
// when the refusal says something: no route (Unreachable), or this host's
// lack of buffers or ports (LocalError). A retransmission ends nothing: it
// only marks a probe that lost it for lack of buffers.
func (p *Prober) sendFailed(l *lane, id uint32, err error, resend bool) {
	st, _ := p.probes.get(id)
	if resend {
		if sendCause(err) == probe.CauseNone {
			return
		}
		for old := st.sent.Load(); old&(answered|resendErr) == 0; old = st.sent.Load() {
			if st.sent.CompareAndSwap(old, old|resendErr) {
				return
			}
		}
		return
	}
	gen := st.gen.Load()
	if noRoute(err) {
		l.unreach.Add(1)
		p.sink.Deliver(probe.Result{ID: id, Gen: gen, Outcome: probe.Unreachable, Done: p.now()})
	} else if cause := sendCause(err); cause != probe.CauseNone {
		p.sink.Deliver(probe.Result{ID: id, Gen: gen, Outcome: probe.LocalError, Cause: cause, Done: p.now()})
	}
}

// A full socket or device queue is retried this often, this long apart, before
// the packet counts as a send error: at most about 10ms per packet.
const (
	maxRetries = 200
	retryPause = 50 * time.Microsecond
)

func retryable(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR)
}

// sendCause tells a send error that is this host's trouble (no buffer left
// after the retries, no memory) from one that concerns the target. Other
// errors (a firewall's EPERM) leave the probe to time out.
func sendCause(err error) probe.LocalCause {
	if errors.Is(err, unix.EAGAIN) {
		return probe.CauseBuffers // the socket's send queue stayed full
	}
	return probe.LocalCauseOf(err)
}

func noRoute(err error) bool {
	return errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH)
}

func isMapped(a *[16]byte) bool { return [12]byte(a[:12]) == v4InV6Prefix }
