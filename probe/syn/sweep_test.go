package syn

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// answerWriter is a batchWriter that answers every SYN at once through the
// prober's reply path, as the target at its destination would: kind names
// the answer (ok false: no answer). It records what it sent when log is set.
// Each lane has its own, so it needs no lock.
type answerWriter struct {
	p      *Prober
	kind   func(netip.AddrPort) (bpf.Kind, bool)
	onSend func() // called once per batch, before answering
	log    bool
	sent   []netip.AddrPort
	calls  int
	r      reply
}

func (w *answerWriter) frameHeader() []byte { return nil }
func (w *answerWriter) close() error        { return nil }

func (w *answerWriter) writeBatch(pkts [][]byte) (int, error) {
	w.calls++
	if w.onSend != nil {
		w.onSend()
	}
	for _, pkt := range pkts {
		r := &w.r
		var tcp []byte
		if pkt[0]>>4 == 4 {
			r.local = netip.AddrFrom4([4]byte(pkt[12:16])).As16()
			r.remote = netip.AddrFrom4([4]byte(pkt[16:20])).As16()
			tcp = pkt[ip4HdrLen:]
		} else {
			r.local, r.remote = [16]byte(pkt[8:24]), [16]byte(pkt[24:40])
			tcp = pkt[ip6HdrLen:]
		}
		r.localPort, r.remotePort = binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4])
		r.seq = binary.BigEndian.Uint32(tcp[4:8])
		dst := netip.AddrPortFrom(netip.AddrFrom16(r.remote).Unmap(), r.remotePort)
		if w.log {
			w.sent = append(w.sent, dst)
		}
		kind, ok := w.kind(dst)
		if !ok {
			continue
		}
		r.kind, r.ktime = kind, 1_000_000+int64(100*time.Microsecond)
		w.p.handle(r)
	}
	return len(pkts), nil
}

// answering returns a prober constructor for newSweep whose lanes write to
// answerWriters (kept in *ws) and whose clock stands at 1 ms.
func answering(ws *[]*answerWriter, kind func(netip.AddrPort) (bpf.Kind, bool), log bool) func(Config) (*Prober, error) {
	return func(cfg Config) (*Prober, error) {
		cfg.Ports, cfg.Source4, cfg.Source6 = PortRange{61000, 65535}, src4, src6
		p, err := newProber(&cfg)
		if err != nil {
			return nil, err
		}
		if err := p.setSources(cfg); err != nil {
			return nil, err
		}
		for _, l := range p.lanes {
			for fam := range 2 {
				w := &answerWriter{p: p, kind: kind, log: log}
				l.setWriter(fam, w)
				*ws = append(*ws, w)
			}
		}
		p.now = func() int64 { return 1_000_000 }
		return p, nil
	}
}

// sweepTable returns a table of n4 IPv4 and n6 IPv6 endpoints on port 80.
func sweepTable(n4, n6 int) *probe.Table {
	tab := probe.NewTable(n4 + n6)
	for i := range n4 {
		tab.Add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 80))
	}
	for i := range n6 {
		b := netip.MustParseAddr("2001:db8:5eed::").As16()
		b[14], b[15] = byte(i>>8), byte(i)
		tab.Add(netip.AddrPortFrom(netip.AddrFrom16(b), 80))
	}
	return tab
}

