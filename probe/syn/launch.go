package syn

import (
	"errors"
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
	n    [2]int

	sent, errs, unreach atomic.Uint64
	_                   [64]byte // keep lanes' counters on separate cache lines
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
// when buffers stayed full). lane must be below
// Config.Lanes, and calls for one lane must not overlap.
func (p *Prober) Launch(lane int, batch []probe.Request) {
	l := p.lanes[lane]
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
		if t == nil {
			l.errs.Add(1)
			p.sink.Deliver(probe.Result{ID: id, Gen: req.Gen, Outcome: probe.Error, Done: p.now()})
			continue
		}
		st := p.probes.reserve(id)
		st.gen.Store(req.Gen) // sent is stamped, unanswered, when the batch leaves
		sport := p.ports.Port(id, req.Gen)
		k := l.n[fam]
		t.write(l.pkt[fam][k], dst, sport, dport, p.key.seq(id, &t.src, dst, sport, dport))
		l.ids[fam][k] = id
		l.n[fam]++
		if l.n[fam] == p.batch {
			p.flush(l, fam)
		}
	}
	p.flush(l, 0)
	p.flush(l, 1)
}

// flush stamps and sends the lane's pending packets of one family.
func (p *Prober) flush(l *lane, fam int) {
	n := l.n[fam]
	if n == 0 {
		return
	}
	l.n[fam] = 0
	ids := l.ids[fam][:n]
	now := p.now() &^ answered
	for _, id := range ids {
		st, _ := p.probes.get(id) // reserved by Launch
		st.sent.Store(now)
	}
	pkts := l.out[fam][:n]
	retries := 0
	for off := 0; off < n; {
		k, err := l.w[fam].writeBatch(pkts[off:])
		off += k
		l.sent.Add(uint64(k))
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
			id := ids[off]
			if noRoute(err) {
				l.unreach.Add(1)
				p.sink.Deliver(probe.Result{ID: id, Gen: p.genOf(id), Outcome: probe.Unreachable, Done: p.now()})
			} else if cause := sendCause(err); cause != probe.CauseNone {
				p.sink.Deliver(probe.Result{ID: id, Gen: p.genOf(id), Outcome: probe.LocalError, Cause: cause, Done: p.now()})
			}
			off++
		}
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

// genOf returns the generation of id's last probe.
func (p *Prober) genOf(id uint32) uint32 {
	st, _ := p.probes.get(id)
	return st.gen.Load()
}
