//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Kind says what a captured reply is (event.kind in capture.c).
type Kind uint8

// The kinds of captured replies.
const (
	KindSynAck      Kind = 1 // TCP SYN-ACK: the port is open
	KindRST         Kind = 2 // TCP RST: the port is closed
	KindUnreachable Kind = 3 // ICMP/ICMPv6 destination unreachable quoting a probe
)

// Event is one captured reply, laid out as struct event in capture.c (see the
// field comments there): addresses are 16 bytes with IPv4 as IPv4-mapped IPv6,
// numbers are in host order, "remote" is the target and "local" is sonde.
type Event = captureEvent

// EventSize is the size in bytes of a ring-buffer record holding an [Event].
const EventSize = 56

// ErrShortEvent is returned by [DecodeEvent] for a record shorter than
// [EventSize].
var ErrShortEvent = errors.New("ring-buffer record shorter than an event")

// DecodeEvent decodes a ring-buffer record into ev. It reads only b and never
// allocates. Records longer than EventSize are accepted (the kernel pads them
// to 8 bytes); fields are not validated beyond the length.
func DecodeEvent(b []byte, ev *Event) error {
	if len(b) < EventSize {
		return ErrShortEvent
	}
	ne := binary.NativeEndian
	ev.Ktime = ne.Uint64(b[0:8])
	copy(ev.Remote[:], b[8:24])
	copy(ev.Local[:], b[24:40])
	ev.Seq = ne.Uint32(b[40:44])
	ev.Ack = ne.Uint32(b[44:48])
	ev.RemotePort = ne.Uint16(b[48:50])
	ev.LocalPort = ne.Uint16(b[50:52])
	ev.Kind = b[52]
	ev.TcpFlags = b[53]
	ev.Family = b[54]
	ev.IcmpCode = b[55]
	return nil
}

// Attach selects how the capture program is attached to the interface.
type Attach uint8

// The ways to attach.
const (
	AttachAuto Attach = iota // TCX when the kernel has it, TC otherwise
	AttachTCX                // a TCX link (kernel 6.6)
	AttachTC                 // a clsact qdisc and a cls_bpf filter (kernel 4.5)
)

// String names the attachment as shown in logs and metrics ("tcx", "tc").
func (a Attach) String() string {
	switch a {
	case AttachTCX:
		return "tcx"
	case AttachTC:
		return "tc"
	default:
		return "auto"
	}
}

// CaptureConfig configures [NewCapture].
type CaptureConfig struct {
	// Interface is the index of the interface whose ingress is watched.
	Interface int
	// Local4 is sonde's IPv4 source address; the zero value captures no IPv4.
	Local4 netip.Addr
	// Local6 is sonde's IPv6 source address; the zero value captures no IPv6.
	Local6 netip.Addr
	// PortLo and PortHi bound sonde's source-port range (inclusive).
	PortLo, PortHi uint16
	// RingBytes is the ring buffer's size: a power of two, at least a page;
	// default 8 MiB (about 150,000 records).
	RingBytes int
	// WakeupBytes: the record that takes the ring's unread bytes past this
	// wakes the reader at once; other records wait for the reader's next
	// poll.
	// Default RingBytes/32.
	WakeupBytes int
	// Attach selects TCX or TC; default AttachAuto.
	Attach Attach
	// Answer makes the program answer each SYN-ACK to sonde's address and
	// port range with the RST the kernel would send, from the interface's
	// egress, and keep the SYN-ACK from the stack: the host's TCP then does
	// no work per reply. A SYN-ACK it cannot answer (IP options, no Ethernet
	// header) is left to the kernel. Off, the kernel answers them all.
	Answer bool
}

// Counters are the capture program's counters, summed over CPUs.
type Counters struct {
	Seen     uint64 // packets the program looked at
	Matched  uint64 // replies to sonde's probes found (including those lost to a full ring)
	RingFull uint64 // replies lost because the ring buffer was full
	Answered uint64 // SYN-ACKs the program answered with an RST (CaptureConfig.Answer)
}

