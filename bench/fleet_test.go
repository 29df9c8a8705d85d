package bench

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bench/netns"
	"github.com/sondeprobe/sonde/bench/testenv"
)

func netnsInode(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestFleet checks the fleet's ground truth with plain connect() calls from
// the prober namespace, and that InNamespace puts the thread back.
func TestFleet(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces")
	f, err := NewFleet(FleetConfig{
		Prefix6:     DefaultPrefix6,
		Listen:      []uint16{80},
		Drop:        []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32"), netip.MustParsePrefix("2001:db8:5eed::3/128")},
		Reject:      []netip.Prefix{netip.MustParsePrefix("198.18.0.4/32"), netip.MustParsePrefix("198.18.9.0/24")},
		Unreachable: []netip.Prefix{netip.MustParsePrefix("198.18.0.5/32"), netip.MustParsePrefix("2001:db8:5eed::5/128")},
	})
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
	tests := []struct {
		addr string
		want error // nil: connected
	}{
		{"198.18.0.1:80", nil},
		{"198.18.255.254:80", nil},
		{"[2001:db8:5eed::1]:80", nil},
		{"198.18.0.1:81", unix.ECONNREFUSED}, // no listener: the kernel's RST
		{"198.18.0.4:80", unix.ECONNREFUSED},
		{"198.18.9.77:80", unix.ECONNREFUSED},
		{"198.18.0.5:80", unix.EHOSTUNREACH},
		// The ICMPv6 error is soft for connect() (it times out); the SYN
		// prober's tests check IPv6 unreachable addresses instead.
		{"198.18.0.3:80", context.DeadlineExceeded},
		{"[2001:db8:5eed::3]:80", context.DeadlineExceeded},
		{"203.0.113.1:80", unix.ENETUNREACH}, // no default route on the prober side
	}
	before := netnsInode(t)
	err = netns.Do(f.ProberNS, func() error {
		if netnsInode(t) == before {
			t.Error("InNamespace did not switch namespaces")
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
	if netnsInode(t) != before {
		t.Error("InNamespace left the thread in the fleet namespace")
	}
}

func TestInNamespaceMissing(t *testing.T) {
	if err := netns.Do("sonde-does-not-exist", func() error { return nil }); err == nil {
		t.Error("InNamespace of a missing namespace succeeded")
	}
}
