package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/bench/host"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
)

func TestBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		first, n int
		want     []string
	}{
		{0, 1, []string{"198.18.0.0/32"}},
		{0, 256, []string{"198.18.0.0/24"}},
		{0, 125000, []string{"198.18.0.0/16", "198.19.0.0/17", "198.19.128.0/18", "198.19.192.0/19", "198.19.224.0/21", "198.19.232.0/26", "198.19.232.64/29"}},
		{65536 + 4096, 256, []string{"198.19.16.0/24"}},
		{3, 6, []string{"198.18.0.3/32", "198.18.0.4/30", "198.18.0.8/32"}},
		{0, 1 << 17, []string{"198.18.0.0/15"}},
	}
	for _, tt := range tests {
		var got []string
		total := 0
		for _, p := range blocks(tt.first, tt.n) {
			got = append(got, p.String())
			total += 1 << (32 - p.Bits())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("blocks(%d, %d) (-want +got):\n%s", tt.first, tt.n, diff)
		}
		if total != tt.n {
			t.Errorf("blocks(%d, %d) cover %d addresses", tt.first, tt.n, total)
		}
	}
}

// TestTruthMatchesFleet checks that the ground truth of the bench fleet and
// the one its configuration gives a fleet (the firewall's and the XDP
// responder's) agree address by address.
func TestTruthMatchesFleet(t *testing.T) {
	t.Parallel()
	cfg := benchFleetConfig(1)
	counts := map[probe.Outcome]int{}
	for i := range fleetSize() {
		a := addrAt(i)
		if offset(a) != i {
			t.Fatalf("offset(addrAt(%d)) = %d", i, offset(a))
		}
		want := cfg.Outcome(a, ScanPort)
		if got := Truth(a); got != want {
			t.Fatalf("Truth(%s) = %s, the fleet's firewall gives %s", a, got, want)
		}
		counts[want]++
		if i >= fleetSize()/2 && want != probe.Success {
			t.Fatalf("%s in the clean half is %s", a, want)
		}
	}
	if counts[probe.Timeout] == 0 || counts[probe.Refused] == 0 || counts[probe.Unreachable] == 0 {
		t.Errorf("the fleet lacks an outcome: %v", counts)
	}
	if got := Truth(netip.MustParseAddr("203.0.113.1")); got != probe.Timeout {
		t.Errorf("Truth outside the fleet = %s, want timeout", got)
	}
}

