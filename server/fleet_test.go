package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// TestDaemonDetectsDropping is the end-to-end detection test: the daemon probes a fleet
// in a network namespace with a TCP check on the SYN prober; when some
// addresses start dropping, they turn unhealthy within the failure window
// counted from the onset (W3 = W1 + one interval), no sooner than k timeouts,
// and every other target stays healthy.
func TestDaemonDetectsDropping(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	f, err := fleet.New(fleet.Config{Prefix: netip.MustParsePrefix("198.18.0.0/16"), Listen: []uint16{80}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	yaml := `
checks:
  fleet:
    preset: globalaccelerator
    port: 80
    interval: 1s
    timeout: 400ms
    tcp_mode: syn
pools:
  - name: fleet
    check: fleet
    targets: ["198.18.0.0/25"]
metrics: {per_target: false}
`
	d, err := New(Options{
		Load:   func() (*config.Config, error) { return config.Parse([]byte(yaml), "", config.LoadOptions{}) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Shards: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Do(f.ProberNS, d.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	if p, why := d.TCPPath(); p != probe.PathSynBPF {
		t.Fatalf("TCP path %s (%v), want %s", p, why, probe.PathSynBPF)
	}
	g := d.cur.Load()
	n := len(g.cfg.Targets)
	// waitState waits until every target of ids is in state want (how
	// soon, the test checks from the states' times).
	waitState := func(ids []uint32, want scheduler.State) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("%d targets %v", len(ids), want), func() (string, bool) {
			for _, id := range ids {
				if st := g.engine.Status(id).State; st != want {
					return fmt.Sprintf("target %s %v", g.cfg.Targets[id].AddrPort(), st), false
				}
			}
			return "", true
		})
	}
	all := make([]uint32, n)
	for i := range all {
		all[i] = uint32(i)
	}
	waitState(all, scheduler.Healthy)

	// Two addresses start dropping every packet.
	var drop []uint32
	for id, tg := range g.cfg.Targets {
		if a := tg.Addr().As4(); a[3] == 7 || a[3] == 100 {
			drop = append(drop, uint32(id))
		}
	}
	rule := "add table inet sonde_d; add chain inet sonde_d in { type filter hook input priority -10; }; " +
		"add rule inet sonde_d in ip daddr { 198.18.0.7, 198.18.0.100 } drop"
	if err := netns.Command(f.FleetNS, "nft", rule).Run(); err != nil {
		t.Fatalf("nft: %v", err)
	}
	onset := time.Now()
	sc := g.cfg.Checks[0]
	w3 := sc.FailureWindowFromOnset()
	waitState(drop, scheduler.Unhealthy)
	for _, id := range drop {
		st := g.engine.Status(id)
		took := scheduler.WallTime(g.engine.Clock(), st.Since).Sub(onset)
		// Slack for the shard's wake-up and the reply reader's poll period.
		t.Logf("%s unhealthy after %v (W1 %v, W3 %v)", g.cfg.Targets[id].AddrPort(), took, sc.FailureWindow(), w3)
		if took > w3+50*time.Millisecond || took < time.Duration(sc.FailureThreshold())*sc.Timeout {
			t.Errorf("target %s unhealthy %v after the onset; want within W3 = %v and after %d timeouts",
				g.cfg.Targets[id].AddrPort(), took, w3, sc.FailureThreshold())
		}
		if st.LastOutcome.String() != "timeout" || st.Streak != sc.FailureThreshold() {
			t.Errorf("target %s: last outcome %v after %d, want %d timeouts", g.cfg.Targets[id].AddrPort(), st.LastOutcome, st.Streak, sc.FailureThreshold())
		}
	}
	healthy := 0
	for id := range n {
		if g.engine.Status(uint32(id)).State == scheduler.Healthy {
			healthy++
		}
	}
	if healthy != n-len(drop) {
		t.Errorf("%d healthy targets, want %d", healthy, n-len(drop))
	}
	c := g.launch.syn.Counters()
	if c.RingDrops != 0 || c.InvalidCookie != 0 {
		t.Errorf("SYN counters %+v: want no ring drops and no invalid cookies", c)
	}

	// Discovery finds 128 more addresses, then loses half of them and
	// finds 64 others. The SYN prober stays up (it runs in the fleet's
	// namespace, where a new one could not be made from here), and its
	// table takes the new addresses.
	found := func(third byte, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, third, byte(i)}), 80).String())
		}
		return out
	}
	updates := [][]string{found(1, 0, 128), append(found(1, 64, 128), found(2, 0, 64)...)}
	for _, update := range updates {
		if err := discover(d, "fleet", update...); err != nil {
			t.Fatal(err)
		}
		g2 := d.cur.Load()
		if g2.launch.syn != g.launch.syn {
			t.Fatal("the discovery update replaced the SYN prober")
		}
		if got, want := g2.targets, n+len(update); got != want {
			t.Fatalf("%d targets after the update, want %d", got, want)
		}
		var added []uint32
		for id, tg := range g2.cfg.Targets {
			if tg.Addr().IsValid() && tg.Addr().As4()[2] != 0 {
				added = append(added, uint32(id))
			}
		}
		if len(added) != len(update) {
			t.Fatalf("%d discovered targets run, want %d", len(added), len(update))
		}
		g = g2
		waitState(added, scheduler.Healthy)
	}
	if c := g.launch.syn.Counters(); c.SendErrors != 0 {
		t.Errorf("SYN counters %+v: want no send errors for the added targets", c)
	}
}
