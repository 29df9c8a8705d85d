package syn

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

var (
	target4 = netip.MustParseAddrPort("198.18.3.4:80")
	target6 = netip.MustParseAddrPort("[2001:db8:5eed::34]:443")
)

// sentPackets launches one probe per target (gen gens[i]) and returns the SYNs.
func sentPackets(t testing.TB, p *Prober, ws [][2]*memWriter, gens ...uint32) [][]byte {
	t.Helper()
	var reqs []probe.Request
	for id, g := range gens {
		reqs = append(reqs, probe.Request{ID: uint32(id), Gen: g})
	}
	p.Launch(0, reqs)
	var pkts [][]byte
	for _, w := range ws[0] {
		pkts = append(pkts, w.pkts...)
		w.pkts = nil
	}
	return pkts
}

func TestDecodePacket(t *testing.T) {
	t.Parallel()
	p, ws := testProber(t, &probetest.Sink{}, 1, target4, target6)
	syns := sentPackets(t, p, ws, 7, 9)
	if len(syns) != 2 {
		t.Fatalf("sent %d packets, want 2", len(syns))
	}
	for i, syn := range syns {
		tgt := []netip.AddrPort{target4, target6}[i]
		local := []netip.Addr{src4, src6}[i]
		sport := p.ports.Port(uint32(i), []uint32{7, 9}[i])
		seq := binary.BigEndian.Uint32(syn[len(syn)-tcpHdrLen+4:])
		for _, kind := range []bpf.Kind{bpf.KindSynAck, bpf.KindRST, bpf.KindUnreachable} {
			var r reply
			if err := decodePacket(answer(t, syn, kind, 0), &r); err != nil {
				t.Fatalf("%v %v: %v", tgt, kind, err)
			}
			want := reply{kind: kind, remote: tgt.Addr().As16(), local: local.As16(),
				remotePort: tgt.Port(), localPort: sport, seq: seq}
			if diff := cmp.Diff(want, r, cmp.AllowUnexported(reply{})); diff != "" {
				t.Errorf("%v kind %d (-want +got):\n%s", tgt, kind, diff)
			}
		}
	}
}