func TestReportOutput(t *testing.T) {
	t.Parallel()
	s := &Scenario{Name: "sweep", Measure: "a sweep"}
	s.addRuns("sent", []float64{300000, 100000, 200000}, "probes/s")
	s.add("recall", 99.9987, "%")
	s.add("not measured", math.NaN(), "ms")
	s.addText("tcp_path", "syn-bpf (tcx)")
	s.goal("fast", true, "%d×", 3)
	s.goal("exact", false, "no")
	s.finish()
	if s.Status != StatusMissed {
		t.Errorf("status %s, want missed", s.Status)
	}
	if m, _ := s.Metric("sent"); m.Value != 200000 {
		t.Errorf("median %v, want 200000", m.Value)
	}
	r := &Report{Machine: host.Machine{CPU: "test CPU", Cores: 2}, Scenarios: []*Scenario{s}}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"test CPU", "sweep", "200000", "300000 100000 200000", "99.998", "n/a", "syn-bpf (tcx)", "MISSED exact", "MET    fast"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not read back: %v\n%s", err, b.String())
	}
	if m, _ := back.Scenarios[0].Metric("not measured"); m.Text != "not measured" {
		t.Errorf("NaN metric in JSON: %+v", m)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opt     Options
		wantErr bool
	}{
		{"defaults", Options{Binary: "sonde"}, false},
		{"no binary", Options{}, true},
		{"unknown scenario", Options{Binary: "sonde", Scenarios: []string{"nope"}}, true},
		{"too many targets", Options{Binary: "sonde", Steady: SteadyOptions{Targets: maxSteadyTargets + 1}}, true},
		{"interval too short", Options{Binary: "sonde", Steady: SteadyOptions{Interval: time.Millisecond}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opt.defaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
	o := Options{Binary: "sonde"}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Steady.Targets != 1_000_000 || o.Steady.Interval != 10*time.Second || o.Steady.Duration != time.Minute || o.Runs != 3 {
		t.Errorf("defaults: %+v", o)
	}
	var unknown Options
	unknown.Binary = "sonde"
	unknown.Scenarios = []string{"sweep", "bogus"}
	if err := unknown.defaults(); !errors.Is(err, ErrUnknownScenario) {
		t.Errorf("err = %v, want ErrUnknownScenario", err)
	}
}

func TestSteadyConfig(t *testing.T) {
	t.Parallel()
	cfg, dropped := steadyConfig(300_000, 10*time.Second)
	if got := strings.Count(cfg, "tcp_mode: syn"); got != 3 {
		t.Errorf("%d checks for 300,000 targets, want 3 ports", got)
	}
	if !strings.Contains(cfg, "per_target: false") {
		t.Error("per-target series are not turned off")
	}
	if dropped == 0 {
		t.Error("no dropped target counted")
	}
}

// TestRunCancelled interrupts a run during its first scenario: the report
// comes back with the fleet's names, the error says the run was interrupted,
// and the fleet is gone.
func TestRunCancelled(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep, err := Run(ctx, Options{
		Binary:    "/bin/true", // never gets to run: the scenario is cancelled first
		Scenarios: []string{"detect"},
		Quick:     true,
		Progress: func(msg string, _ ...any) {
			if msg == "scenario" {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Fleets) != 1 || rep.Fleets[0].ProberNS == "" || rep.Fleets[0].AnsweredBy != "kernel" {
		t.Fatalf("report without the kernel's fleet (the only one detect needs): %+v", rep)
	}
	for _, ns := range []string{rep.Fleets[0].ProberNS, rep.Fleets[0].FleetNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

// TestFleetHTTPAndSetDrop checks the fleet's HTTP and HTTPS servers and
// SetDrop from the prober namespace: an address answers, goes silent once
// dropped, and answers again when the drop is lifted.
func TestFleetHTTPAndSetDrop(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	f, err := fleet.New(fleet.Config{Listen: []uint16{80}, HTTP: []uint16{8080}, HTTPS: []uint16{8443}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	client := nsClient(f.ProberNS, 1)
	resp, err := client.Get("http://198.18.3.4:8080/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("GET: %s %q, want 200 \"ok\\n\"", resp.Status, body)
	}
	tr := client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the fleet's self-signed certificate
	resp, err = (&http.Client{Transport: tr}).Get("https://198.18.3.4:8443/health")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" || resp.TLS == nil {
		t.Errorf("HTTPS GET: %s %q (tls %v), want 200 \"ok\\n\" over TLS", resp.Status, body, resp.TLS != nil)
	}
	dial := func(addr string) error {
		return netns.Do(f.ProberNS, func() error {
			c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := dial("198.18.9.1:80"); err != nil {
		t.Fatalf("before the drop: %v", err)
	}
	if err := f.SetDrop([]netip.Prefix{netip.MustParsePrefix("198.18.9.0/24")}); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if err := dial("198.18.9.1:80"); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("dropped address: %v, want a timeout", err)
	}
	if err := dial("198.18.10.1:80"); err != nil {
		t.Errorf("address outside the dropped prefix: %v", err)
	}
	if err := f.SetDrop(nil); err != nil {
		t.Fatal(err)
	}
	if err := dial("198.18.9.1:80"); err != nil {
		t.Errorf("after the drop is lifted: %v", err)
	}
}

func TestFleetsOf(t *testing.T) {
	t.Parallel()
	both, k := []fleet.XDPMode{fleet.XDPGeneric, fleet.XDPOff}, []fleet.XDPMode{fleet.XDPOff}
	tests := []struct {
		choice string
		want   map[string][]fleet.XDPMode
	}{
		{"", map[string][]fleet.XDPMode{"sweep": both, "compare": both, "steady": {fleet.XDPGeneric}, "detect": k, "http": k}},
		{"xdp", map[string][]fleet.XDPMode{"sweep": {fleet.XDPGeneric}, "compare": {fleet.XDPGeneric}, "steady": {fleet.XDPGeneric}, "detect": k, "http": k}},
		{"kernel", map[string][]fleet.XDPMode{"sweep": k, "compare": k, "steady": k, "detect": k, "http": k}},
		{"both", map[string][]fleet.XDPMode{"sweep": both, "compare": both, "steady": both, "detect": k, "http": k}},
	}
	for _, tt := range tests {
		t.Run(tt.choice, func(t *testing.T) {
			o := Options{Binary: "sonde"}
			if tt.choice != "" {
				c, err := ParseFleetChoice(tt.choice)
				if err != nil {
					t.Fatal(err)
				}
				if c.String() != tt.choice {
					t.Errorf("String() = %q", c.String())
				}
				o.Fleet = c
			}
			if err := o.defaults(); err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				if diff := cmp.Diff(want, o.fleetsOf(name)); diff != "" {
					t.Errorf("fleetsOf(%s) (-want +got):\n%s", name, diff)
				}
			}
		})
	}
	if _, err := ParseFleetChoice("bogus"); err == nil {
		t.Error("ParseFleetChoice(bogus) succeeded")
	}
}
