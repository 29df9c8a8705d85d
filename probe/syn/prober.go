package syn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

var _ probe.Launcher = (*Prober)(nil)

// Prober sends SYN probes and delivers their results. Launch may be called
// concurrently for different lanes; Counters and Path from any
// goroutine. The reply reader runs on its own goroutine until Close.
type Prober struct {
	table probe.Endpoints
	sink  probe.Sink
	key   cookieKey
	ports PortRange
	batch int
	poll  time.Duration
	now   func() int64 // CLOCK_MONOTONIC nanoseconds

	tmpl4, tmpl6 *template

	probes *states    // per target id: its last probe
	settle settlement // how far replies are read, and when some were lost

	lanes []*lane

	cap         capturer
	path        probe.TCPPath
	attach      bpf.Attach
	fallbackErr error
	rc          readCounters
	readerDone  chan struct{}
	closeOnce   sync.Once
	closeErr    error
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
	switch cfg.Path {
	case "", probe.PathSynBPF, probe.PathSynPacket:
	default:
		return nil, fmt.Errorf("path %q: the SYN prober runs %s or %s", cfg.Path, probe.PathSynBPF, probe.PathSynPacket)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Millisecond
	}
	p := &Prober{
		table: cfg.Table, sink: cfg.Sink, key: newCookieKey(), ports: cfg.Ports,
		batch: cfg.Batch, poll: cfg.PollInterval, now: probe.Nanotime,
		probes: newStates(cfg.Table.Len()),
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
			l.late[fam] = make([]int64, cfg.Batch)
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

// Path returns the path in use: [probe.PathSynBPF] or [probe.PathSynPacket].
func (p *Prober) Path() probe.TCPPath { return p.path }

// Attachment returns how the eBPF capture is attached ([bpf.AttachTCX] or
// [bpf.AttachTC]) when Path is [probe.PathSynBPF], else [bpf.AttachAuto].
func (p *Prober) Attachment() bpf.Attach { return p.attach }

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
