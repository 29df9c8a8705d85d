// Package syn is sonde's TCP SYN prober: a raw-socket sender and a reply
// reader that together probe very many endpoints without a connect() and a
// socket per probe (SEMANTICS T1–T4).
//
// # Sending
//
// A SYN is built once per source address with gopacket ([Prober] keeps it as a
// template) and patched per probe: destination address and port, source port,
// sequence number and the IP and TCP checksums, computed incrementally from
// sums over the fixed bytes. Batches go to the kernel with one sendmmsg(2) on
// a raw IP socket (IPPROTO_RAW), up to [Config.Batch] packets a call, so the
// kernel routes each packet and resolves its next hop; with
// [Config.NextHopMAC] they go as Ethernet frames through an AF_PACKET socket
// instead. Each lane (scheduler shard) owns its sockets and buffers, so the
// hot path takes no lock and allocates nothing.
//
// # Cookies and per-target state
//
// The sequence number is id XOR SipHash-2-4(key, src‖dst‖sport‖dport) with a
// random 128-bit key per prober, so a reply gives back the target id without a
// table of flows; see cookieKey. Per target the prober keeps only the send
// time of its last probe (CLOCK_MONOTONIC ns, stamped per batch just before
// the system call), the generation of that probe and whether it was answered:
// 16 bytes. The source port is [PortRange.Port](id, gen), so a late answer to
// an older probe of the same target arrives on the wrong port and is dropped
// as stale. RTT is the reply's kernel timestamp minus the send time, both
// CLOCK_MONOTONIC. A probe nobody answers produces no Result: the scheduler
// times it out itself.
//
// # Capturing replies
//
// With CAP_BPF and CAP_NET_ADMIN the replies are caught by the eBPF program in
// package bpf on the probing interface's ingress (TCX, or TC on kernels before
// 6.6) and read from a BPF ring buffer in bulk every [Config.PollInterval]
// (or sooner, when the ring fills past half its size: see wakeupBytes).
// Without them the prober falls back to an AF_PACKET socket with a classic BPF
// filter and a TPACKET_V3 ring, read block by block. The path in use is
// reported by [Prober.CapturePath] and [Counters.Capture]. Without
// CAP_NET_RAW, [New] returns [ErrNoRawSocket] and callers use the connect()
// prober.
//
// The kernel still sees every reply: it answers a SYN-ACK with an RST, which
// closes the half-open connection on the target (T3).
package syn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

var _ probe.Launcher = (*Prober)(nil)

// PortRange is an inclusive range of TCP source ports owned by the prober.
type PortRange struct {
	First, Last uint16 // the first and last port, inclusive
}

// Len returns the number of ports in the range.
func (r PortRange) Len() int { return int(r.Last) - int(r.First) + 1 }

// Port returns the source port of probe generation gen of target id: a hash
// of id spreads targets over the range and each generation moves one port on,
// so consecutive probes of a target never share a port (until the range wraps).
func (r PortRange) Port(id, gen uint32) uint16 {
	h := uint64(id * 0x9e3779b1) // Fibonacci hashing
	return r.First + uint16((h+uint64(gen))%uint64(r.Len()))
}

// String formats the range as "first-last".
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// DefaultPortRange returns the source ports used when none are configured:
// 61000–65535, above the kernel's default ephemeral range 32768–60999, so
// replies never collide with the machine's own connections. When
// /proc/sys/net/ipv4/ip_local_port_range reaches above 60999, the same number
// of ports just below the ephemeral range is used instead (or an error is
// returned when there is no room).
func DefaultPortRange() (PortRange, error) {
	r := PortRange{61000, 65535}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return r, nil // no procfs: assume the kernel's default
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return r, nil
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi < int(r.First) {
		return r, nil
	}
	if n := r.Len(); lo-n >= 1024 {
		return PortRange{uint16(lo - n), uint16(lo - 1)}, nil
	}
	return PortRange{}, fmt.Errorf("the ephemeral port range %d-%d leaves no room for a source-port range: configure one", lo, hi)
}

