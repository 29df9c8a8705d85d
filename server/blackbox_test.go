package server

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/server/web/api"
)

// scrape GETs path from the daemon with optional headers and returns the
// status and body.
func (td *testDaemon) scrape(t *testing.T, path string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, td.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// samples parses a text exposition into "name{labels}" → value.
func samples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, text)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String()
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestProbeEndpoint checks /probe against blackbox_exporter's contract:
// its metric names for good and bad targets of HTTP and TCP checks, a URL
// target's path, and refusals of a bad module or target.
func TestProbeEndpoint(t *testing.T) {
	t.Parallel()
	good, bad := newBackend(t), newBackend(t)
	bad.failing.Store(true)
	body := newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  http_2xx: {protocol: http, path: /, interval: 1h, timeout: 2s, probe_targets: any}
  body: {protocol: http, path: /, body_contains: Absent, interval: 1h, timeout: 2s, probe_targets: any}
  short: {protocol: http, path: /, max_body_bytes: 4, interval: 1h, timeout: 2s, probe_targets: any}
  tcp_connect: {protocol: tcp, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: api, check: http_2xx, targets: [%q]}
`, good.addr()))
	closed := closedPort(t)
	chunks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, part := range []string{"chunk", "ed ok"} {
			io.WriteString(w, part)
			w.(http.Flusher).Flush() // no Content-Length: chunked
		}
	}))
	t.Cleanup(chunks.Close)
	chunked := chunks.Listener.Addr().String()
	tests := []struct {
		name, target, module string
		want                 map[string]float64
	}{
		{"good http", good.addr(), "http_2xx", map[string]float64{
			"probe_success": 1, "probe_http_status_code": 200, "probe_ip_protocol": 4, "probe_http_redirects": 0,
			"probe_http_ssl": 0, "probe_http_version": 1.1, "probe_failed_due_to_regex": 0,
			"probe_http_content_length": 7, "probe_http_uncompressed_body_length": 7}}, // "Healthy"
		{"bad http", bad.addr(), "http_2xx", map[string]float64{"probe_success": 0, "probe_http_status_code": 500}},
		{"chunked body", chunked, "http_2xx", map[string]float64{
			"probe_success": 1, "probe_http_content_length": -1, "probe_http_uncompressed_body_length": 10}},
		{"body beyond max_body_bytes", chunked, "short", map[string]float64{
			"probe_success": 1, "probe_http_content_length": -1, "probe_http_uncompressed_body_length": 4}},
		{"url target with a path", good.srv.URL + "/x?y=1", "http_2xx", map[string]float64{"probe_success": 1}},
		{"body mismatch", body.addr(), "body", map[string]float64{"probe_success": 0, "probe_failed_due_to_regex": 1, "probe_http_status_code": 200}},
		{"refused http", closed, "http_2xx", map[string]float64{"probe_success": 0, "probe_http_status_code": 0,
			"probe_http_content_length": 0, "probe_http_uncompressed_body_length": 0}},
		{"good tcp", good.addr(), "tcp_connect", map[string]float64{"probe_success": 1, "probe_ip_protocol": 4}},
		{"refused tcp", closed, "tcp_connect", map[string]float64{"probe_success": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, text := td.scrape(t, "/probe?"+url.Values{"target": {tt.target}, "module": {tt.module}}.Encode(), nil)
			if code != http.StatusOK {
				t.Fatalf("%d: %s", code, text)
			}
			got := samples(t, text)
			for k, v := range tt.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v\n%s", k, g, ok, v, text)
				}
			}
			for _, k := range []string{"probe_duration_seconds", "probe_dns_lookup_time_seconds"} {
				if _, ok := got[k]; !ok {
					t.Errorf("%s missing", k)
				}
			}
			for k := range got {
				if strings.HasPrefix(k, "probe_tls_") {
					t.Errorf("%s without TLS", k)
				}
			}
			if tt.module != "tcp_connect" {
				for _, ph := range blackboxPhases {
					if _, ok := got["probe_http_duration_seconds{phase="+ph+"}"]; !ok {
						t.Errorf("probe_http_duration_seconds{phase=%s} missing", ph)
					}
				}
			}
		})
	}
	if n := len(good.oks); n == 0 {
		t.Fatal("the good backend saw no request")
	}

	refusals := []struct{ query, want string }{
		{"target=" + good.addr(), "module: missing; want the name of a check: body, http_2xx, short, tcp_connect"},
		{"target=" + good.addr() + "&module=http", `module="http": no such check; want one of body, http_2xx, short, tcp_connect`},
		{"module=http_2xx", "target: empty; want host[:port], address[:port] or an http(s) URL"},
		{"module=http_2xx&target=" + url.QueryEscape("file:///etc/passwd"), `target: "file:///etc/passwd" has scheme "file"; want http or https`},
		{"module=http_2xx&target=10.0.0.0/8", `target: "10.0.0.0/8" is a CIDR block; probe one address at a time`},
		{"module=http_2xx&target=" + url.QueryEscape("a b"), `target: "a b" is not an IP address, CIDR block or host name`},
		{"module=tcp_connect&target=" + url.QueryEscape("http://127.0.0.1:1/"), `target="http://127.0.0.1:1/" is a URL but check tcp_connect probes tcp; give host:port`},
		{"module=tcp_connect&target=127.0.0.1", `target="127.0.0.1" has no port and check tcp_connect has none`},
	}
	for _, r := range refusals {
		code, text := td.scrape(t, "/probe?"+r.query, nil)
		if code != http.StatusBadRequest || strings.TrimSpace(text) != r.want {
			t.Errorf("/probe?%s: %d %q, want 400 %q", r.query, code, strings.TrimSpace(text), r.want)
		}
	}
}

// TestProbeSynCheckConnects checks that /probe probes a check in tcp_mode
// syn with connect(): a one-shot probe has no SYN prober to run on, and
// must neither fail for the lack of one nor need CAP_NET_RAW. It drives the
// generation's one-shot path, as a daemon whose configuration has such a
// check would (a daemon cannot start one without the SYN prober).
func TestProbeSynCheckConnects(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`checks:
  tcp_connect: {protocol: tcp, tcp_mode: syn, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: api, check: tcp_connect, targets: ["127.0.0.1:1"]}
`), "", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{cfg: cfg}
	good := newBackend(t)
	for _, tt := range []struct {
		name, target string
		want         probe.Outcome
	}{
		{"listener", good.addr(), probe.Success},
		{"closed port", closedPort(t), probe.Refused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			shot, err := g.newOneShot("tcp_connect", tt.target)
			if err != nil {
				t.Fatal(err)
			}
			shot.log = slog.New(slog.DiscardHandler)
			res, err := g.runOneShot(t.Context(), &shot, 2*time.Second, &endpoint.DNSResolver{Hosts: "-", Servers: []string{"127.0.0.1:1"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.rep.Outcome != tt.want {
				t.Errorf("outcome %v (%v), want %v", res.rep.Outcome, res.rep.Err, tt.want)
			}
		})
	}
}

// TestProbeScrapeTimeout checks that a probe of a silent target ends at the
// scrape's limit less blackbox's half-second offset, not at the check's
// much longer timeout. (A probe without a free slot is refused at once:
// TestProbeSlotsRefuseAtOnce.)
func TestProbeScrapeTimeout(t *testing.T) {
	t.Parallel()
	silent := silentServer(t)
	good := newBackend(t)
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  slow: {protocol: http, path: /, interval: 1h, timeout: 60s, probe_targets: any}
pools:
  - {name: api, check: slow, targets: [%q]}
`, good.addr()), func(o *Options) { o.ProbeConcurrency = 1 })
	q := "/probe?module=slow&target=" + silent
	header := http.Header{"X-Prometheus-Scrape-Timeout-Seconds": {"1.5"}}

	start := time.Now()
	code, text := td.scrape(t, q, header)
	took := time.Since(start)
	if code != http.StatusOK || samples(t, text)["probe_success"] != 0 {
		t.Fatalf("silent target: %d\n%s", code, text)
	}
	// 1 s of probing; the check's 60 s would be far beyond.
	if took < 900*time.Millisecond || took > 30*time.Second {
		t.Fatalf("silent target answered after %v, want about 1s (scrape timeout 1.5s less 0.5s)", took)
	}
	if code, text := td.scrape(t, q, http.Header{"X-Prometheus-Scrape-Timeout-Seconds": {"soon"}}); code != http.StatusBadRequest {
		t.Fatalf("bad scrape timeout header: %d %s", code, text)
	}
}

