package syn

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// A retransmission is the same SYN again, and the answer to either send
// ends the probe once, timed from the latest send.
func TestResendSameProbe(t *testing.T) {
	t.Parallel()
	sink := &probetest.Sink{}
	p, ws := testProber(t, sink, 1, target4)
	first := sentPackets(t, p, ws, 3)
	p.now = func() int64 { return 1_000_000_000 + 1_000_000 }
	p.Resend(0, []probe.Request{{ID: 0, Gen: 3}})
	again := ws[0][0].pkts
	ws[0][0].pkts = nil
	if len(again) != 1 || !bytes.Equal(again[0], first[0]) {
		t.Fatalf("resent %d packets; want the first SYN byte for byte", len(again))
	}
	var r reply
	if err := decodePacket(answer(t, first[0], bpf.KindSynAck, 0), &r); err != nil {
		t.Fatal(err)
	}
	r.ktime = 1_001_000_000 + 300_000
	p.handle(&r)
	p.handle(&r) // the answer to the other send
	want := []probe.Result{{ID: 0, Gen: 3, Outcome: probe.Success, Latency: 300 * time.Microsecond, Done: r.ktime}}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	c := p.Counters()
	if c.Sent != 2 || c.Retransmits != 1 || c.Duplicate != 1 {
		t.Errorf("sent %d, retransmits %d, duplicates %d; want 2, 1, 1", c.Sent, c.Retransmits, c.Duplicate)
	}
	// Answered now: a late retransmission request sends nothing.
	p.Resend(0, []probe.Request{{ID: 0, Gen: 3}})
	// Superseded: a retransmission of an older generation sends nothing.
	sentPackets(t, p, ws, 4)
	p.Resend(0, []probe.Request{{ID: 0, Gen: 3}})
	if n := len(ws[0][0].pkts); n != 0 {
		t.Errorf("%d packets sent for an answered or superseded probe", n)
	}
}

func TestExpired(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	req := probe.Request{ID: 0, Gen: 1, Sent: 10 * sec, Deadline: 12 * sec}
	for _, tc := range []struct {
		name   string
		sendAt int64 // when the first SYN leaves
		resend error // the retransmission's send error, if any
		lost   [2]int64
		want   probe.LocalCause
	}{
		{name: "on time, silent", sendAt: 10 * sec, want: probe.CauseNone},
		{name: "left just before half its time", sendAt: 11*sec - 8, want: probe.CauseNone},
		{name: "left after half its time", sendAt: 11*sec + 8, want: probe.CauseLate},
		{name: "retransmission refused for buffers", sendAt: 10 * sec, resend: unix.ENOBUFS, want: probe.CauseBuffers},
		{name: "retransmission refused by a firewall", sendAt: 10 * sec, resend: unix.EPERM, want: probe.CauseNone},
		{name: "replies lost inside its time", sendAt: 10 * sec, lost: [2]int64{11 * sec, 11*sec + 5}, want: probe.CauseCapture},
		{name: "replies lost at its deadline", sendAt: 10 * sec, lost: [2]int64{12 * sec, 13 * sec}, want: probe.CauseCapture},
		{name: "replies lost before its send", sendAt: 10 * sec, lost: [2]int64{9 * sec, 10*sec - 1}, want: probe.CauseNone},
		{name: "replies lost after its deadline", sendAt: 10 * sec, lost: [2]int64{12*sec + 1, 13 * sec}, want: probe.CauseNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &probetest.Sink{}
			p, ws := testProber(t, sink, 1, target4)
			p.now = func() int64 { return tc.sendAt }
			p.Launch(0, []probe.Request{req})
			if tc.resend != nil {
				ws[0][0].fail, ws[0][0].failN = tc.resend, maxRetries+1
				p.now = func() int64 { return 11 * sec }
				p.Resend(0, []probe.Request{req})
				if got := sink.Take(); len(got) != 0 {
					t.Fatalf("a failed retransmission delivered %+v", got)
				}
			}
			if tc.lost != [2]int64{} {
				p.lost(tc.lost[0], tc.lost[1])
			}
			if got := p.Expired(req); got != tc.want {
				t.Errorf("Expired = %s, want %s", got, tc.want)
			}
		})
	}
}

// An answered probe, or one of another generation, is never this host's
// fault.
func TestExpiredAnsweredOrOther(t *testing.T) {
	t.Parallel()
	sink := &probetest.Sink{}
	p, ws := testProber(t, sink, 1, target4)
	req := probe.Request{ID: 0, Gen: 1, Sent: 1_000_000, Deadline: 2_000_000}
	p.Launch(0, []probe.Request{req})
	p.lost(0, 3_000_000)
	if got := p.Expired(probe.Request{ID: 0, Gen: 2, Sent: 1_000_000, Deadline: 2_000_000}); got != probe.CauseNone {
		t.Errorf("another generation: %s", got)
	}
	var r reply
	if err := decodePacket(answer(t, ws[0][0].pkts[0], bpf.KindRST, 0), &r); err != nil {
		t.Fatal(err)
	}
	r.ktime = 1_500_000
	p.handle(&r)
	if got := p.Expired(req); got != probe.CauseNone {
		t.Errorf("answered: %s", got)
	}
}

func TestLossEpisodes(t *testing.T) {
	t.Parallel()
	p, _ := testProber(t, probetest.Discard{}, 1, target4)
	const ms = int64(time.Millisecond)
	p.lost(100*ms, 101*ms)
	p.lost(105*ms, 106*ms) // within the gap: one episode
	p.lost(200*ms, 201*ms)
	if got := *p.settle.episodes.Load(); !cmp.Equal(got, []episode{{100 * ms, 106 * ms}, {200 * ms, 201 * ms}}, cmp.AllowUnexported(episode{})) {
		t.Errorf("episodes %v", got)
	}
	for _, c := range []struct {
		from, to int64
		want     bool
	}{
		{0, 99 * ms, false}, {0, 100 * ms, true}, {103 * ms, 104 * ms, true}, {107 * ms, 199 * ms, false}, {201 * ms, 300 * ms, true},
	} {
		if got := p.lostBetween(c.from, c.to); got != c.want {
			t.Errorf("lostBetween(%d, %d) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	for i := range 3 * maxEpisodes {
		p.lost(int64(i)*time.Second.Nanoseconds()+time.Hour.Nanoseconds(), int64(i)*time.Second.Nanoseconds()+time.Hour.Nanoseconds())
	}
	if n := len(*p.settle.episodes.Load()); n != maxEpisodes {
		t.Errorf("%d episodes kept, want %d", n, maxEpisodes)
	}
	if p.lostBetween(100*ms, 106*ms) {
		t.Error("the oldest episode is still remembered past the bound")
	}
}

// Retransmissions allocate nothing either.
func TestResendZeroAlloc(t *testing.T) {
	p, ws := testProber(t, probetest.Discard{}, 1, target4, target6)
	ws[0][0].keep, ws[0][1].keep = false, false
	reqs := []probe.Request{{ID: 0, Gen: 1}, {ID: 1, Gen: 1}}
	p.Launch(0, reqs)
	if n := testing.AllocsPerRun(100, func() { p.Resend(0, reqs) }); n != 0 {
		t.Errorf("Resend allocates %v times per call", n)
	}
}
