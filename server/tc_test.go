package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

// TestReloadKeepsTCCapture runs the SYN prober with its capture forced onto
// TC (kernels without TCX) and reloads three times: every generation must
// capture with eBPF, never fall back to AF_PACKET because the previous
// generation's filter is still attached, and nothing may stay attached
// after the daemon stops.
func TestReloadKeepsTCCapture(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF")
	ns := testenv.LoopbackNamespace(t)
	yaml := `
checks:
  t: {protocol: tcp, tcp_mode: syn, port: 1, interval: 100ms, timeout: 500ms}
pools:
  - {name: lo, check: t, targets: ["127.0.0.1"]}
`
	d, err := New(Options{
		Load:   func() (*config.Config, error) { return config.Parse([]byte(yaml), "", config.LoadOptions{}) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Shards: 1,
		Syn:    syn.Config{Source4: netip.MustParseAddr("127.0.0.1"), Interface: "lo", Attach: bpf.AttachTC},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Do(ns, d.Start); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.Stop()
		}
	})
	refused := d.metrics.probes.WithLabelValues("lo", "tcp", "refused")
	for i := range 4 {
		if i > 0 {
			if err := netns.Do(ns, d.Reload); err != nil {
				t.Fatalf("reload %d: %v", i, err)
			}
		}
		g := d.cur.Load()
		if g.launch.syn == nil || g.launch.syn.Path() != probe.PathSynBPF || g.launch.syn.Attachment() != bpf.AttachTC {
			t.Fatalf("generation %d: TCP path %s, capture fallback %v; want eBPF through TC", i, g.launch.tcpPath, g.launch.syn.CaptureFallback())
		}
		before := testutil.ToFloat64(refused)
		testenv.Eventually(t, fmt.Sprintf("generation %d: two RSTs captured", i), func() (float64, bool) {
			n := testutil.ToFloat64(refused) - before
			return n, n >= 2
		})
	}
	out, err := exec.Command("tc", "-n", ns, "filter", "show", "dev", "lo", "ingress").CombinedOutput()
	if err != nil || strings.Count(string(out), "sonde_capture") != 1 {
		t.Fatalf("filters while running (%v):\n%s\nwant one sonde filter", err, out)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	out, err = exec.Command("tc", "-n", ns, "qdisc", "show", "dev", "lo").CombinedOutput()
	if err != nil || strings.Contains(string(out), "clsact") {
		t.Fatalf("qdiscs after stop (%v):\n%s\nwant no clsact", err, out)
	}
}
