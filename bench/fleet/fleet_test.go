package fleet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
)

func netnsInode(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// dialCase is a connect() from the prober namespace and its expected
// result: nil (connected), an errno, or context.DeadlineExceeded (timeout).
type dialCase struct {
	addr string
	want error
}

// TestFleet checks the fleet's ground truth with plain connect() calls from
// the prober namespace, and that InNamespace puts the thread back.
func TestFleet(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces")
	f := testFleet(t, Config{
		Prefix6:     DefaultPrefix6,
		Listen:      []uint16{80},
		Drop:        []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32"), netip.MustParsePrefix("2001:db8:5eed::3/128")},
		Reject:      []netip.Prefix{netip.MustParsePrefix("198.18.0.4/32"), netip.MustParsePrefix("198.18.9.0/24")},
		Unreachable: []netip.Prefix{netip.MustParsePrefix("198.18.0.5/32"), netip.MustParsePrefix("2001:db8:5eed::5/128")},
	})
	before := netnsInode(t)
	checkDials(t, f, append(fleetDials,
		dialCase{"[2001:db8:5eed::1]:80", nil},
		// The ICMPv6 error is soft for connect() (it times out); the SYN
		// prober's tests check IPv6 unreachable addresses instead.
		dialCase{"[2001:db8:5eed::3]:80", context.DeadlineExceeded},
	), func() {
		if netnsInode(t) == before {
			t.Error("InNamespace did not switch namespaces")
		}
	})
	if netnsInode(t) != before {
		t.Error("InNamespace left the thread in the fleet namespace")
	}
}

// TestFleetXDP checks the XDP-answered fleets against the same ground truth
// as TestFleet, in both XDP modes: connect() completes on the responder's
// SYN-ACK (the responder drops the ACK).
func TestFleetXDP(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, eBPF")
	for _, mode := range []XDPMode{XDPGeneric, XDPNative} {
		t.Run(mode.String(), func(t *testing.T) {
			f := testFleet(t, Config{
				XDP:         mode,
				Listen:      []uint16{80},
				Drop:        []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32")},
				Reject:      []netip.Prefix{netip.MustParsePrefix("198.18.0.4/32"), netip.MustParsePrefix("198.18.9.0/24")},
				Unreachable: []netip.Prefix{netip.MustParsePrefix("198.18.0.5/32")},
			})
			checkDials(t, f, fleetDials, nil)
			c, ok, err := f.ResponderCounters()
			if err != nil || !ok {
				t.Fatalf("ResponderCounters: %v, %v", ok, err)
			}
			// Retransmitted SYNs of the timeouts make Dropped at least 1.
			if c.SynAck < 2 || c.RST < 3 || c.Unreachable < 1 || c.Dropped < 1 || c.HostDropped < 2 {
				t.Errorf("responder counters %+v", c)
			}
		})
	}
	if _, err := New(Config{XDP: XDPGeneric, Prefix6: DefaultPrefix6}); err == nil {
		t.Error("an XDP fleet with an IPv6 prefix was built")
	}
}

// fleetDials are the IPv4 cases every fleet of TestFleet and TestFleetXDP
// answers alike.
var fleetDials = []dialCase{
	{"198.18.0.1:80", nil},
	{"198.18.255.254:80", nil},
	{"198.18.0.1:81", unix.ECONNREFUSED}, // no listener: the kernel's RST
	{"198.18.0.4:80", unix.ECONNREFUSED},
	{"198.18.9.77:80", unix.ECONNREFUSED},
	{"198.18.0.5:80", unix.EHOSTUNREACH},
	{"198.18.0.3:80", context.DeadlineExceeded},
	{"203.0.113.1:80", unix.ENETUNREACH}, // no default route on the prober side
}

// testFleet builds a fleet that the test removes, checking that its
// namespaces go with it.
func testFleet(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat("/run/netns/" + f.ProberNS); err == nil {
			t.Error("prober namespace left behind")
		}
	})
	if len(f.GatewayMAC) != 6 {
		t.Errorf("GatewayMAC = %v", f.GatewayMAC)
	}
	return f
}

// checkDials dials every case from the prober namespace; inside, when not
// nil, runs there first.
func checkDials(t *testing.T, f *Fleet, tests []dialCase, inside func()) {
	t.Helper()
	err := netns.Do(f.ProberNS, func() error {
		if inside != nil {
			inside()
		}
		for _, tt := range tests {
			c, err := net.DialTimeout("tcp", tt.addr, 300*time.Millisecond)
			if err == nil {
				c.Close()
			}
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if tt.want == nil && err != nil || tt.want == context.DeadlineExceeded && !timedOut ||
				tt.want != nil && tt.want != context.DeadlineExceeded && !errors.Is(err, tt.want) {
				t.Errorf("dial %s: %v, want %v", tt.addr, err, tt.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInNamespaceMissing(t *testing.T) {
	if err := netns.Do("sonde-does-not-exist", func() error { return nil }); err == nil {
		t.Error("InNamespace of a missing namespace succeeded")
	}
}

// TestFleetImpair: a fleet behind the impairment stage keeps its ground
// truth when nothing is impaired, loses every TCP packet at loss 1,
// duplicates at duplicate 1 (connections still work), and delays frames
// through the user-space bridge.
func TestFleetImpair(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, nftables")
	testenv.Tool(t, "nft", "nftables")
	f := testFleet(t, Config{
		Impair:      true,
		Listen:      []uint16{80},
		Drop:        []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32")},
		Reject:      []netip.Prefix{netip.MustParsePrefix("198.18.0.4/32"), netip.MustParsePrefix("198.18.9.0/24")},
		Unreachable: []netip.Prefix{netip.MustParsePrefix("198.18.0.5/32")},
	})
	if f.ImpairNS == "" {
		t.Fatal("no impairment namespace")
	}
	checkDials(t, f, fleetDials, nil)

	if err := f.Impair(Impairment{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	checkDials(t, f, []dialCase{{"198.18.0.1:80", context.DeadlineExceeded}}, nil)
	lost, _, _, err := f.ImpairCounts()
	if err != nil || lost == 0 {
		t.Errorf("lost %d (%v) at loss 1", lost, err)
	}

	if err := f.Impair(Impairment{Duplicate: 1}); err != nil {
		t.Fatal(err)
	}
	checkDials(t, f, []dialCase{{"198.18.0.1:80", nil}}, nil)
	if _, dup, _, err := f.ImpairCounts(); err != nil || dup == 0 {
		t.Errorf("duplicated %d (%v) at duplicate 1", dup, err)
	}

	const delay = 60 * time.Millisecond
	if err := f.Impair(Impairment{Delay: func() time.Duration { return delay }}); err != nil {
		t.Fatal(err)
	}
	err = netns.Do(f.ProberNS, func() error {
		start := time.Now()
		c, err := net.DialTimeout("tcp", "198.18.0.1:80", 5*time.Second)
		if err != nil {
			return err
		}
		c.Close()
		if rtt := time.Since(start); rtt < 2*delay {
			t.Errorf("connect took %v through a stage delaying each frame %v each way", rtt, delay)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, delayed, err := f.ImpairCounts(); err != nil || delayed < 2 {
		t.Errorf("delayed %d frames (%v)", delayed, err)
	}
	if err := f.Impair(Impairment{}); err != nil {
		t.Fatal(err)
	}
	checkDials(t, f, fleetDials, nil)
	if err := f.Impair(Impairment{Loss: 2}); err == nil {
		t.Error("loss 2 accepted")
	}
}
