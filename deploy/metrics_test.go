package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// metricsDoc is the metrics reference, whose tables this test keeps equal
// to what sonde exports and against which the rules and the dashboard are
// checked.
const metricsDoc = "../docs/metrics.md"

// metricDoc is one row of the metrics tables of docs/metrics.md.
type metricDoc struct {
	name, typ string
	labels    []string
	planned   bool // named by the kit ahead of the sonde that exports it
	passive   bool // exported only where the passive observer runs
}

var metricRow = regexp.MustCompile("^\\| `([a-z_:]+)` \\| (counter|gauge|histogram) \\|([^|]*)\\| (.*) \\|$")

// metricTable reads the metrics tables of docs/metrics.md.
func metricTable(t *testing.T) map[string]metricDoc {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]metricDoc{}
	for line := range strings.Lines(string(b)) {
		m := metricRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		d := metricDoc{name: m[1], typ: m[2], planned: strings.Contains(m[4], "(planned"), passive: strings.HasPrefix(m[4], "(passive evidence only")}
		for l := range strings.SplitSeq(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				d.labels = append(d.labels, l)
			}
		}
		slices.Sort(d.labels)
		if _, dup := docs[d.name]; dup {
			t.Errorf("%s lists %s twice", metricsDoc, d.name)
		}
		docs[d.name] = d
	}
	if len(docs) < 20 {
		t.Fatalf("%s: found %d metric rows, want the whole table", metricsDoc, len(docs))
	}
	return docs
}

// exportedNames is what a query may select of sonde's own series: every
// documented metric (with the _bucket, _sum and _count series of
// histograms) and Prometheus's `up`.
func exportedNames(t *testing.T) map[string]bool {
	names := map[string]bool{"up": true}
	for _, d := range metricTable(t) {
		names[d.name] = true
		if d.typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[d.name+s] = true
			}
		}
	}
	return names
}