// CaptureMode selects how replies are captured.
type CaptureMode uint8

// The capture modes.
const (
	CaptureAuto   CaptureMode = iota // eBPF when it loads, else AF_PACKET
	CaptureBPF                       // eBPF only; New fails without it
	CapturePacket                    // AF_PACKET with a classic BPF filter
)

// CapturePath names the capture path in use, for the startup log and the
// capture-path metric.
type CapturePath string

// The capture paths.
const (
	PathBPFTCX   CapturePath = "bpf-tcx"   // eBPF attached through a TCX link
	PathBPFTC    CapturePath = "bpf-tc"    // eBPF attached as a clsact/cls_bpf filter
	PathAFPacket CapturePath = "af_packet" // AF_PACKET, classic BPF filter, TPACKET_V3
	PathNone     CapturePath = "none"      // no capture (tests)
)

// Config configures a [Prober]. Table and Sink are required.
type Config struct {
	// Table holds the targets, addressed by id. It must be filled before New
	// (the prober sizes its per-target state from it); ids added later are
	// not probed and count as send errors.
	Table *probe.Table
	// Sink receives the results.
	Sink probe.Sink
	// Lanes is the number of concurrent Launch callers (scheduler shards);
	// each lane has its own sockets and buffers. Default 1.
	Lanes int
	// Source4 and Source6 are the source addresses for IPv4 and IPv6 targets.
	// By default each is the kernel's route source towards the table's first
	// target of that family.
	Source4, Source6 netip.Addr
	// Interface is the interface whose ingress carries the replies. By default
	// the one holding the source address (IPv4 first).
	Interface string
	// Ports is the source-port range; default DefaultPortRange().
	Ports PortRange
	// NextHopMAC, when set, sends SYNs as Ethernet frames to this MAC address
	// through an AF_PACKET socket on Interface, skipping the kernel's routing,
	// neighbour resolution and output firewall (about 10% less CPU a probe
	// here). Every target must then be behind that one next hop: sonde does not
	// check. By default SYNs go through a raw IP socket and the kernel routes
	// each one.
	NextHopMAC net.HardwareAddr
	// Batch is the largest number of packets per system call; default 256,
	// at least 64.
	Batch int
	// Capture selects the capture path; default CaptureAuto.
	Capture CaptureMode
	// Attach selects TCX or TC for the eBPF capture; default bpf.AttachAuto.
	Attach bpf.Attach
	// RingBytes is the size of the BPF ring buffer or the AF_PACKET ring;
	// default 8 MiB.
	RingBytes int
	// PollInterval is how long replies may wait in the ring before the reader
	// drains it; default 2ms. It delays results, not RTTs, which come from
	// kernel timestamps.
	PollInterval time.Duration
}

// Counters are the prober's counters since New.
type Counters struct {
	Sent       uint64 // SYNs handed to the kernel
	SendErrors uint64 // SYNs the kernel refused (no route, no buffer) or that could not be built

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

	Capture CapturePath // the capture path in use
}

