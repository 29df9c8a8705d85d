package ceiling

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dchest/siphash"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// Config configures [Sweep]. Every field but Senders and Timeout is
// required.
type Config struct {
	Interface  string           // interface to send on and capture from
	Source     netip.Addr       // IPv4 source address of the probes
	NextHopMAC net.HardwareAddr // MAC address every probe is sent to
	Prefix     netip.Prefix     // IPv4 targets: every address of it
	Port       uint16           // the port probed on every target
	Senders    int              // sending threads, each with its own socket; default 1 (sonde bench asks for one per CPU)
	Timeout    time.Duration    // how long to wait for replies after the last send; default 1 s
	// Sendmmsg sends batches with sendmmsg(2) from a buffer instead of from
	// a PACKET_MMAP TX ring.
	Sendmmsg bool
	// KernelRST leaves the RST that answers each SYN-ACK to the kernel; by
	// default the capture program sends it, as for sonde (syn.Config's
	// KernelRST), so the two are compared doing the same work.
	KernelRST bool
}

// Result is what one [Sweep] sweep did.
type Result struct {
	Probes     int       // probes sent
	Start, End time.Time // first and last send
	SynAck     uint64    // valid SYN-ACKs
	RST        uint64    // valid RSTs
	Unreach    uint64    // valid ICMP unreachable
	Invalid    uint64    // replies whose cookie names no probe
	Duplicate  uint64    // second replies to a probe
	RingDrops  uint64    // replies lost to a full capture ring
	CPU        float64   // the process's user+system seconds from the first send to the end of the wait
	outcome    []uint8   // by target index: 0 no answer, else probe.Outcome+1
	prefix     netip.Prefix
	port       uint16
}

// Outcome returns the outcome of the probe of the target at index i of the
// prefix: Timeout when nothing answered.
func (r *Result) Outcome(i int) probe.Outcome {
	if r.outcome[i] == 0 {
		return probe.Timeout
	}
	return probe.Outcome(r.outcome[i] - 1)
}

// Target returns the target at index i.
func (r *Result) Target(i int) netip.AddrPort {
	base := binary.BigEndian.Uint32(r.prefix.Addr().AsSlice())
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], base+uint32(i))
	return netip.AddrPortFrom(netip.AddrFrom4(a), r.port)
}

// ceilingBatch is how many frames a sender fills before one send(2) flushes
// them from its TX ring.
const ceilingBatch = 256

// Sweep sweeps cfg.Prefix once as fast as the machine allows, to measure
// the ceiling that sonde's sweeps are compared with in the same bench run:
// no scheduler, no per-target state but the outcome, frames written straight
// into PACKET_MMAP TX rings (one send(2) per 256 frames), replies read in
// bulk from the capture program of package bpf. The SYNs are sonde's: the
// same headers and options, the sequence-number cookie of package syn
// (id XOR SipHash-2-4 of the flow, verified on every reply) and its source
// ports. It runs in the calling thread's network namespace and needs
// CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN.
func Sweep(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ifc, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	ports, err := syn.DefaultPortRange()
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	n := 1 << (32 - cfg.Prefix.Bits())
	res := &Result{outcome: make([]uint8, n), prefix: cfg.Prefix.Masked(), port: cfg.Port}
	c := &ceiling{cfg: cfg, ports: ports, key: [2]uint64{randUint64(), randUint64()}, res: res, n: n}
	c.src = cfg.Source.As16()
	c.base = binary.BigEndian.Uint32(res.prefix.Addr().AsSlice())
	c.buildTemplate(ifc.HardwareAddr)

	var senders []frameWriter
	defer func() {
		for _, s := range senders {
			s.close()
		}
	}()
	for range cfg.Senders {
		var s frameWriter
		if cfg.Sendmmsg {
			s, err = openMmsgWriter(ifc.Index)
		} else {
			s, err = openTXRing(ifc.Index)
		}
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		senders = append(senders, s)
	}
	capt, err := bpf.NewCapture(bpf.CaptureConfig{
		Interface: ifc.Index, Local4: cfg.Source, PortLo: ports.First, PortHi: ports.Last,
		RingBytes: 8 << 20, WakeupBytes: 4 << 20, Answer: !cfg.KernelRST,
	})
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	defer capt.Close()
	readerDone := make(chan error, 1)
	go func() { readerDone <- c.read(capt) }()

	var ru0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	res.Start = time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(senders))
	for i, s := range senders {
		wg.Go(func() { errs[i] = c.send(ctx, s, &next) })
	}
	wg.Wait()
	res.End = time.Now()
	res.Probes = min(int(next.Load()), n)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	c.wait(ctx, res.End.Add(cfg.Timeout))
	stopErr := capt.Close()
	readErr := <-readerDone
	var ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	res.CPU = rusageSeconds(ru1) - rusageSeconds(ru0)
	if cs, err := capt.Counters(); err == nil {
		res.RingDrops = cs.RingFull
	}
	res.SynAck, res.RST, res.Unreach = c.kinds[bpf.KindSynAck].Load(), c.kinds[bpf.KindRST].Load(), c.kinds[bpf.KindUnreachable].Load()
	res.Invalid, res.Duplicate = c.invalid.Load(), c.duplicate.Load()
	if readErr != nil && !errors.Is(readErr, os.ErrClosed) {
		return res, fmt.Errorf("ceiling: read replies: %w", readErr)
	}
	if stopErr != nil {
		return res, fmt.Errorf("ceiling: close capture: %w", stopErr)
	}
	return res, ctx.Err()
}