// TestSweep sweeps 1,100 endpoints from three lanes, every one answered:
// each is sent exactly once, each outcome is kept, and the sweep ends as soon
// as the last reply is in (its timeout is an hour).
func TestSweep(t *testing.T) {
	t.Parallel()
	tab := sweepTable(1000, 100)
	want := map[netip.AddrPort]probe.Outcome{}
	kinds := map[netip.AddrPort]bpf.Kind{}
	for id := range tab.Len() {
		ep := tab.Endpoint(uint32(id))
		switch id % 10 {
		case 4:
			want[ep], kinds[ep] = probe.Refused, bpf.KindRST
		case 5:
			want[ep], kinds[ep] = probe.Unreachable, bpf.KindUnreachable
		default:
			want[ep], kinds[ep] = probe.Success, bpf.KindSynAck
		}
	}
	var ws []*answerWriter
	kind := func(ep netip.AddrPort) (bpf.Kind, bool) { k, ok := kinds[ep]; return k, ok }
	s, err := newSweep(SweepOptions{Prober: Config{Table: tab, Lanes: 3}, Timeout: time.Hour}, answering(&ws, kind, true))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent := map[netip.AddrPort]int{}
	for _, w := range ws {
		for _, ep := range w.sent {
			sent[ep]++
		}
	}
	for id := range tab.Len() {
		ep := tab.Endpoint(uint32(id))
		if sent[ep] != 1 {
			t.Errorf("%s sent %d times", ep, sent[ep])
		}
	}
	got := map[netip.AddrPort]probe.Outcome{}
	for id := range st.Sent {
		o, rtt, ok := s.Result(uint32(id))
		if !ok || rtt != 100*time.Microsecond {
			t.Errorf("id %d: %s, rtt %v, answered %v", id, o, rtt, ok)
		}
		got[tab.Endpoint(uint32(id))] = o
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	var outcomes [probe.NumOutcomes]int
	outcomes[probe.Success], outcomes[probe.Refused], outcomes[probe.Unreachable] = 880, 110, 110
	if st.Probes != 1100 || st.Sent != 1100 || st.Replies != 1100 || st.Late != 0 || st.Outcomes != outcomes {
		t.Errorf("stats: probes %d, sent %d, replies %d, late %d, outcomes %v", st.Probes, st.Sent, st.Replies, st.Late, st.Outcomes)
	}
	if c := st.Counters; c.Sent != 1100 || c.SynAck != 880 || c.RST != 110 || c.Unreachable != 110 {
		t.Errorf("counters = %+v", c)
	}
	if st.Source4 != src4 || st.Source6 != src6 || st.Ports != (PortRange{61000, 65535}) {
		t.Errorf("sources %v, %v, ports %v", st.Source4, st.Source6, st.Ports)
	}
	if _, err := s.Run(context.Background()); !errors.Is(err, ErrSweepRan) {
		t.Errorf("second Run: %v, want ErrSweepRan", err)
	}
}

// TestSweepCancel cancels a sweep from inside its third send: the probes sent
// are exactly the first Sent ids, the unanswered ones are timeouts, and the
// error says why the sweep stopped.
func TestSweepCancel(t *testing.T) {
	tab := sweepTable(10000, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	batches := 0
	var ws []*answerWriter
	none := func(netip.AddrPort) (bpf.Kind, bool) { return 0, false }
	s, err := newSweep(SweepOptions{Prober: Config{Table: tab, Lanes: 2, Batch: 64}, Timeout: time.Hour}, answering(&ws, none, true))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.onSend = func() {
			mu.Lock()
			defer mu.Unlock()
			if batches++; batches == 3 {
				cancel()
			}
		}
	}
	st, err := s.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if st.Sent < 3*64 || st.Sent >= tab.Len() || st.Outcomes[probe.Timeout] != st.Sent || st.Replies != 0 {
		t.Fatalf("sent %d of %d, outcomes %v, replies %d", st.Sent, tab.Len(), st.Outcomes, st.Replies)
	}
	sent := map[netip.AddrPort]bool{}
	for _, w := range ws {
		for _, ep := range w.sent {
			sent[ep] = true
		}
	}
	for id := range tab.Len() {
		if ep := tab.Endpoint(uint32(id)); sent[ep] != (id < st.Sent) {
			t.Fatalf("id %d (%s): sent %v with Sent = %d", id, ep, sent[ep], st.Sent)
		}
	}
}

// TestSweepChunks shows that a paced sweep launches chunks of about 5 ms of
// probes, not whole batches: at 20,000 probes/s, 100 a system call.
func TestSweepChunks(t *testing.T) {
	t.Parallel()
	tab := sweepTable(1000, 0)
	var ws []*answerWriter
	all := func(netip.AddrPort) (bpf.Kind, bool) { return bpf.KindSynAck, true }
	s, err := newSweep(SweepOptions{Prober: Config{Table: tab}, Rate: 20000, Timeout: time.Hour}, answering(&ws, all, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls := ws[0].calls; calls != 10 {
		t.Errorf("%d system calls for 1,000 probes at 20,000/s, want 10", calls)
	}
}

// TestSweepLate counts replies that come after the timeout as timeouts.
func TestSweepLate(t *testing.T) {
	r := newSweepResults(3, time.Second)
	r.Deliver(probe.Result{ID: 0, Outcome: probe.Success, Latency: time.Second})
	r.Deliver(probe.Result{ID: 1, Outcome: probe.Refused, Latency: time.Second + 1})
	r.Deliver(probe.Result{ID: 7, Outcome: probe.Success}) // not in the table
	s := &Sweep{res: r}
	type res struct {
		O   probe.Outcome
		RTT time.Duration
		OK  bool
	}
	var got []res
	for id := range 3 {
		o, rtt, ok := s.Result(uint32(id))
		got = append(got, res{o, rtt, ok})
	}
	want := []res{{probe.Success, time.Second, true}, {probe.Timeout, 0, false}, {probe.Timeout, 0, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if r.replies.Load() != 1 || r.late.Load() != 1 {
		t.Errorf("replies %d, late %d; want 1, 1", r.replies.Load(), r.late.Load())
	}
}

// TestSweepAllocs proves that a sweep allocates per lane and per sweep, not
// per probe: 64,000 probes cost no more allocations than 1,000.
func TestSweepAllocs(t *testing.T) {
	all := func(netip.AddrPort) (bpf.Kind, bool) { return bpf.KindSynAck, true }
	allocs := func(n int) float64 {
		tab := sweepTable(n, 0)
		return testing.AllocsPerRun(2, func() {
			var ws []*answerWriter
			s, err := newSweep(SweepOptions{Prober: Config{Table: tab, Lanes: 2}, Timeout: time.Hour}, answering(&ws, all, false))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(1000), allocs(64000)
	t.Logf("allocations: %v for 1,000 probes, %v for 64,000", small, large)
	if large > small+20 {
		t.Errorf("a sweep of 64,000 probes allocates %v times, one of 1,000 %v times", large, small)
	}
}

func TestNewSweepRejects(t *testing.T) {
	t.Parallel()
	tab := sweepTable(1, 0)
	open := func(Config) (*Prober, error) {
		t.Error("the prober was opened")
		return nil, errors.New("not opened")
	}
	for _, tt := range []struct {
		name string
		o    SweepOptions
		want string
	}{
		{"no table", SweepOptions{Timeout: time.Second}, "sweep needs a table of endpoints"},
		{"sink", SweepOptions{Prober: Config{Table: tab, Sink: probetest.Discard{}}, Timeout: time.Second}, "sweep collects its results itself: leave Prober.Sink nil"},
		{"negative rate", SweepOptions{Prober: Config{Table: tab}, Rate: -1, Timeout: time.Second}, "sweep rate -1: want 0 (no limit) or a positive number of probes per second"},
		{"NaN rate", SweepOptions{Prober: Config{Table: tab}, Rate: math.NaN(), Timeout: time.Second}, "sweep rate NaN: want 0 (no limit) or a positive number of probes per second"},
		{"no timeout", SweepOptions{Prober: Config{Table: tab}}, "sweep timeout 0s: want a positive duration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := newSweep(tt.o, open); err == nil || err.Error() != tt.want {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestSweepRetries: endpoints that answer only their second SYN are
// answered after one retry pass, which sends again to them alone, with the
// first SYN's port and cookie.
func TestSweepRetries(t *testing.T) {
	t.Parallel()
	tab := sweepTable(500, 50)
	var mu sync.Mutex
	seen := map[netip.AddrPort]int{}
	kind := func(ep netip.AddrPort) (bpf.Kind, bool) {
		mu.Lock()
		defer mu.Unlock()
		seen[ep]++
		lossy := ep.Addr().As16()[15]%2 == 1
		return bpf.KindSynAck, !lossy || seen[ep] > 1
	}
	var ws []*answerWriter
	s, err := newSweep(SweepOptions{Prober: Config{Table: tab, Lanes: 2}, Timeout: time.Hour, Retries: 3, RetryWait: time.Millisecond},
		answering(&ws, kind, false))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lossy := 0
	for id := range tab.Len() {
		ep := tab.Endpoint(uint32(id))
		want := 1
		if ep.Addr().As16()[15]%2 == 1 {
			want, lossy = 2, lossy+1
		}
		if seen[ep] != want {
			t.Errorf("%s sent %d times, want %d", ep, seen[ep], want)
		}
		if o, _, ok := s.Result(uint32(id)); !ok || o != probe.Success {
			t.Errorf("%s: %s, answered %v", ep, o, ok)
		}
	}
	if st.Replies != tab.Len() || st.Resent != lossy || st.Counters.Sent != uint64(tab.Len()+lossy) {
		t.Errorf("replies %d, resent %d, sent %d; want %d, %d, %d", st.Replies, st.Resent, st.Counters.Sent, tab.Len(), lossy, tab.Len()+lossy)
	}
}

func TestSweepRetriesRange(t *testing.T) {
	t.Parallel()
	for _, o := range []SweepOptions{{Retries: -1}, {Retries: MaxSweepRetries + 1}, {RetryWait: -time.Second}} {
		o.Prober.Table, o.Timeout = sweepTable(1, 0), time.Second
		if _, err := newSweep(o, answering(new([]*answerWriter), nil, false)); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
