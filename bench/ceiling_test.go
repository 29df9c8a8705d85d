package bench

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench/ceiling"
	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestCeilingSweep sweeps a slice of an XDP fleet that holds every outcome
// with the ceiling and checks each answer against Truth.
func TestCeilingSweep(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	cfg := benchFleetConfig(1)
	cfg.XDP = fleet.XDPGeneric
	f, err := fleet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	p := netip.MustParsePrefix("198.18.100.0/22") // dropped, rejected and unreachable blocks, scattered ones
	var res *ceiling.Result
	err = netns.Do(f.ProberNS, func() error {
		var err error
		res, err = ceiling.Sweep(context.Background(), ceiling.Config{Interface: f.ProberLink, Source: f.ProberAddr,
			NextHopMAC: f.GatewayMAC, Prefix: p, Port: ScanPort, Senders: 2, Timeout: 500 * time.Millisecond})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Probes != 1024 || res.Invalid != 0 || res.Duplicate != 0 || res.RingDrops != 0 {
		t.Errorf("result %+v", res)
	}
	for i := range res.Probes {
		a := res.Target(i).Addr()
		if got, want := res.Outcome(i), Truth(a); got != want {
			t.Errorf("%s: %s, Truth says %s", a, got, want)
		}
	}
}