func (cfg *Config) check() error {
	switch {
	case cfg.Interface == "":
		return errors.New("ceiling: no interface")
	case !cfg.Source.Is4():
		return fmt.Errorf("ceiling: source %v is not an IPv4 address", cfg.Source)
	case len(cfg.NextHopMAC) != 6:
		return fmt.Errorf("ceiling: next-hop MAC %q is not an Ethernet address", cfg.NextHopMAC)
	case !cfg.Prefix.IsValid() || !cfg.Prefix.Addr().Is4() || cfg.Prefix.Bits() < 8:
		return fmt.Errorf("ceiling: targets %v: want an IPv4 prefix of /8 or longer", cfg.Prefix)
	case cfg.Port == 0:
		return errors.New("ceiling: port 0")
	case cfg.Senders < 0 || cfg.Senders > 64:
		return fmt.Errorf("ceiling: senders %d out of range 1-64", cfg.Senders)
	}
	if cfg.Senders == 0 {
		cfg.Senders = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	return nil
}

// ceiling is one sweep's shared state. The senders write only their own
// frames; the reader alone writes res.outcome until the sweep ends.
type ceiling struct {
	cfg   Config
	ports syn.PortRange
	key   [2]uint64
	src   [16]byte
	base  uint32 // the first target, as a number
	n     int
	res   *Result

	frame              [14 + 20 + 32]byte // the SYN frame with the per-probe fields zero
	ipSum, tcpSum      uint32             // unfolded sums of their fixed words
	replies            atomic.Int64
	kinds              [4]atomic.Uint64
	invalid, duplicate atomic.Uint64
}

// buildTemplate writes the frame every probe starts from: Ethernet to the
// next hop, IPv4 with DF and TTL 64, and sonde's SYN: window 64240 and the
// options MSS 1460, NOP, NOP, SACK-permitted, NOP, window scale 7.
func (c *ceiling) buildTemplate(srcMAC net.HardwareAddr) {
	b := c.frame[:]
	copy(b[0:6], c.cfg.NextHopMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip, tcp := b[14:34], b[34:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 52)
	ip[6] = 0x40
	ip[8] = 64
	ip[9] = unix.IPPROTO_TCP
	copy(ip[12:16], c.src[12:])
	tcp[12] = 8 << 4
	tcp[13] = 0x02
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	copy(tcp[20:], []byte{2, 4, 1460 >> 8, 1460 & 0xff, 1, 1, 4, 2, 1, 3, 3, 7})
	c.ipSum = words(ip)
	c.tcpSum = words(c.src[12:]) + unix.IPPROTO_TCP + 32 + words(tcp)
}

// write writes the probe of target i into b.
func (c *ceiling) write(b []byte, i uint32) {
	copy(b, c.frame[:])
	var dst [16]byte
	dst[10], dst[11] = 0xff, 0xff
	binary.BigEndian.PutUint32(dst[12:], c.base+i)
	sport := c.ports.Port(i, 1)
	seq := i ^ c.hash(&dst, sport, c.cfg.Port)
	ip, tcp := b[14:34], b[34:66]
	copy(ip[16:20], dst[12:])
	id := uint16(seq>>16) | 1
	binary.BigEndian.PutUint16(ip[4:], id)
	d := words(dst[12:])
	binary.BigEndian.PutUint16(ip[10:], foldSum(c.ipSum+d+uint32(id)))
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], c.cfg.Port)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint16(tcp[16:], foldSum(c.tcpSum+d+uint32(sport)+uint32(c.cfg.Port)+seq>>16+seq&0xffff))
}