// tlsBackend is an HTTPS server with a certificate the test trusts through
// a CA file, and that certificate's expiry.
func tlsBackend(t *testing.T) (addr, caFile string, notAfter time.Time) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	cert := srv.Certificate()
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x509.ParseCertificate(cert.Raw); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(srv.URL, "https://"), caFile, cert.NotAfter
}

// TestCertificateExpiry checks the earliest certificate expiry of an HTTPS
// target in /metrics (sonde_tls_earliest_cert_expiry_seconds), the API
// (cert_expiry) and /probe (probe_ssl_earliest_cert_expiry).
func TestCertificateExpiry(t *testing.T) {
	t.Parallel()
	addr, ca, notAfter := tlsBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  secure: {protocol: https, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 1, tls: {ca_file: %q}}
pools:
  - {name: web, check: secure, targets: [%q]}
`, ca, addr))
	td.waitEvent(t, addr, "healthy", 0)
	want := float64(notAfter.Unix())
	if v := metricValue(t, td.d.metrics.reg, "sonde_tls_earliest_cert_expiry_seconds", map[string]string{"pool": "web", "target": addr}); v != want {
		t.Errorf("sonde_tls_earliest_cert_expiry_seconds = %v, want %v", v, want)
	}
	var tl struct {
		Targets []api.TargetJSON `json:"targets"`
	}
	td.getJSON(t, "/api/v1/targets?pool=web", &tl)
	if len(tl.Targets) != 1 || tl.Targets[0].CertExpiry == nil || !tl.Targets[0].CertExpiry.Equal(notAfter.Truncate(time.Second)) {
		t.Errorf("API targets %+v: want cert_expiry %v", tl.Targets, notAfter)
	}
	code, text := td.scrape(t, "/probe?module=secure&target="+addr, nil)
	got := samples(t, text)
	if code != http.StatusOK || got["probe_success"] != 1 || got["probe_ssl_earliest_cert_expiry"] != want || got["probe_http_ssl"] != 1 ||
		got["probe_tls_version_info{version=TLS 1.3}"] != 1 {
		t.Errorf("/probe of %s: %d\n%s", addr, code, text)
	}
	ciphers := 0
	for k, v := range got {
		if strings.HasPrefix(k, "probe_tls_cipher_info{cipher=TLS_") && v == 1 {
			ciphers++
		}
	}
	if ciphers != 1 {
		t.Errorf("/probe of %s: want one probe_tls_cipher_info naming a TLS 1.3 suite\n%s", addr, text)
	}
}

// TestProbeDebug checks the debug view: the probe's log, the metrics and the
// check, like blackbox_exporter's debug=true.
func TestProbeDebug(t *testing.T) {
	t.Parallel()
	good := newBackend(t)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /health, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: api, check: web, targets: [%q]}
`, good.addr()))
	port := strings.Split(good.addr(), ":")[1]
	code, text := td.scrape(t, "/probe?module=web&debug=true&target=localhost:"+port, nil)
	for _, want := range []string{"Logs for the probe:", `msg="beginning probe" module=web protocol=http target=localhost:` + port + " ",
		"resolved target address", "probe succeeded",
		"Metrics that would have been returned:", "probe_success 1", "Module configuration:", `"path": "/health"`} {
		if !strings.Contains(text, want) {
			t.Errorf("debug view lacks %q", want)
		}
	}
	if code != http.StatusOK || t.Failed() {
		t.Fatalf("%d\n%s", code, text)
	}
	for target, want := range map[string]string{
		good.addr():                   "target=" + good.addr() + " ",
		"[::1]:" + port:               "target=[::1]:" + port + " ",
		"http://localhost:" + port:    "target=localhost:" + port + " ",
		"https://127.0.0.1:" + port:   "target=127.0.0.1:" + port + " ",
		"http://[::1]:" + port + "/x": "target=[::1]:" + port + " ",
	} {
		_, text := td.scrape(t, "/probe?module=web&debug=true&target="+url.QueryEscape(target), nil)
		if !strings.Contains(text, want) {
			t.Errorf("debug view of %s: the log lacks %q:\n%s", target, want, text)
		}
	}
}