func TestDecodePacketRejects(t *testing.T) {
	t.Parallel()
	p, ws := testProber(t, &probetest.Sink{}, 1, target4, target6)
	syns := sentPackets(t, p, ws, 0, 0)
	synack := answer(t, syns[0], bpf.KindSynAck, 0)
	noAck := append([]byte(nil), synack...)
	noAck[ip4HdrLen+13] = tcpFlagRST
	echo := answer(t, syns[0], bpf.KindUnreachable, 0)
	echo[ip4HdrLen] = 8 // echo request, not unreachable
	frag := append([]byte(nil), synack...)
	frag[7] = 1 // fragment offset 8
	tests := []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, errTruncated},
		{"ipv4 header cut", synack[:10], errTruncated},
		{"tcp cut", synack[:ip4HdrLen+12], errTruncated},
		{"our own SYN", syns[0], errNotReply},
		{"our own SYN v6", syns[1], errNotReply},
		{"RST without ACK", noAck, errNoAck},
		{"ICMP echo", echo, errNotReply},
		{"later fragment", frag, errNotReply},
		{"ipv5", []byte{0x50, 0, 0, 0}, errNotReply},
		{"icmpv6 cut", answer(t, syns[1], bpf.KindUnreachable, 0)[:ip6HdrLen+8+ip6HdrLen], errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r reply
			if err := decodePacket(tt.pkt, &r); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	ev := bpf.Event{Ktime: 5, Remote: target4.Addr().As16(), Local: src4.As16(), Seq: 1, Ack: 100,
		RemotePort: 80, LocalPort: 61001, Kind: uint8(bpf.KindSynAck), TcpFlags: 0x12, Family: 4}
	var r reply
	if err := decodeEvent(&ev, &r); err != nil {
		t.Fatal(err)
	}
	want := reply{kind: bpf.KindSynAck, remote: ev.Remote, local: ev.Local, remotePort: 80, localPort: 61001, seq: 99, ktime: 5}
	if diff := cmp.Diff(want, r, cmp.AllowUnexported(reply{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	ev.Kind, ev.Seq = uint8(bpf.KindUnreachable), 1234
	if err := decodeEvent(&ev, &r); err != nil || r.seq != 1234 || r.kind != bpf.KindUnreachable {
		t.Errorf("unreachable: %v %+v", err, r)
	}
	ev.Kind, ev.TcpFlags = uint8(bpf.KindRST), tcpFlagRST
	if err := decodeEvent(&ev, &r); !errors.Is(err, errNoAck) {
		t.Errorf("RST without ACK: err = %v", err)
	}
	ev.TcpFlags, ev.Family = 0x14, 6 // an IPv4-mapped address claiming to be IPv6
	if err := decodeEvent(&ev, &r); !errors.Is(err, errBadEvent) {
		t.Errorf("family mismatch: err = %v", err)
	}
}

// TestMatch sends probes through an in-memory writer and feeds crafted replies
// back: valid ones are delivered with the right id, generation, outcome and
// RTT; stray, stale and duplicate ones are counted and dropped.
func TestMatch(t *testing.T) {
	t.Parallel()
	sink := &probetest.Sink{}
	p, ws := testProber(t, sink, 1, target4, target6)
	syns := sentPackets(t, p, ws, 3, 4)
	feed := func(pkt []byte, ktime int64) {
		t.Helper()
		var r reply
		if err := decodePacket(pkt, &r); err != nil {
			t.Fatal(err)
		}
		r.ktime = ktime
		p.handle(&r)
	}
	feed(answer(t, syns[0], bpf.KindSynAck, 0), 1_250_000)
	feed(answer(t, syns[1], bpf.KindUnreachable, 0), 1_500_000)
	want := []probe.Result{
		{ID: 0, Gen: 3, Outcome: probe.Success, Latency: 250 * time.Microsecond, Done: 1_250_000},
		{ID: 1, Gen: 4, Outcome: probe.Unreachable, Latency: 500 * time.Microsecond, Done: 1_500_000},
	}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Fatalf("delivered (-want +got):\n%s", diff)
	}

	feed(answer(t, syns[0], bpf.KindRST, 0), 2_000_000) // answered already
	feed(answer(t, syns[0], bpf.KindSynAck, 1), 2_000_000)
	feed(answer(t, syns[1], bpf.KindUnreachable, 0x40), 2_000_000)
	other, _ := testProber(t, &probetest.Sink{}, 1, target4, target6) // another key
	var r reply
	_ = decodePacket(answer(t, syns[0], bpf.KindSynAck, 0), &r)
	if _, v := other.match(&r); v != verdictInvalid {
		t.Errorf("a reply to another prober's probe: verdict %d, want invalid", v)
	}
	// A new probe of target 0 (gen 5) makes the gen-3 SYN's answer stale.
	newer := sentPackets(t, p, ws, 5)
	feed(answer(t, syns[0], bpf.KindSynAck, 0), 3_000_000)
	feed(answer(t, newer[0], bpf.KindRST, 0), 3_000_000)
	if diff := cmp.Diff([]probe.Result{{ID: 0, Gen: 5, Outcome: probe.Refused, Latency: 2 * time.Millisecond, Done: 3_000_000}}, sink.Take()); diff != "" {
		t.Errorf("after a new generation (-want +got):\n%s", diff)
	}
	c := p.Counters()
	got := [6]uint64{c.SynAck, c.RST, c.Unreachable, c.InvalidCookie, c.Stale, c.Duplicate}
	if want := [6]uint64{1, 1, 1, 2, 1, 1}; got != want {
		t.Errorf("synack, rst, unreach, invalid, stale, duplicate = %v, want %v", got, want)
	}
	if c.Sent != 3 || c.SendErrors != 0 || c.Path != "" {
		t.Errorf("counters = %+v", c)
	}
}

func TestLaunchSendErrors(t *testing.T) {
	t.Parallel()
	sink := &probetest.Sink{}
	p, ws := testProber(t, sink, 1, target4, target4, target4)
	ws[0][0].fail = unix.ENETUNREACH
	p.Launch(0, []probe.Request{{ID: 0, Gen: 1}, {ID: 1, Gen: 1}, {ID: 2, Gen: 1}, {ID: 99}})
	c := p.Counters()
	if c.Sent != 2 || c.SendErrors != 2 || c.Unreachable != 1 {
		t.Errorf("sent %d, errors %d, unreachable %d; want 2, 2, 1", c.Sent, c.SendErrors, c.Unreachable)
	}
	if diff := cmp.Diff([]probe.Result{{ID: 0, Gen: 1, Outcome: probe.Unreachable, Done: 1_000_000}}, sink.Take()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	// Full queues are retried, not dropped.
	ws[0][0].fail = unix.ENOBUFS
	p.Launch(0, []probe.Request{{ID: 0, Gen: 2}})
	if c := p.Counters(); c.Sent != 3 || c.SendErrors != 2 {
		t.Errorf("after ENOBUFS: sent %d, errors %d; want 3, 2", c.Sent, c.SendErrors)
	}
	// Buffers that stay full are this host's trouble: a LocalError.
	ws[0][0].fail, ws[0][0].failN = unix.ENOBUFS, maxRetries+1
	p.Launch(0, []probe.Request{{ID: 1, Gen: 3}})
	want := []probe.Result{{ID: 1, Gen: 3, Outcome: probe.LocalError, Cause: probe.CauseBuffers, Done: 1_000_000}}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Errorf("after lasting ENOBUFS (-want +got):\n%s", diff)
	}
	// A firewall's EPERM concerns the target: the probe times out.
	ws[0][0].fail = unix.EPERM
	p.Launch(0, []probe.Request{{ID: 2, Gen: 4}})
	if got := sink.Take(); len(got) != 0 {
		t.Errorf("after EPERM: delivered %+v, want nothing", got)
	}
	if c := p.Counters(); c.SendErrors != 4 {
		t.Errorf("send errors %d, want 4", c.SendErrors)
	}
}

func TestLaunchBatches(t *testing.T) {
	t.Parallel()
	var targets []netip.AddrPort
	for i := range 1000 {
		targets = append(targets, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 80))
	}
	p, ws := testProber(t, probetest.Discard{}, 1, targets...)
	reqs := make([]probe.Request, len(targets))
	for i := range reqs {
		reqs[i].ID = uint32(i)
	}
	p.Launch(0, reqs)
	if got, want := ws[0][0].calls, 4; got != want { // 256+256+256+232
		t.Errorf("%d system calls for 1000 probes, want %d", got, want)
	}
	if len(ws[0][0].pkts) != 1000 {
		t.Errorf("%d packets, want 1000", len(ws[0][0].pkts))
	}
}

// TestZeroAlloc proves that sending and handling a reply allocate nothing.
func TestZeroAlloc(t *testing.T) {
	p, ws := testProber(t, probetest.Discard{}, 1, target4, target6)
	ws[0][0].keep, ws[0][1].keep = false, false
	reqs := []probe.Request{{ID: 0}, {ID: 1}}
	if n := testing.AllocsPerRun(100, func() { p.Launch(0, reqs) }); n != 0 {
		t.Errorf("Launch allocates %v times per call", n)
	}
	ws[0][0].keep = true
	p.Launch(0, reqs[:1])
	pkt := answer(t, ws[0][0].pkts[0], bpf.KindSynAck, 0)
	var r reply
	if n := testing.AllocsPerRun(100, func() {
		_ = decodePacket(pkt, &r)
		p.handle(&r)
	}); n != 0 {
		t.Errorf("decode and handle allocate %v times per reply", n)
	}
	ev := bpf.Event{Family: 4, Kind: 1, TcpFlags: 0x12}
	if n := testing.AllocsPerRun(100, func() {
		_ = decodeEvent(&ev, &r)
		p.handle(&r)
	}); n != 0 {
		t.Errorf("event decode and handle allocate %v times per reply", n)
	}
}

func FuzzDecodePacket(f *testing.F) {
	p, ws := testProber(f, &probetest.Sink{}, 1, target4, target6)
	syns := sentPackets(f, p, ws, 1, 2)
	for _, syn := range syns {
		f.Add(syn)
		for _, k := range []bpf.Kind{bpf.KindSynAck, bpf.KindRST, bpf.KindUnreachable} {
			f.Add(answer(f, syn, k, 0))
		}
	}
	f.Add([]byte{0x4f})
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 58, 64})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r reply
		if err := decodePacket(b, &r); err != nil {
			return
		}
		if r.kind < bpf.KindSynAck || r.kind > bpf.KindUnreachable {
			t.Fatalf("decoded kind %d", r.kind)
		}
		p.handle(&r) // must not panic, whatever the cookie says
	})
}

