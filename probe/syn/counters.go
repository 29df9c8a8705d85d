package syn

import (
	"sync/atomic"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

// Counters are the prober's counters since New.
type Counters struct {
	Sent        uint64 // SYNs handed to the kernel, retransmissions included
	Retransmits uint64 // SYNs sent again for a probe without an answer (T5), included in Sent
	SendErrors  uint64 // SYNs the kernel refused (no route, no buffer) or that could not be built

	SynAck      uint64 // valid SYN-ACK replies delivered (success)
	RST         uint64 // valid RST replies delivered (refused)
	Unreachable uint64 // valid ICMP unreachable replies delivered, and sends failing for lack of a route

	InvalidCookie uint64 // replies whose cookie names no target of ours: stray or forged, dropped
	Stale         uint64 // replies to an older probe of the target (wrong source port), dropped
	Duplicate     uint64 // second replies to an already answered probe, dropped

	RingDrops      uint64 // replies lost to a full ring buffer (BPF or AF_PACKET)
	CaptureSeen    uint64 // packets the capture filter looked at (eBPF path only)
	CaptureMatched uint64 // packets the capture filter kept
	CaptureErrors  uint64 // failed reads of the capture ring
	// Answered counts the SYN-ACKs the eBPF program answered with an RST
	// itself (see Config.KernelRST); the kernel answered the others.
	Answered uint64

	Path probe.TCPPath // the path in use: syn-bpf or syn-packet (empty before a capture is open)
}

// readCounters are written by the reader goroutine only.
type readCounters struct {
	kinds                     [4]atomic.Uint64 // by bpf.Kind
	invalid, stale, duplicate atomic.Uint64
	errors                    atomic.Uint64
}

// Counters returns the prober's counters. It reads the capture's kernel
// counters, so it costs a few system calls; call it for metrics, not per probe.
func (p *Prober) Counters() Counters {
	c := Counters{
		SynAck:        p.rc.kinds[bpf.KindSynAck].Load(),
		RST:           p.rc.kinds[bpf.KindRST].Load(),
		Unreachable:   p.rc.kinds[bpf.KindUnreachable].Load(),
		InvalidCookie: p.rc.invalid.Load(),
		Stale:         p.rc.stale.Load(),
		Duplicate:     p.rc.duplicate.Load(),
		CaptureErrors: p.rc.errors.Load(),
		Path:          p.path,
	}
	for _, l := range p.lanes {
		c.Sent += l.sent.Load()
		c.Retransmits += l.resent.Load()
		c.SendErrors += l.errs.Load()
		c.Unreachable += l.unreach.Load()
	}
	if p.cap != nil {
		cc, err := p.cap.counters()
		if err != nil {
			c.CaptureErrors++
		}
		c.CaptureSeen, c.CaptureMatched, c.RingDrops, c.Answered = cc.seen, cc.matched, cc.drops, cc.answered
	}
	return c
}

// sentTotal returns the SYNs handed to the kernel so far, without the system
// calls of Counters.
func (p *Prober) sentTotal() uint64 {
	var n uint64
	for _, l := range p.lanes {
		n += l.sent.Load()
	}
	return n
}