// promtool runs "promtool check metrics" on text and fails on any problem.
func promtool(t *testing.T, what, text string) {
	t.Helper()
	cmd := exec.Command(testenv.Tool(t, "promtool", "prometheus"), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
	}
}

// TestPromtoolCheckMetrics is an acceptance test: promtool finds nothing
// to say about /probe (HTTP, HTTPS and TCP) and /metrics (with webhooks,
// route changes and certificates in it).
func TestPromtoolCheckMetrics(t *testing.T) {
	t.Parallel()
	good := newBackend(t)
	addr, ca, _ := tlsBackend(t)
	rc := newReceiver(t, nil)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 1}
  secure: {protocol: https, path: /, interval: 100ms, timeout: 2s, rise: 1, fall: 1, tls: {ca_file: %q}}
  tcp: {protocol: tcp, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: api, check: web, targets: [%q]}
  - {name: tls, check: secure, targets: [%q]}
webhooks:
  - {url: "http://%s/"}
`, ca, good.addr(), addr, rc.addr))
	td.waitEvent(t, addr, "healthy", 0)
	td.waitEvent(t, good.addr(), "healthy", 0)
	for _, q := range []string{"module=web&target=" + good.addr(), "module=secure&target=" + addr, "module=tcp&target=" + good.addr(), "module=tcp&target=" + closedPort(t)} {
		code, text := td.scrape(t, "/probe?"+q, nil)
		if code != http.StatusOK {
			t.Fatalf("/probe?%s: %d %s", q, code, text)
		}
		promtool(t, "/probe?"+q, text)
	}
	code, text := td.scrape(t, "/metrics", nil)
	if code != http.StatusOK || !strings.Contains(text, "sonde_tls_earliest_cert_expiry_seconds") ||
		!strings.Contains(text, "sonde_route_changes_total") || !strings.Contains(text, "sonde_webhook_requests_total") {
		t.Fatalf("/metrics: %d, lacks a new metric\n%s", code, text)
	}
	promtool(t, "/metrics", text)
}

// TestPrometheusScrapesProbe is an acceptance test: Prometheus (the Debian
// package), running on loopback with a blackbox-style job that differs from
// blackbox_exporter's documented one only in the address, records
// probe_success 1 for a good target and 0 for a bad one.
func TestPrometheusScrapesProbe(t *testing.T) {
	t.Parallel()
	bin := testenv.Tool(t, "prometheus", "prometheus")
	good, bad := newBackend(t), newBackend(t)
	bad.failing.Store(true)
	td := startDaemon(t, fmt.Sprintf(`