func FuzzDecodeEvent(f *testing.F) {
	p, _ := testProber(f, &probetest.Sink{}, 1, target4, target6)
	f.Add(make([]byte, bpf.EventSize))
	ev := make([]byte, bpf.EventSize)
	ev[18], ev[19], ev[52], ev[53], ev[54] = 0xff, 0xff, 1, 0x12, 4
	f.Add(ev)
	f.Fuzz(func(t *testing.T, b []byte) {
		var e bpf.Event
		if bpf.DecodeEvent(b, &e) != nil {
			return
		}
		var r reply
		if decodeEvent(&e, &r) == nil {
			p.handle(&r)
		}
	})
}

// runCBPF is a small classic-BPF interpreter, enough for replyFilter's
// instructions, so the filter is tested without a socket.
func runCBPF(t *testing.T, prog []unix.SockFilter, pkt []byte) uint32 {
	t.Helper()
	var a, x uint32
	load := func(off uint32, size int) (uint32, bool) {
		if int(off)+size > len(pkt) {
			return 0, false
		}
		switch size {
		case 1:
			return uint32(pkt[off]), true
		case 2:
			return uint32(binary.BigEndian.Uint16(pkt[off:])), true
		}
		return binary.BigEndian.Uint32(pkt[off:]), true
	}
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		size := map[uint16]int{unix.BPF_B: 1, unix.BPF_H: 2, unix.BPF_W: 4}[in.Code&0x18]
		switch in.Code &^ 0x18 {
		case unix.BPF_LD | unix.BPF_ABS:
			v, ok := load(in.K, size)
			if !ok {
				return 0
			}
			a = v
		case unix.BPF_LD | unix.BPF_IND:
			v, ok := load(x+in.K, size)
			if !ok {
				return 0
			}
			a = v
		case unix.BPF_LDX | unix.BPF_MSH:
			v, ok := load(in.K, 1)
			if !ok {
				return 0
			}
			x = 4 * (v & 0xf)
		case (unix.BPF_ALU | unix.BPF_AND | unix.BPF_K) &^ 0x18:
			a &= in.K
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			var cond bool
			switch in.Code {
			case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
				cond = a == in.K
			case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
				cond = a >= in.K
			case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
				cond = a > in.K
			case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
				cond = a&in.K != 0
			default:
				t.Fatalf("unknown instruction %#x", in.Code)
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		}
	}
	t.Fatal("filter fell off its end")
	return 0
}