// hash is the cookie's flow hash, as package syn computes it: SipHash-2-4 of
// source ‖ destination ‖ source port ‖ destination port, addresses as
// IPv4-mapped IPv6.
func (c *ceiling) hash(dst *[16]byte, sport, dport uint16) uint32 {
	var b [36]byte
	copy(b[0:16], c.src[:])
	copy(b[16:32], dst[:])
	binary.BigEndian.PutUint16(b[32:], sport)
	binary.BigEndian.PutUint16(b[34:], dport)
	return uint32(siphash.Hash(c.key[0], c.key[1], b[:]))
}

// send claims batches of targets and sends them through ring r until every
// target is claimed or ctx is done.
func (c *ceiling) send(ctx context.Context, r frameWriter, next *atomic.Int64) error {
	for ctx.Err() == nil {
		first := int(next.Add(ceilingBatch)) - ceilingBatch
		if first >= c.n {
			return nil
		}
		for i := first; i < min(first+ceilingBatch, c.n); i++ {
			f, err := r.frame()
			if err != nil {
				return err
			}
			c.write(f, uint32(i))
			r.ready(len(c.frame))
		}
		if err := r.flush(); err != nil {
			return err
		}
	}
	return nil
}

// read validates and records replies until the capture is closed.
func (c *ceiling) read(capt *bpf.Capture) error {
	for {
		_, err := capt.Poll(time.Now().Add(2*time.Millisecond), c.handle)
		if err != nil {
			return err
		}
	}
}

// handle checks one reply's cookie and records its outcome.
func (c *ceiling) handle(ev *bpf.Event) {
	seq := ev.Seq // ICMP: the quoted probe's
	switch bpf.Kind(ev.Kind) {
	case bpf.KindSynAck, bpf.KindRST:
		seq = ev.Ack - 1
	case bpf.KindUnreachable:
	default:
		c.invalid.Add(1)
		return
	}
	i := seq ^ c.hash(&ev.Remote, ev.LocalPort, ev.RemotePort)
	if int(i) >= c.n || binary.BigEndian.Uint32(ev.Remote[12:]) != c.base+i || ev.RemotePort != c.cfg.Port ||
		ev.LocalPort != c.ports.Port(i, 1) || ev.Local != c.src {
		c.invalid.Add(1)
		return
	}
	if c.res.outcome[i] != 0 {
		c.duplicate.Add(1)
		return
	}
	o := probe.Success
	switch bpf.Kind(ev.Kind) {
	case bpf.KindRST:
		o = probe.Refused
	case bpf.KindUnreachable:
		o = probe.Unreachable
	}
	c.res.outcome[i] = uint8(o) + 1
	c.kinds[ev.Kind&3].Add(1)
	c.replies.Add(1)
}

// wait waits until every target answered, deadline passes or ctx is done.
func (c *ceiling) wait(ctx context.Context, deadline time.Time) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.replies.Load() < int64(c.n) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// words returns the unfolded sum of b's big-endian 16-bit words.
func words(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	return s
}

// foldSum folds an unfolded ones'-complement sum into a checksum field.
func foldSum(s uint32) uint16 {
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return binary.LittleEndian.Uint64(b[:])
}

