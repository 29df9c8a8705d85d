package connload

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestParseResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     Result
		wantErr  bool
	}{
		{name: "ok", in: `{"connections":10,"connected":7,"refused":2,"timed_out":1,"other":0,"seconds":0.5,"user_cpu":0.01,"system_cpu":0.02}` + "\n",
			want: Result{Connections: 10, Connected: 7, Refused: 2, TimedOut: 1, Seconds: 0.5, UserCPU: 0.01, SystemCPU: 0.02}},
		{name: "outcomes do not add up", in: `{"connections":10,"connected":7}`, wantErr: true},
		{name: "negative time", in: `{"connections":0,"seconds":-1}`, wantErr: true},
		{name: "not JSON", in: `connect-load: socket: too many open files`, wantErr: true},
		{name: "empty", in: ``, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResult([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
				if r := got.Rate(); r != 20 {
					t.Errorf("rate %v, want 20", r)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	target := []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:80")}
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    Config // after defaults, when valid
		wantErr string
	}{
		{name: "defaults from rate and duration", cfg: Config{Targets: target, Rate: 100, Duration: 2 * time.Second},
			want: Config{Targets: target, Rate: 100, Duration: 2 * time.Second, Count: 200, Workers: 2, Timeout: time.Second}},
		{name: "no rate: bounded by the count limit", cfg: Config{Targets: target, Duration: time.Second},
			want: Config{Targets: target, Duration: time.Second, Count: MaxCount, Workers: 2, Timeout: time.Second}},
		{name: "no targets", cfg: Config{Duration: time.Second}, wantErr: "no targets"},
		{name: "IPv6", cfg: Config{Targets: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:80")}, Duration: time.Second}, wantErr: "want an IPv4 address"},
		{name: "port 0", cfg: Config{Targets: []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:0")}, Duration: time.Second}, wantErr: "want an IPv4 address and a port"},
		{name: "unbounded in time", cfg: Config{Targets: target}, wantErr: "duration 0s out of range"},
		{name: "too long", cfg: Config{Targets: target, Duration: time.Hour}, wantErr: "duration 1h0m0s out of range"},
		{name: "rate", cfg: Config{Targets: target, Duration: time.Second, Rate: -1}, wantErr: "rate -1 out of range"},
		{name: "count", cfg: Config{Targets: target, Duration: time.Second, Count: MaxCount + 1}, wantErr: "count 50000001 out of range"},
		{name: "workers", cfg: Config{Targets: target, Duration: time.Second, Workers: 65}, wantErr: "workers 65 out of range"},
		{name: "timeout", cfg: Config{Targets: target, Duration: time.Second, Timeout: time.Hour}, wantErr: "timeout 1h0m0s out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestDueAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		i    int
		rate float64
		want time.Duration
	}{
		{0, 1000, 0},
		{1, 1000, time.Millisecond},
		{10_000, 10_000, time.Second},
		{3, 2, 1500 * time.Millisecond},
	} {
		if got := dueAt(tc.i, tc.rate); got != tc.want {
			t.Errorf("dueAt(%d, %v) = %v, want %v", tc.i, tc.rate, got, tc.want)
		}
	}
}

// TestRun connects to a loopback listener and to a closed port: one
// is connected, the other refused, and the load stops at its count.
func TestRun(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.AcceptAndClose(l)
	closed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	t.Cleanup(func() { l.Close() })
	res, err := Run(context.Background(), Config{
		Targets:  []netip.AddrPort{netip.MustParseAddrPort(l.Addr().String()), refusing},
		Count:    40,
		Workers:  1,
		Duration: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connections != 40 || res.Connected != 20 || res.Refused != 20 {
		t.Errorf("result %+v, want 40 connections: 20 connected, 20 refused", res)
	}
}