func TestReplyFilter(t *testing.T) {
	t.Parallel()
	p, ws := testProber(t, &probetest.Sink{}, 1, target4, target6)
	syns := sentPackets(t, p, ws, 1, 1)
	prog, err := replyFilter(p.ports, 192)
	if err != nil {
		t.Fatal(err)
	}
	for i, syn := range syns {
		if runCBPF(t, prog, syn) != 0 {
			t.Errorf("family %d: our own SYN passes the filter", i)
		}
		for _, k := range []bpf.Kind{bpf.KindSynAck, bpf.KindRST, bpf.KindUnreachable} {
			if runCBPF(t, prog, answer(t, syn, k, 0)) != 192 {
				t.Errorf("family %d: reply kind %d is filtered out", i, k)
			}
		}
		other := answer(t, syn, bpf.KindSynAck, 0)
		off := ip4HdrLen
		if i == 1 {
			off = ip6HdrLen
		}
		binary.BigEndian.PutUint16(other[off+2:], 60999) // below the port range
		if runCBPF(t, prog, other) != 0 {
			t.Errorf("family %d: a reply to a port outside the range passes", i)
		}
	}
}

// TestPacer runs a pacer on a simulated clock whose sleeps move time forward
// by exactly what was asked.
func TestPacer(t *testing.T) {
	var now int64 = 1 // any non-zero start
	slept := time.Duration(0)
	fake := func(p *pacer) *pacer {
		p.now = func() int64 { return now }
		p.sleep = func(d time.Duration) { slept += d; now += int64(d) }
		return p
	}
	p := fake(newPacer(20000, 100))
	for range 100 {
		p.wait(100) // 10,000 probes at 20,000/s, a burst of 100 free
	}
	if want := time.Duration(9900) * time.Second / 20000; slept < want-time.Microsecond || slept > want+time.Microsecond {
		t.Errorf("10,000 probes at 20,000/s with a burst of 100 slept %v, want %v", slept, want)
	}
	// Time that passed outside wait counts: a sender that was late does not
	// sleep to make up for it.
	now += int64(time.Second)
	before := slept
	p.wait(100)
	if slept != before {
		t.Errorf("a sender one second behind slept %v", slept-before)
	}
	if n := testing.AllocsPerRun(10, func() { p.wait(1) }); n != 0 {
		t.Errorf("wait allocates %v times", n)
	}
	unlimited := fake(newPacer(0, 1))
	slept = 0
	unlimited.wait(1 << 30)
	if slept != 0 {
		t.Errorf("an unlimited pacer slept %v", slept)
	}
}