// Prober sends SYN probes and delivers their results. Launch may be called
// concurrently for different lanes; Counters and CapturePath from any
// goroutine. The reply reader runs on its own goroutine until Close.
type Prober struct {
	table *probe.Table
	sink  probe.Sink
	key   cookieKey
	ports PortRange
	batch int
	poll  time.Duration
	now   func() int64 // CLOCK_MONOTONIC nanoseconds

	tmpl4, tmpl6 *template

	// Per-target state, indexed by id, written by Launch and read by the reader.
	sent []atomic.Int64  // CLOCK_MONOTONIC ns of the last probe's send
	gen  []atomic.Uint32 // generation of the last probe
	done []atomic.Uint32 // generation+1 of the last probe answered, 0 if none

	lanes []*lane

	cap         capturer
	path        CapturePath
	fallbackErr error
	rc          readCounters
	readerDone  chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

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

// readCounters are written by the reader goroutine only.
type readCounters struct {
	kinds                     [4]atomic.Uint64 // by bpf.Kind
	invalid, stale, duplicate atomic.Uint64
	errors                    atomic.Uint64
}

// capturer is a source of replies: the eBPF ring buffer or an AF_PACKET ring.
type capturer interface {
	// poll handles every reply that arrives until deadline (or until woken),
	// calling handle for each. It returns an error matching os.ErrClosed
	// after close.
	poll(deadline time.Time) error
	// counters returns seen, matched and dropped packets.
	counters() (seen, matched, drops uint64, err error)
	// stop makes a running or later poll return os.ErrClosed; it may be
	// called from any goroutine.
	stop() error
	// close frees what is left once poll has returned for good.
	close() error
}

// New opens the sockets and the capture and starts the reply reader. It creates
// every socket and the capture in the calling thread's network namespace.
func New(cfg Config) (*Prober, error) {
	p, err := newProber(&cfg)
	if err != nil {
		return nil, err
	}
	var iface *net.Interface
	if iface, err = resolveInterface(&cfg); err != nil {
		return nil, err
	}
	if err := p.setSources(cfg); err != nil {
		return nil, err
	}
	for _, l := range p.lanes {
		for fam, t := range []*template{p.tmpl4, p.tmpl6} {
			if t == nil {
				continue
			}
			w, err := p.openWriter(cfg, iface, fam)
			if err != nil {
				return nil, errors.Join(err, p.closeWriters())
			}
			l.setWriter(fam, w)
		}
	}
	if err := p.openCapture(cfg, iface); err != nil {
		return nil, errors.Join(err, p.closeWriters())
	}
	p.startReader()
	return p, nil
}

// newProber validates cfg, fills its defaults and allocates the prober's state;
// it opens nothing.
func newProber(cfg *Config) (*Prober, error) {
	if cfg.Table == nil || cfg.Sink == nil {
		return nil, errors.New("syn prober needs a table and a sink")
	}
	if cfg.Lanes <= 0 {
		cfg.Lanes = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.Batch < 64 || cfg.Batch > 1024 {
		return nil, fmt.Errorf("batch %d out of range 64-1024", cfg.Batch)
	}
	if cfg.Ports == (PortRange{}) {
		r, err := DefaultPortRange()
		if err != nil {
			return nil, err
		}
		cfg.Ports = r
	}
	if cfg.Ports.First == 0 || cfg.Ports.Last < cfg.Ports.First {
		return nil, fmt.Errorf("bad source-port range %s", cfg.Ports)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Millisecond
	}
	n := cfg.Table.Len()
	p := &Prober{
		table: cfg.Table, sink: cfg.Sink, key: newCookieKey(), ports: cfg.Ports,
		batch: cfg.Batch, poll: cfg.PollInterval, now: probe.Nanotime,
		sent: make([]atomic.Int64, n), gen: make([]atomic.Uint32, n), done: make([]atomic.Uint32, n),
		path: PathNone,
	}
	for range cfg.Lanes {
		l := &lane{}
		for fam, size := range []int{ip4HdrLen + tcpHdrLen, ip6HdrLen + tcpHdrLen} {
			l.size[fam] = linkRoom + size
			l.buf[fam] = make([]byte, cfg.Batch*l.size[fam])
			l.pkt[fam] = make([][]byte, cfg.Batch)
			l.out[fam] = make([][]byte, cfg.Batch)
			for i := range l.pkt[fam] {
				end := (i + 1) * l.size[fam]
				l.pkt[fam][i] = l.buf[fam][end-size : end : end]
				l.out[fam][i] = l.pkt[fam][i]
			}
			l.ids[fam] = make([]uint32, cfg.Batch)
		}
		p.lanes = append(p.lanes, l)
	}
	return p, nil
}

// setSources builds the packet templates for the configured source addresses.
func (p *Prober) setSources(cfg Config) error {
	var err error
	if cfg.Source4.IsValid() {
		if p.tmpl4, err = newTemplate(cfg.Source4.Unmap()); err != nil {
			return err
		}
	}
	if cfg.Source6.IsValid() {
		if p.tmpl6, err = newTemplate(cfg.Source6); err != nil {
			return err
		}
	}
	if p.tmpl4 == nil && p.tmpl6 == nil {
		return errors.New("syn prober has no source address")
	}
	return nil
}

// resolveInterface fills in the default source addresses and finds the
// capture interface.
func resolveInterface(cfg *Config) (*net.Interface, error) {
	var first4, first6 netip.Addr
	for id := 0; id < cfg.Table.Len() && !(first4.IsValid() && first6.IsValid()); id++ {
		a := cfg.Table.Endpoint(uint32(id)).Addr()
		if a.Is4() && !first4.IsValid() {
			first4 = a
		} else if a.Is6() && !first6.IsValid() {
			first6 = a
		}
	}
	for _, f := range []struct {
		src   *netip.Addr
		first netip.Addr
	}{{&cfg.Source4, first4}, {&cfg.Source6, first6}} {
		if f.src.IsValid() || !f.first.IsValid() {
			continue
		}
		src, err := routeSource(f.first)
		if err != nil {
			return nil, err
		}
		*f.src = src
	}
	if cfg.Source4.IsValid() && !cfg.Source4.Unmap().Is4() || cfg.Source6.IsValid() && !cfg.Source6.Is6() {
		return nil, fmt.Errorf("source addresses %v, %v are not of their family", cfg.Source4, cfg.Source6)
	}
	if cfg.Interface != "" {
		iface, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("capture interface: %w", err)
		}
		return iface, nil
	}
	src := cfg.Source4
	if !src.IsValid() {
		src = cfg.Source6
	}
	return interfaceOf(src)
}

// routeSource asks the kernel which source address it would use towards dst,
// by connecting a UDP socket (which sends nothing).
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// interfaceOf returns the interface that has address a.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifaces {
		addrs, err := ifaces[i].Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == a {
					return &ifaces[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no interface has source address %v: set the interface", a)
}

// openCapture opens the capture path that cfg asks for.
func (p *Prober) openCapture(cfg Config, iface *net.Interface) error {
	if cfg.Capture != CapturePacket {
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
		})
		if err == nil {
			p.cap, p.path = c, c.path
			return nil
		}
		if cfg.Capture == CaptureBPF {
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
	p.cap, p.path = c, PathAFPacket
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

func (p *Prober) startReader() {
	p.readerDone = make(chan struct{})
	go func() {
		defer close(p.readerDone)
		for {
			err := p.cap.poll(time.Now().Add(p.poll))
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if err != nil {
				p.rc.errors.Add(1)
				time.Sleep(p.poll)
			}
		}
	}()
}

// CapturePath returns the capture path in use.
func (p *Prober) CapturePath() CapturePath { return p.path }

// CaptureFallback returns why the eBPF capture could not be used when the
// prober fell back to AF_PACKET, or nil.
func (p *Prober) CaptureFallback() error { return p.fallbackErr }

// Ports returns the source-port range in use.
func (p *Prober) Ports() PortRange { return p.ports }

// Sources returns the IPv4 and IPv6 source addresses in use (zero when a
// family is not probed).
func (p *Prober) Sources() (v4, v6 netip.Addr) {
	if p.tmpl4 != nil {
		v4 = netip.AddrFrom16(p.tmpl4.src).Unmap()
	}
	if p.tmpl6 != nil {
		v6 = netip.AddrFrom16(p.tmpl6.src)
	}
	return v4, v6
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
		if int(id) >= len(p.sent) {
			l.errs.Add(1)
			continue
		}
		dst := p.table.IP16(id)
		fam, t := 0, p.tmpl4
		if !isMapped(dst) {
			fam, t = 1, p.tmpl6
		}
		if t == nil {
			l.errs.Add(1)
			p.sink.Deliver(probe.Result{ID: id, Gen: req.Gen, Outcome: probe.Error, Done: p.now()})
			continue
		}
		p.gen[id].Store(req.Gen)
		p.done[id].Store(0)
		sport := p.ports.Port(id, req.Gen)
		dport := p.table.Port(id)
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
	now := p.now()
	for _, id := range ids {
		p.sent[id].Store(now)
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
				p.sink.Deliver(probe.Result{ID: id, Gen: p.gen[id].Load(), Outcome: probe.Unreachable, Done: p.now()})
			} else if cause := sendCause(err); cause != probe.CauseNone {
				p.sink.Deliver(probe.Result{ID: id, Gen: p.gen[id].Load(), Outcome: probe.LocalError, Cause: cause, Done: p.now()})
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

// handle validates a decoded reply and delivers its result.
func (p *Prober) handle(r *reply) {
	res, v := p.match(r)
	switch v {
	case verdictOK:
		p.rc.kinds[r.kind&3].Add(1)
		p.sink.Deliver(res)
	case verdictInvalid:
		p.rc.invalid.Add(1)
	case verdictStale:
		p.rc.stale.Add(1)
	case verdictDuplicate:
		p.rc.duplicate.Add(1)
	}
}

type verdict uint8

const (
	verdictOK verdict = iota
	verdictInvalid
	verdictStale
	verdictDuplicate
)

// match checks a reply against its cookie and the target's state.
func (p *Prober) match(r *reply) (probe.Result, verdict) {
	id := p.key.id(r.seq, &r.local, &r.remote, r.localPort, r.remotePort)
	if int(id) >= len(p.sent) || *p.table.IP16(id) != r.remote || p.table.Port(id) != r.remotePort {
		return probe.Result{}, verdictInvalid
	}
	gen := p.gen[id].Load()
	sent := p.sent[id].Load()
	if sent == 0 || r.localPort != p.ports.Port(id, gen) {
		return probe.Result{}, verdictStale
	}
	if p.done[id].Swap(gen+1) == gen+1 {
		return probe.Result{}, verdictDuplicate
	}
	res := probe.Result{ID: id, Gen: gen, Latency: time.Duration(max(r.ktime-sent, 0)), Done: r.ktime}
	switch r.kind {
	case bpf.KindSynAck:
		res.Outcome = probe.Success
	case bpf.KindRST:
		res.Outcome = probe.Refused
	default:
		res.Outcome = probe.Unreachable
	}
	return res, verdictOK
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
		Capture:       p.path,
	}
	for _, l := range p.lanes {
		c.Sent += l.sent.Load()
		c.SendErrors += l.errs.Load()
		c.Unreachable += l.unreach.Load()
	}
	if p.cap != nil {
		seen, matched, drops, err := p.cap.counters()
		if err != nil {
			c.CaptureErrors++
		}
		c.CaptureSeen, c.CaptureMatched, c.RingDrops = seen, matched, drops
	}
	return c
}

// Close stops the reply reader, then closes the capture and the sockets.
// Results of replies still in flight are lost. Later calls return the same.
func (p *Prober) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		if p.cap != nil {
			errs = append(errs, p.cap.stop())
			if p.readerDone != nil {
				<-p.readerDone
			}
			errs = append(errs, p.cap.close())
		}
		errs = append(errs, p.closeWriters())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

func (p *Prober) closeWriters() error {
	var errs []error
	for _, l := range p.lanes {
		for i, w := range l.w {
			if w != nil {
				errs = append(errs, w.close())
				l.w[i] = nil
			}
		}
	}
	return errors.Join(errs...)
}

func isMapped(a *[16]byte) bool { return [12]byte(a[:12]) == v4InV6Prefix }