checks:
  http_2xx: {protocol: http, path: /, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: api, check: http_2xx, targets: [%q]}
`, good.addr()))
	sonde := strings.TrimPrefix(td.http.URL, "http://")
	goodURL, badURL := good.srv.URL+"/", bad.srv.URL+"/"
	dir := t.TempDir()
	promCfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: blackbox
    metrics_path: /probe
    params:
      module: [http_2xx]
    static_configs:
      - targets:
          - %s
          - %s
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: %s
`, goodURL, badURL, sonde)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(promCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := closedPort(t)
	prom := testenv.Start(t, exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn"))

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", prom.Output())
		}
	})
	testenv.Eventually(t, fmt.Sprintf("Prometheus to record probe_success 1 for %s and 0 for %s", goodURL, badURL), func() (map[string]string, bool) {
		got := queryProbeSuccess(listen)
		return got, got[goodURL] == "1" && got[badURL] == "0"
	})
}

// queryProbeSuccess asks Prometheus at addr for probe_success by instance;
// errors (Prometheus still starting) give an empty answer.
func queryProbeSuccess(addr string) map[string]string {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=probe_success")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil {
		return nil
	}
	out := map[string]string{}
	for _, s := range r.Data.Result {
		if v, ok := s.Value[1].(string); ok {
			out[s.Metric["instance"]] = v
		}
	}
	return out
}