// TestMetricTableMatchesDaemon runs sonde on loopback targets and compares
// what /metrics exports with the tables of docs/metrics.md, both ways: every
// documented metric with its type and labels, and every sonde_ metric
// documented. The rules and the dashboard are checked against that table.
func TestMetricTableMatchesDaemon(t *testing.T) {
	docs := metricTable(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(web.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	testenv.AcceptAndClose(l)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(secure.Close)
	// A pool fed by file_sd exports the discovery series; it finds the
	// plain server. (No metric_labels: they would add labels to every
	// per-target series, which the table lists without them.)
	sd := filepath.Join(t.TempDir(), "found.json")
	group := fmt.Sprintf(`[{"targets": [%q]}]`, strings.TrimPrefix(web.URL, "http://"))
	if err := os.WriteFile(sd, []byte(group), 0o644); err != nil {
		t.Fatal(err)
	}
	// An HTTPS check exports certificate expiries; a webhook its delivery
	// counters (it posts to the plain server, which accepts anything); a
	// remediation its counters, at zero (it is due only after a day).
	cfg := fmt.Sprintf(`checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 1s, rise: 1, fall: 2}
  tcp: {protocol: tcp, tcp_mode: connect, interval: 100ms, timeout: 1s, rise: 1, fall: 2, passive: {}}
  tls: {protocol: https, path: /, interval: 100ms, timeout: 1s, rise: 1, fall: 2, tls: {insecure_skip_verify: true}}
pools:
  - {name: web, check: web, targets: [%q]}
  - {name: tcp, check: tcp, targets: [%q]}
  - {name: tls, check: tls, targets: [%q]}
  - {name: found, check: web, file_sd_configs: [{files: [%q]}]}
webhooks:
  - {url: %q}
remediation:
  - {name: replace, pools: [tcp], after: 24h, command: ["true"]}
`, strings.TrimPrefix(web.URL, "http://"), l.Addr().String(), strings.TrimPrefix(secure.URL, "https://"), sd, web.URL+"/")
	d := startDaemon(t, cfg)

	// Per-target series appear once the targets are decided; a reload (the
	// signal of the systemd unit's ExecReload) must count.
	d.scrapeUntil(t, "sonde_target_healthy", func(f map[string]*dto.MetricFamily) bool { return f["sonde_target_healthy"] != nil })
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The certificate expiry comes with the first HTTPS probe's answer,
	// which a loaded machine may give after the rest.
	fams := d.scrapeUntil(t, "two reloads, the found pool healthy and a certificate expiry", func(f map[string]*dto.MetricFamily) bool {
		return value(f["sonde_config_reloads_total"], "result", "success") >= 2 && f["sonde_target_healthy"] != nil &&
			value(f["sonde_discovery_source_healthy"], "pool", "found") == 1 && value(f["sonde_target_healthy"], "pool", "found") >= 0 &&
			f["sonde_tls_earliest_cert_expiry_seconds"] != nil
	})

	passive := false
	if f := fams["sonde_passive_available"]; f != nil && len(f.GetMetric()) == 1 {
		passive = f.GetMetric()[0].GetGauge().GetValue() == 1
	}
	for name, doc := range docs {
		f := fams[name]
		switch {
		case f == nil && doc.planned:
			continue
		case f == nil && doc.passive && !passive:
			continue
		case f == nil:
			t.Errorf("%s: in %s, not exported by sonde", name, metricsDoc)
			continue
		case doc.planned:
			t.Errorf("%s: exported now, drop \"(planned\" from its row in %s", name, metricsDoc)
		}
		if got := strings.ToLower(f.GetType().String()); got != doc.typ {
			t.Errorf("%s: %s says %s, sonde exports a %s", name, metricsDoc, doc.typ, got)
		}
		if got := labelNames(f); !slices.Equal(got, doc.labels) {
			t.Errorf("%s: %s gives labels %v, sonde exports %v", name, metricsDoc, doc.labels, got)
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "sonde_") && docs[name].name == "" {
			t.Errorf("%s: exported by sonde, missing from the metrics tables of %s", name, metricsDoc)
		}
	}
}

// labelNames returns the label names of a family's series, sorted.
func labelNames(f *dto.MetricFamily) []string {
	var names []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			names = append(names, l.GetName())
		}
	}
	return setOf(names...)
}

// value returns the value of the series of f whose label is val, or -1.
func value(f *dto.MetricFamily, label, val string) float64 {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == val {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				}
			}
		}
	}
	return -1
}

// daemon is a sonde run process started by a test.
type daemon struct {
	cmd  *exec.Cmd
	addr string
}

// startDaemon runs `sonde run` on cfg, listening on a free loopback port,
// and stops it when the test ends.
func startDaemon(t *testing.T, cfg string) *daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sonde.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// With a state file, as the systemd unit runs it:
	// its metrics are exported only then.
	cmd := exec.Command(testenv.Sonde(t), "run", "-config", path, "-listen", "127.0.0.1:0",
		"-log-format", "json", "-syn=false", "-state-file", filepath.Join(t.TempDir(), "state"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	listen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				listen <- rec.Listen
			}
			t.Logf("sonde: %s", sc.Text())
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	select {
	case addr := <-listen:
		return &daemon{cmd: cmd, addr: addr}
	case err := <-done:
		t.Fatalf("sonde run exited before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("sonde run did not log where it serves within 60 s")
	}
	return nil
}

// families is a scrape of /metrics; printed, it lists its names.
type families map[string]*dto.MetricFamily

func (f families) String() string {
	return fmt.Sprint(slices.Sorted(maps.Keys(f)))
}

// scrapeUntil scrapes /metrics until ok holds; what says what ok awaits.
func (d *daemon) scrapeUntil(t *testing.T, what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	return testenv.Eventually(t, what+" in /metrics", func() (families, bool) {
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		return fams, ok(fams)
	})
}