// TestMatchTableChanges checks the prober against a table that changes while
// it runs, as a reload or service discovery changes it: targets added after
// New (beyond its first block of state) are probed and their replies
// delivered, and a reply to a probe of an id whose endpoint changed since is
// dropped as invalid.
func TestMatchTableChanges(t *testing.T) {
	t.Parallel()
	sink := &probetest.Sink{}
	p, ws := testProber(t, sink, 1, target4)
	old := sentPackets(t, p, ws, 1)
	const late = 3000 // an id far beyond the prober's state at New
	moved := netip.MustParseAddrPort("198.18.9.9:80")
	entries := []probe.TableEntry{{ID: 0, Endpoint: moved}}
	for id := uint32(1); id <= late; id++ {
		entries = append(entries, probe.TableEntry{ID: id, Endpoint: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 10, byte(id)}), 80)})
	}
	p.table.(*probe.Table).Put(entries)

	p.Launch(0, []probe.Request{{ID: late, Gen: 4}})
	syn := ws[0][0].pkts[0]
	ws[0][0].pkts = nil
	feed := func(pkt []byte) {
		t.Helper()
		var r reply
		if err := decodePacket(pkt, &r); err != nil {
			t.Fatal(err)
		}
		r.ktime = 2_000_000
		p.handle(&r)
	}
	feed(answer(t, syn, bpf.KindSynAck, 0))
	feed(answer(t, old[0], bpf.KindSynAck, 0)) // id 0 moved since
	want := []probe.Result{{ID: late, Gen: 4, Outcome: probe.Success, Latency: time.Millisecond, Done: 2_000_000}}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Fatalf("delivered (-want +got):\n%s", diff)
	}
	if c := p.Counters(); c.InvalidCookie != 1 || c.SendErrors != 0 {
		t.Errorf("invalid %d, send errors %d; want 1, 0", c.InvalidCookie, c.SendErrors)
	}
}