// Capture owns the loaded capture program, its attachment and the ring-buffer
// reader. [Capture.Poll] is meant for one goroutine; [Capture.Counters] and
// [Capture.Close] may be called from any goroutine.
type Capture struct {
	objs   captureObjects
	detach func() error
	reader *ringbuf.Reader
	attach Attach
	rec    ringbuf.Record
	ev     Event
	// wake is a non-blocking duplicate of the ring buffer's descriptor in the
	// Go netpoller: Poll parks on it until the kernel wakes the ring or the
	// deadline passes, without holding a thread in a blocking system call.
	wake   *os.File
	raw    syscall.RawConn
	closed atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// NewCapture loads the capture program with cfg, attaches it to the ingress of
// cfg.Interface and opens the ring buffer. The interface index is looked up in
// the calling thread's network namespace.
func NewCapture(cfg CaptureConfig) (_ *Capture, err error) {
	if cfg.RingBytes == 0 {
		cfg.RingBytes = 8 << 20
	}
	if cfg.RingBytes < os.Getpagesize() || cfg.RingBytes&(cfg.RingBytes-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least a page", cfg.RingBytes)
	}
	if cfg.WakeupBytes <= 0 {
		cfg.WakeupBytes = cfg.RingBytes / 32
	}
	if !cfg.Local4.IsValid() && !cfg.Local6.IsValid() {
		return nil, errors.New("capture needs a local IPv4 or IPv6 address")
	}
	if cfg.PortLo == 0 || cfg.PortHi < cfg.PortLo {
		return nil, fmt.Errorf("bad source-port range %d-%d", cfg.PortLo, cfg.PortHi)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK. Lifting it
	// needs CAP_SYS_RESOURCE there; when that fails the load below reports
	// the real cause (usually a missing CAP_BPF).
	memlockErr := rlimit.RemoveMemlock()
	spec, err := loadCapture()
	if err != nil {
		return nil, err
	}
	spec.Maps[captureMapEvents].MaxEntries = uint32(cfg.RingBytes)
	if err := configure(spec, cfg); err != nil {
		return nil, err
	}
	c := &Capture{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		if memlockErr != nil {
			err = fmt.Errorf("%w (and lifting the memlock limit failed: %w)", err, memlockErr)
		}
		return nil, fmt.Errorf("load capture program (needs CAP_BPF and CAP_NET_ADMIN): %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.attachTo(cfg.Interface, cfg.Attach); err != nil {
		return nil, err
	}
	c.reader, err = ringbuf.NewReader(c.objs.Events)
	if err != nil {
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	if err := c.openWake(); err != nil {
		return nil, err
	}
	return c, nil
}

// openWake puts a duplicate of the ring's descriptor in the netpoller.
func (c *Capture) openWake() error {
	fd, err := unix.FcntlInt(uintptr(c.objs.Events.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("dup ring buffer fd", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return os.NewSyscallError("set nonblock", err)
	}
	c.wake = os.NewFile(uintptr(fd), "bpf-ringbuf")
	if c.raw, err = c.wake.SyscallConn(); err != nil {
		return fmt.Errorf("ring buffer wake-ups: %w", err)
	}
	return nil
}

// configure writes cfg into the program's constants before it is loaded.
func configure(spec *ebpf.CollectionSpec, cfg CaptureConfig) error {
	var want4, want6 uint8
	var local4 [4]byte
	var local6 [16]byte
	if cfg.Local4.IsValid() {
		if !cfg.Local4.Unmap().Is4() {
			return fmt.Errorf("local4 %s is not IPv4", cfg.Local4)
		}
		want4, local4 = 1, cfg.Local4.Unmap().As4()
	}
	if cfg.Local6.IsValid() {
		if !cfg.Local6.Is6() || cfg.Local6.Is4In6() {
			return fmt.Errorf("local6 %s is not IPv6", cfg.Local6)
		}
		want6, local6 = 1, cfg.Local6.As16()
	}
	vars := []struct {
		name  string
		value any
	}{
		{captureVarCfgWant4, want4},
		{captureVarCfgWant6, want6},
		{captureVarCfgLocal4, binary.NativeEndian.Uint32(local4[:])}, // network order in memory
		{captureVarCfgLocal6, local6},
		{captureVarCfgPortLo, cfg.PortLo},
		{captureVarCfgPortHi, cfg.PortHi},
		{captureVarCfgWakeupBytes, uint64(cfg.WakeupBytes)},
		{captureVarCfgAnswer, boolByte(cfg.Answer)},
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.value); err != nil {
			return fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	return nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (c *Capture) attachTo(ifindex int, mode Attach) error {
	if mode == AttachAuto || mode == AttachTCX {
		l, err := link.AttachTCX(link.TCXOptions{
			Interface: ifindex,
			Program:   c.objs.CaptureReplies,
			Attach:    ebpf.AttachTCXIngress,
		})
		if err == nil {
			c.detach, c.attach = l.Close, AttachTCX
			return nil
		}
		if mode == AttachTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("attach tcx: %w", err)
		}
	}
	detach, err := attachClsact(ifindex, c.objs.CaptureReplies)
	if err != nil {
		return fmt.Errorf("attach tc: %w", err)
	}
	c.detach, c.attach = detach, AttachTC
	return nil
}

// Attachment reports how the program is attached: [AttachTCX] or [AttachTC].
func (c *Capture) Attachment() Attach { return c.attach }

// Poll reads every record in the ring, then waits until the program wakes the
// reader (the ring passed its wake-up threshold) or until deadline, and reads
// every record again. Each record is decoded into one reused Event and passed
// to fn, which must not keep it. It returns the number of events read; nothing
// is allocated per event. The wait parks the goroutine in the Go netpoller, so
// no thread sits in a blocking system call. After Close, Poll returns an error
// matching [os.ErrClosed].
func (c *Capture) Poll(deadline time.Time, fn func(*Event)) (int, error) {
	n, err := c.drain(fn)
	if err != nil {
		return n, err
	}
	if err := c.wake.SetReadDeadline(deadline); err != nil {
		return n, err
	}
	woken := false
	err = c.raw.Read(func(uintptr) bool {
		if woken {
			return true
		}
		woken = true
		return false // wait for readiness or the deadline
	})
	if c.closed.Load() {
		return n, fmt.Errorf("capture: %w", os.ErrClosed)
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	k, err := c.drain(fn)
	return n + k, err
}

// drain reads the records in the ring without blocking.
func (c *Capture) drain(fn func(*Event)) (int, error) {
	c.reader.SetDeadline(pastDeadline)
	n := 0
	for {
		err := c.reader.ReadInto(&c.rec)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n, nil
			}
			return n, err
		}
		if DecodeEvent(c.rec.RawSample, &c.ev) != nil {
			continue // cannot happen with records from capture.c
		}
		n++
		fn(&c.ev)
	}
}

// pastDeadline makes the ring-buffer reader return at once when it is empty.
var pastDeadline = time.Unix(1, 0)

// Counters reads the program's per-CPU counters and sums them.
func (c *Capture) Counters() (Counters, error) {
	var sums [4]uint64
	var vals []uint64
	for i := range sums {
		if err := c.objs.Counters.Lookup(uint32(i), &vals); err != nil {
			return Counters{}, fmt.Errorf("read counter %d: %w", i, err)
		}
		for _, v := range vals {
			sums[i] += v
		}
	}
	return Counters{Seen: sums[0], Matched: sums[1], RingFull: sums[2], Answered: sums[3]}, nil
}

// Losses returns the number of replies lost to a full ring since the
// program was loaded and the ingress time (CLOCK_MONOTONIC ns) of the
// latest. It reads the program's memory-mapped global data, without a
// system call, so the reader may call it after every drain; it allocates
// nothing.
func (c *Capture) Losses() (total, last uint64, err error) {
	if err := c.objs.LostTotal.Get(&total); err != nil {
		return 0, 0, fmt.Errorf("read lost_total: %w", err)
	}
	if err := c.objs.LostKtime.Get(&last); err != nil {
		return 0, 0, fmt.Errorf("read lost_ktime: %w", err)
	}
	return total, last, nil
}

// Close stops a blocked Poll, detaches the program and frees its objects, in
// the reverse order of their creation. It returns every failure joined; later
// calls return the same.
func (c *Capture) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		c.closed.Store(true)
		if c.wake != nil {
			errs = append(errs, c.wake.Close()) // wakes a waiting Poll
		}
		if c.reader != nil {
			errs = append(errs, c.reader.Close())
		}
		if c.detach != nil {
			errs = append(errs, c.detach())
		}
		errs = append(errs, c.objs.Close())
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