func rusageSeconds(ru unix.Rusage) float64 {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// frameWriter sends Ethernet frames in batches: frame returns room for the
// next one, ready hands it over, flush sends what was handed over.
type frameWriter interface {
	frame() ([]byte, error)
	ready(n int)
	flush() error
	close()
}

// openPacketSocket opens an AF_PACKET socket that receives nothing and sends
// on ifindex past the qdisc; setup runs before it is bound.
func openPacketSocket(ifindex int, setup func(fd int) error) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	if err := setup(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	return fd, nil
}

// mmsgWriter sends batches of frames from one buffer with sendmmsg(2), as
// package syn's AF_PACKET writer does.
type mmsgWriter struct {
	fd   int
	buf  []byte
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
	n    int
}

func openMmsgWriter(ifindex int) (*mmsgWriter, error) {
	fd, err := openPacketSocket(ifindex, func(fd int) error {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	w := &mmsgWriter{fd: fd, buf: make([]byte, ceilingBatch*txFrameSize),
		msgs: make([]unix.Mmsghdr, ceilingBatch), iovs: make([]unix.Iovec, ceilingBatch)}
	for i := range w.msgs {
		w.iovs[i].Base = &w.buf[i*txFrameSize]
		w.msgs[i].Hdr.Iov = &w.iovs[i]
		w.msgs[i].Hdr.Iovlen = 1
	}
	return w, nil
}

func (w *mmsgWriter) frame() ([]byte, error) {
	if w.n == len(w.msgs) {
		if err := w.flush(); err != nil {
			return nil, err
		}
	}
	return w.buf[w.n*txFrameSize : (w.n+1)*txFrameSize], nil
}

func (w *mmsgWriter) ready(n int) {
	w.iovs[w.n].SetLen(n)
	w.n++
}

func (w *mmsgWriter) flush() error {
	for sent := 0; sent < w.n; {
		r, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(w.fd),
			uintptr(unsafe.Pointer(&w.msgs[sent])), uintptr(w.n-sent), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			sent += int(r)
		case unix.EINTR:
		case unix.ENOBUFS, unix.EAGAIN:
			time.Sleep(50 * time.Microsecond)
		default:
			return os.NewSyscallError("sendmmsg", errno)
		}
	}
	w.n = 0
	return nil
}

func (w *mmsgWriter) close() { _ = unix.Close(w.fd) }

// txRing is an AF_PACKET socket with a PACKET_MMAP TX ring (TPACKET_V2)
// bound to one interface, bypassing the qdisc. Frames are filled in ring
// order and sent by flush with one send(2), which returns once the kernel
// has handed every frame to the device.
type txRing struct {
	fd      int
	mem     []byte
	frames  int
	pos     int // next frame to fill
	pending int // frames filled since the last flush
}

const (
	txFrameSize = 128 // room for the ring's header and a 66-byte frame; a multiple of 16
	txFrames    = 4096
	// txDataOff is where a TX frame's data starts: TPACKET2_HDRLEN minus
	// the sockaddr_ll the kernel does not use for sending.
	txDataOff = 32
)

func openTXRing(ifindex int) (*txRing, error) {
	r := &txRing{frames: txFrames}
	fd, err := openPacketSocket(ifindex, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
			return os.NewSyscallError("setsockopt PACKET_VERSION", err)
		}
		page := os.Getpagesize()
		req := unix.TpacketReq{Block_size: uint32(page), Frame_size: txFrameSize,
			Block_nr: uint32(txFrames * txFrameSize / page), Frame_nr: txFrames}
		if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req); err != nil {
			return os.NewSyscallError("setsockopt PACKET_TX_RING", err)
		}
		var err error
		if r.mem, err = unix.Mmap(fd, 0, txFrames*txFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			return os.NewSyscallError("mmap TX ring", err)
		}
		return nil
	})
	if err != nil {
		if r.mem != nil {
			_ = unix.Munmap(r.mem)
		}
		return nil, err
	}
	r.fd = fd
	return r, nil
}

// status is the tp_status word of frame i.
func (r *txRing) status(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[i*txFrameSize]))
}

// frame returns the data area of the next frame, flushing first when the
// ring is full.
func (r *txRing) frame() ([]byte, error) {
	if atomic.LoadUint32(r.status(r.pos)) != unix.TP_STATUS_AVAILABLE {
		if err := r.flush(); err != nil {
			return nil, err
		}
		if s := atomic.LoadUint32(r.status(r.pos)); s != unix.TP_STATUS_AVAILABLE {
			return nil, fmt.Errorf("TX ring frame %d still has status %#x after a flush", r.pos, s)
		}
	}
	off := r.pos*txFrameSize + txDataOff
	return r.mem[off : off+txFrameSize-txDataOff], nil
}

// ready hands the frame returned by the last call of frame, n bytes long,
// to the kernel.
func (r *txRing) ready(n int) {
	hdr := r.mem[r.pos*txFrameSize:]
	binary.NativeEndian.PutUint32(hdr[4:8], uint32(n))  // tp_len
	binary.NativeEndian.PutUint32(hdr[8:12], uint32(n)) // tp_snaplen
	atomic.StoreUint32(r.status(r.pos), unix.TP_STATUS_SEND_REQUEST)
	r.pos = (r.pos + 1) % r.frames
	r.pending++
}

// flush sends every frame handed over and waits until the kernel is done
// with them. Like package syn's sendmmsg it uses RawSyscall6: on a veth the
// receiving side's work runs inside the call, and the Go runtime would
// otherwise hand the sender's P to another thread every 20 µs meanwhile.
func (r *txRing) flush() error {
	for r.pending > 0 {
		_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(r.fd), 0, 0, 0, 0, 0)
		switch errno {
		case 0:
			r.pending = 0
		case unix.EINTR:
		case unix.ENOBUFS, unix.EAGAIN:
			time.Sleep(50 * time.Microsecond)
		default:
			return os.NewSyscallError("send TX ring", errno)
		}
	}
	return nil
}

func (r *txRing) close() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
	}
	_ = unix.Close(r.fd)
}
