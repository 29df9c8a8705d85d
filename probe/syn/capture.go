package syn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

// capturer is a source of replies: the eBPF ring buffer or an AF_PACKET ring.
type capturer interface {
	// poll handles every reply that arrives until deadline (or until woken),
	// calling handle for each. It returns an error matching os.ErrClosed
	// after close.
	poll(deadline time.Time) error
	// counters returns the capture's counts of packets.
	counters() (captureCounts, error)
	// checkLosses reports to the prober ([Prober.lost]) the replies the
	// capture has lost (a full ring) since it last looked, with when. The
	// reader calls it after every poll: it must be cheap, without a system
	// call in the common case.
	checkLosses()
	// slack is how long after its kernel timestamp a reply may still be
	// unread when a poll that began later returns: the capture's own
	// buffering delay.
	slack() time.Duration
	// stop makes a running or later poll return os.ErrClosed; it may be
	// called from any goroutine.
	stop() error
	// close frees what is left once poll has returned for good.
	close() error
}

// captureCounts are a capture's counts of packets.
type captureCounts struct {
	seen, matched, drops uint64
	answered             uint64 // SYN-ACKs the eBPF program answered itself
}

// openCapture opens the capture of the path that cfg asks for.
func (p *Prober) openCapture(cfg Config, iface *net.Interface) error {
	if cfg.Path != probe.PathSynPacket {
		var l4, l6 netip.Addr
		if p.tmpl4 != nil {
			l4 = netip.AddrFrom16(p.tmpl4.src).Unmap()
		}
		if p.tmpl6 != nil {
			l6 = netip.AddrFrom16(p.tmpl6.src)
		}
		c, err := newBPFCapture(p, bpf.CaptureConfig{
			Interface: iface.Index, Local4: l4, Local6: l6,
			PortLo: p.ports.First, PortHi: p.ports.Last,
			RingBytes: cfg.RingBytes, WakeupBytes: wakeupBytes(cfg.RingBytes), Attach: cfg.Attach,
			Answer: !cfg.KernelRST,
		})
		if err == nil {
			p.cap, p.path, p.attach = c, probe.PathSynBPF, c.c.Attachment()
			return nil
		}
		if cfg.Path == probe.PathSynBPF {
			return fmt.Errorf("ebpf capture: %w", err)
		}
		p.fallbackErr = err
	}
	c, err := newPacketCapture(p, iface.Index, cfg.RingBytes)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w: %w", ErrNoRawSocket, err)
		}
		return fmt.Errorf("af_packet capture: %w", err)
	}
	p.cap, p.path = c, probe.PathSynPacket
	return nil
}

// defaultRingBytes is the capture ring's size when Config.RingBytes is 0.
const defaultRingBytes = 8 << 20

// wakeupBytes is the unread backlog past which the eBPF program wakes the
// reader at once instead of leaving the records for its next poll: half the
// ring. A wake-up is an interrupt (an IPI, costly in a VM) that cannot help
// when the reader is runnable but waiting for a CPU, which is what fills the
// ring at high rates: with the bpf package's default of 1/32 of the ring (and
// a wake-up with every record above it, as the program once did), sweeps at
// full speed spent about a fifth of the machine's CPU in wake-ups. The
// program now wakes only on crossing the threshold, and half the ring still
// leaves the reader more than 100 ms at 500,000 replies a second before
// anything is lost (and lost replies are counted).
func wakeupBytes(ringBytes int) int {
	if ringBytes <= 0 {
		ringBytes = defaultRingBytes
	}
	return ringBytes / 2
}

// startReader starts the goroutine that reads the capture until Close.
// After every poll it notes the capture's losses and publishes how far it
// has read (see [Prober.Settled]).
func (p *Prober) startReader() {
	p.readerDone = make(chan struct{})
	slack := int64(p.cap.slack())
	go func() {
		defer close(p.readerDone)
		for {
			began := p.now()
			err := p.cap.poll(time.Now().Add(p.poll))
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if err != nil {
				p.rc.errors.Add(1)
				time.Sleep(p.poll)
				continue // what the failed poll read is unknown: settle nothing
			}
			p.cap.checkLosses()
			p.settle.read.Store(began - slack)
		}
	}()
}
