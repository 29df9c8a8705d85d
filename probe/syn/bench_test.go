package syn

import (
	"net/netip"
	"testing"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// BenchmarkLaunch measures the send path without the system call: building,
// patching and checksumming SYNs, cookies and per-target state, in batches of
// 256 handed to an in-memory writer.
func BenchmarkLaunch(b *testing.B) {
	const n = 1 << 16
	targets := make([]netip.AddrPort, n)
	for i := range targets {
		targets[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 80)
	}
	p, ws := testProber(b, probetest.Discard{}, 1, targets...)
	ws[0][0].keep = false
	reqs := make([]probe.Request, 256)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for j := range reqs {
			reqs[j] = probe.Request{ID: uint32((i + j) % n), Gen: uint32(i)}
		}
		p.Launch(0, reqs)
		i += len(reqs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/probe")
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "probes/s")
}

// BenchmarkReceive measures the receive path: decoding a ring-buffer record,
// checking its cookie and the target's state, and delivering the result.
func BenchmarkReceive(b *testing.B) {
	p, ws := testProber(b, probetest.Discard{}, 1, target4)
	p.Launch(0, []probe.Request{{ID: 0, Gen: 1}})
	pkt := answer(b, ws[0][0].pkts[0], bpf.KindSynAck, 0)
	var r reply
	if err := decodePacket(pkt, &r); err != nil {
		b.Fatal(err)
	}
	// The same reply as the capture program would record it.
	rec := make([]byte, bpf.EventSize)
	copy(rec[8:24], r.remote[:])
	copy(rec[24:40], r.local[:])
	ack := r.seq + 1
	rec[44], rec[45], rec[46], rec[47] = byte(ack), byte(ack>>8), byte(ack>>16), byte(ack>>24)
	rec[48], rec[49] = byte(r.remotePort), byte(r.remotePort>>8)
	rec[50], rec[51] = byte(r.localPort), byte(r.localPort>>8)
	rec[52], rec[53], rec[54] = byte(bpf.KindSynAck), 0x12, 4
	var ev bpf.Event
	b.ReportAllocs()
	for b.Loop() {
		_ = bpf.DecodeEvent(rec, &ev)
		if decodeEvent(&ev, &r) != nil {
			b.Fatal("decode")
		}
		st, _ := p.probes.get(0)
		st.sent.And(^int64(answered)) // let the same reply be delivered again
		p.handle(&r)
	}
	if p.Counters().SynAck == 0 {
		b.Fatal("nothing delivered")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replies/s")
}

// BenchmarkDecodePacket measures the AF_PACKET path's decoder.
func BenchmarkDecodePacket(b *testing.B) {
	p, ws := testProber(b, probetest.Discard{}, 1, target4)
	p.Launch(0, []probe.Request{{ID: 0}})
	pkt := answer(b, ws[0][0].pkts[0], bpf.KindSynAck, 0)
	var r reply
	b.ReportAllocs()
	for b.Loop() {
		if decodePacket(pkt, &r) != nil {
			b.Fatal("decode")
		}
	}
}
