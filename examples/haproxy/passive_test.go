package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server"
	"github.com/sondeprobe/sonde/server/web/api"
)

// passiveNetnsEnv marks the copy of the test binary that runs
// TestHAProxyPassive inside the network namespace its parent made: its nft
// rules and HAProxy's sockets stay there.
const passiveNetnsEnv = "SONDE_TEST_HAPROXY_PASSIVE_NETNS"

// TestHAProxyPassive proves passive evidence with a real client: HAProxy,
// its own health checks off, balances live requests over three backends
// that sonde probes only every 30 s, and follows sonde's route events
// through the relay. The connections HAProxy opens to the backends are what
// the eBPF observer sees (it ignores sonde's process, which here is the
// test's: the load generator talks to HAProxy's frontend, which sonde does
// not watch). Everything runs in a network namespace of the test's own.
func TestHAProxyPassive(t *testing.T) {
	testenv.RequirePrivileged(t, "the passive observer needs CAP_BPF and CAP_PERFMON; the test makes a network namespace and nftables rules")
	testenv.Tool(t, "haproxy", "haproxy")
	testenv.Tool(t, "nft", "nftables")
	if os.Getenv(passiveNetnsEnv) != "1" {
		runInOwnNamespace(t)
		return
	}
	t.Run("refusing", testPassiveRefusing)
	t.Run("dropping", testPassiveDropping)
	t.Run("no traffic", testPassiveNoTraffic)
	t.Run("client aborts", testPassiveClientAborts)
}

// runInOwnNamespace runs TestHAProxyPassive again in a copy of the test
// binary inside a network namespace with only lo up, and fails t unless it
// passed there. The copy's output, detection times included, goes to t's
// log. It enters the network namespace alone (nsenter --net); the
// observer's BTF tracepoints would attach under ip netns exec too.
func runInOwnNamespace(t *testing.T) {
	nsenter := testenv.Tool(t, "nsenter", "util-linux")
	ns := testenv.LoopbackNamespace(t)
	// The copy's own -test.timeout fires first, with its goroutines' stacks.
	limit := 4 * time.Minute
	if dl, ok := t.Deadline(); ok && time.Until(dl)-30*time.Second < limit {
		limit = max(time.Until(dl)-30*time.Second, time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit+20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nsenter, "--net=/var/run/netns/"+ns, "--", os.Args[0],
		"-test.run=^TestHAProxyPassive$", "-test.count=1", "-test.v", "-test.timeout="+limit.String())
	cmd.Env = append(os.Environ(), passiveNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestHAProxyPassive") {
		t.Fatalf("TestHAProxyPassive in its namespace: %v", err)
	}
}

// testPassiveRefusing: a backend closes its listener under live traffic.
// HAProxy's connects to it are refused; each few of them pull a probe
// forward (recheck), and the probes find it unhealthy within a second,
// where the 30 s interval alone takes a minute. The relay then puts it in
// maintenance and HAProxy sends it nothing more.
func testPassiveRefusing(t *testing.T) {
	sc := newPassiveScenario(t, passiveSetup{
		passive:        "{failures: 3, window: 2s, action: recheck, recheck_gap: 50ms}",
		fall:           2,
		connectTimeout: 1500 * time.Millisecond,
	})
	sc.waitHealthy()
	ld := sc.startLoad()
	ld.waitServed(t, 30) // traffic flows to all three
	before := sc.lastSeq()
	victim := sc.backends[1]
	victim.refuse()
	closed := time.Now()

	ev := sc.waitStateEvent(victim.addr, "unhealthy", before)
	detect := ev.Time.Sub(closed)
	t.Logf("refusing backend %s: unhealthy %v after its listener closed (event seen by the test after %v; reason %s)",
		victim.addr, detect.Round(time.Millisecond), time.Since(closed).Round(time.Millisecond), ev.Reason)
	if detect > time.Second {
		t.Errorf("refusing backend unhealthy %v after it closed, want within 1s", detect)
	}
	if ev.Passive || ev.Reason != "refused" {
		t.Errorf("state event %+v: want the rechecked probes' verdict (refused, not passive)", ev)
	}
	sc.waitAdmin(closed, map[string]string{"s1": "0", "s2": "1", "s3": "0"})
	if n := sc.metric("sonde_passive_triggers_total", map[string]string{"pool": "api", "action": "recheck"}); n < 1 {
		t.Errorf("sonde_passive_triggers_total{action=recheck} = %v, want ≥ 1", n)
	}
	if n := sc.metric("sonde_passive_connections_total", map[string]string{"pool": "api", "outcome": "refused"}); n < 3 {
		t.Errorf("sonde_passive_connections_total{outcome=refused} = %v, want ≥ 3", n)
	}
	ld.stop(t)
	sc.noMoreConnects(1)
	sc.othersStayHealthy(victim)
}

// testPassiveDropping: a backend starts dropping SYNs. HAProxy gives up
// each connect after its timeout connect of 1.5 s, past the 1 s initial
// retransmission timeout, so each abort counts as timed out (PA1); with
// eject, fall triggers make the target unhealthy without a probe, within
// the connect timeout and a second.
func testPassiveDropping(t *testing.T) {
	const connectTimeout = 1500 * time.Millisecond
	sc := newPassiveScenario(t, passiveSetup{
		passive:        "{failures: 3, window: 5s, action: eject}",
		fall:           2,
		connectTimeout: connectTimeout,
	})
	sc.waitHealthy()
	ld := sc.startLoad()
	ld.waitServed(t, 30)
	before := sc.lastSeq()
	victim := sc.backends[1]
	sc.drop(1)
	dropped := time.Now()

	ev := sc.waitStateEvent(victim.addr, "unhealthy", before)
	detect := ev.Time.Sub(dropped)
	t.Logf("dropping backend %s: unhealthy %v after the drop rule (HAProxy timeout connect %v; event seen by the test after %v; reason %s)",
		victim.addr, detect.Round(time.Millisecond), connectTimeout, time.Since(dropped).Round(time.Millisecond), ev.Reason)
	if detect > connectTimeout+time.Second {
		t.Errorf("dropping backend unhealthy %v after the drop, want within %v", detect, connectTimeout+time.Second)
	}
	if !ev.Passive || ev.Reason != "timeout" && ev.Reason != "timed_out" {
		t.Errorf("state event %+v: want it made by passive evidence of timed-out connects", ev)
	}
	sc.waitAdmin(dropped, map[string]string{"s1": "0", "s2": "1", "s3": "0"})
	if n := sc.metric("sonde_passive_triggers_total", map[string]string{"pool": "api", "action": "eject"}); n < 2 {
		t.Errorf("sonde_passive_triggers_total{action=eject} = %v, want ≥ fall (2)", n)
	}
	if n := sc.metric("sonde_passive_connections_total", map[string]string{"pool": "api", "outcome": "timed_out"}); n < 6 {
		t.Errorf("sonde_passive_connections_total{outcome=timed_out} = %v, want ≥ 6", n)
	}
	ld.stop(t)
	sc.noMoreConnects(1)
	sc.othersStayHealthy(victim)
}

// testPassiveNoTraffic: a backend refuses but no client sends anything.
// Passive evidence needs connections: nothing changes until the active
// window, although the rule triggers on a single failure. Then the first
// requests through HAProxy find it.
func testPassiveNoTraffic(t *testing.T) {
	sc := newPassiveScenario(t, passiveSetup{
		passive:        "{failures: 1, window: 10s, action: recheck, recheck_gap: 10ms}",
		fall:           1,
		connectTimeout: 1500 * time.Millisecond,
	})
	sc.waitHealthy()
	victim := sc.backends[1]
	victim.refuse()
	// Nothing is awaited here: the test shows that nothing happens. With
	// traffic the rule above acts within milliseconds; 3 s is far beyond
	// that and well before the next probe (30 s after the first).
	time.Sleep(3 * time.Second)
	if since := time.Since(sc.started); since > 25*time.Second {
		t.Fatalf("the quiet period ended %v after sonde started, too near its next probe to show anything", since)
	}
	for _, x := range sc.targets() {
		if x.State != "healthy" {
			t.Errorf("target %s %s without traffic, want healthy until the active window", x.Target, x.State)
		}
	}
	for _, o := range []string{"connected", "refused", "timed_out", "abandoned"} {
		if n := sc.metric("sonde_passive_connections_total", map[string]string{"pool": "api", "outcome": o}); n != 0 {
			t.Errorf("sonde_passive_connections_total{outcome=%s} = %v without traffic", o, n)
		}
	}
	if n := sc.metric("sonde_passive_triggers_total", map[string]string{"pool": "api", "action": "recheck"}); n != 0 {
		t.Errorf("sonde_passive_triggers_total = %v without traffic", n)
	}
	if got := sc.admin(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"s1": "0", "s2": "0", "s3": "0"}) {
		t.Errorf("HAProxy admin states %v without traffic, want all ready", got)
	}

	// The same target, once clients come: found by the first of their
	// refused connects.
	before := sc.lastSeq()
	start := time.Now()
	ld := sc.startLoad()
	ev := sc.waitStateEvent(victim.addr, "unhealthy", before)
	t.Logf("no traffic for 3s: %s stayed healthy; with traffic it was unhealthy %v after the first request",
		victim.addr, ev.Time.Sub(start).Round(time.Millisecond))
	ld.stop(t)
}

// testPassiveClientAborts: a client with a connect timeout of 200 ms, below
// the 1 s initial retransmission timeout, gives up on a backend that drops
// SYNs before any SYN is sent again: every such connect is abandoned (PA1),
// no evidence, even with a rule that triggers on one failure and a fall of
// one.
func testPassiveClientAborts(t *testing.T) {
	sc := newPassiveScenario(t, passiveSetup{
		passive:        "{failures: 1, window: 10s, action: eject}",
		fall:           1,
		connectTimeout: 200 * time.Millisecond,
	})
	sc.waitHealthy()
	ld := sc.startLoad()
	ld.waitServed(t, 30)
	victim := sc.backends[2]
	sc.drop(2)
	// Enough aborted connects to trigger many times over if they counted.
	testenv.Eventually(t, "SYNs dropped", func() (uint64, bool) {
		n := sc.dropped()
		return n, n >= 20
	})
	ld.stop(t)
	syns := sc.dropped()
	// Every connect to the dropping backend ended (abandoned: one SYN
	// each), or one counted as a failure already shows the defect.
	ended := testenv.Eventually(t, "every connect to the dropping backend counted", func() (map[string]float64, bool) {
		got := map[string]float64{}
		for _, o := range []string{"abandoned", "refused", "timed_out", "unreachable"} {
			got[o] = sc.metric("sonde_passive_connections_total", map[string]string{"pool": "api", "outcome": o})
		}
		return got, got["abandoned"] >= float64(syns) || got["refused"]+got["timed_out"]+got["unreachable"] > 0
	})
	t.Logf("client aborts: %d SYNs to %s dropped; connects counted %v", syns, victim.addr, ended)
	if want := (map[string]float64{"abandoned": float64(syns), "refused": 0, "timed_out": 0, "unreachable": 0}); fmt.Sprint(ended) != fmt.Sprint(want) {
		t.Errorf("sonde_passive_connections_total by outcome %v, want %v: the client aborted its own connects, no SYN was sent again", ended, want)
	}
	if n := sc.metric("sonde_passive_triggers_total", map[string]string{"pool": "api", "action": "eject"}); n != 0 {
		t.Errorf("sonde_passive_triggers_total{action=eject} = %v, want 0", n)
	}
	var bad []api.Event
	for _, e := range sc.events(0) {
		if e.Kind == api.KindPassive || e.Kind == api.KindState && e.To != "healthy" {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d passive or state events after aborted connects only, the first %+v", len(bad), bad[0])
	}
	sc.othersStayHealthy(nil)
	if got := sc.admin(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"s1": "0", "s2": "0", "s3": "0"}) {
		t.Errorf("HAProxy admin states %v, want all ready", got)
	}
}

// passiveSetup is what differs between the scenarios.
type passiveSetup struct {
	passive        string        // the check's passive block
	fall           int           // the check's fall
	connectTimeout time.Duration // HAProxy's timeout connect
}

// passiveScenario is one HAProxy over three backends, sonde probing them
// every 30 s with a passive block, and the relay between them, all in the
// test's namespace.
type passiveScenario struct {
	t        *testing.T
	backends [3]*passiveBackend
	frontend string // HAProxy's, for the clients
	rl       *relay
	api      string // sonde's API
	nftTable string // the scenario's nftables table: SYN counters and drop rules
	started  time.Time
}

// passiveAddrs returns the three backends' addresses: 127.77.X.1–3 on the
// namespace's lo, with X from the process id. The observer sees the
// connections of every namespace on the host, so the addresses (and the
// ports the kernel gives out) must be unlikely to be another test's.
func passiveAddrs() [3]string {
	x := os.Getpid()%250 + 1
	return [3]string{fmt.Sprintf("127.77.%d.1", x), fmt.Sprintf("127.77.%d.2", x), fmt.Sprintf("127.77.%d.3", x)}
}

var passiveTables atomic.Int64

func newPassiveScenario(t *testing.T, set passiveSetup) *passiveScenario {
	t.Helper()
	dir := t.TempDir()
	sc := &passiveScenario{t: t, nftTable: fmt.Sprintf("sonde_passive_%d", passiveTables.Add(1))}
	for i, host := range passiveAddrs() {
		sc.backends[i] = newPassiveBackend(t, host)
	}
	sc.countSyns()

	socket := filepath.Join(dir, "admin.sock")
	sc.frontend = passiveFreeAddr(t)
	sc.startHAProxy(dir, socket, set.connectTimeout)

	secret := []byte("hook secret")
	secretFile := filepath.Join(dir, "hook.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	rl, err := newRelay(options{socket: socket, secret: secret, removed: "maint",
		backends: backends{"api": "be_api"}, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sc.rl = rl
	hook := httptest.NewServer(rl)
	t.Cleanup(hook.Close)

	cfgPath := filepath.Join(dir, "sonde.yaml")
	b := sc.backends
	yaml := fmt.Sprintf(`checks:
  web: {protocol: http, path: /health, interval: 30s, timeout: 1s, rise: 1, fall: %d, passive: %s}
pools:
  - {name: api, check: web, targets: [%q, %q, %q]}
webhooks:
  - url: %s/
    secret_file: %s
    events: {kinds: [route]}
`, set.fall, set.passive, b[0].addr, b[1].addr, b[2].addr, hook.URL, secretFile)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	d, err := server.New(server.Options{
		Load:   func() (*config.Config, error) { return config.Load(cfgPath, config.LoadOptions{}) },
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		NoSyn:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	sc.started = time.Now()
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("sonde's log:\n%s", logs)
		}
	})
	if !d.PassiveRuns() {
		t.Fatalf("the passive observer does not run as root; sonde's log:\n%s", logs)
	}
	apiSrv := httptest.NewServer(d.Handler())
	t.Cleanup(apiSrv.Close)
	sc.api = apiSrv.URL
	rl.o.sonde = apiSrv.URL
	return sc
}

// passiveFreeAddr returns a loopback address of the namespace nothing
// listens on.
func passiveFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startHAProxy runs HAProxy in the foreground: frontend fe on sc.frontend,
// backend be_api over the three backends, round robin, without health
// checks. Each request gets a connection of its own to its server
// (http-server-close), as the observer must see connects to judge; a
// failed connect is tried once more on another server (redispatch), so
// clients rarely see the failure.
func (sc *passiveScenario) startHAProxy(dir, socket string, connectTimeout time.Duration) {
	t := sc.t
	t.Helper()
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    option http-server-close
    retries 1
    option redispatch
    timeout connect %dms
    timeout client 10s
    timeout server 10s
frontend fe
    bind %s
    default_backend be_api
backend be_api
    balance roundrobin
`, socket, connectTimeout.Milliseconds(), sc.frontend)
	for i, b := range sc.backends {
		cfg += fmt.Sprintf("    server s%d %s\n", i+1, b.addr)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Tool(t, "haproxy", "haproxy"), "-f", path, "-db")
	// Should the test binary die without its cleanups (a timeout), HAProxy
	// goes with it rather than outlive the namespace's name.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	proc := testenv.Start(t, cmd)
	testenv.Eventually(t, "HAProxy's runtime API socket", func() (string, bool) {
		c, err := net.Dial("unix", socket)
		if err != nil {
			return proc.Output(), false
		}
		c.Close()
		return "", true
	})
}

// passiveBackend is an HTTP server on one of the namespace's loopback
// addresses; it counts the requests HAProxy forwards (any path but sonde's
// /health).
type passiveBackend struct {
	addr   string
	ln     net.Listener
	served atomic.Int64
}

func newPassiveBackend(t *testing.T, host string) *passiveBackend {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	b := &passiveBackend{addr: ln.Addr().String(), ln: ln}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/health" {
				b.served.Add(1)
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// refuse closes the backend's listener: from now on its address refuses
// connections.
func (b *passiveBackend) refuse() { _ = b.ln.Close() }

// nft runs an nftables script in the namespace.
func (sc *passiveScenario) nft(script string) {
	sc.t.Helper()
	cmd := exec.Command(testenv.Tool(sc.t, "nft", "nftables"), "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		sc.t.Fatalf("nft: %v: %s\n%s", err, out, script)
	}
}

// countSyns makes the scenario's table: a counter of the SYNs sent to each
// backend (retransmissions included), by which the test sees which
// backends HAProxy still connects to, whatever they answer; and one of the
// packets drop rules drop.
func (sc *passiveScenario) countSyns() {
	var s strings.Builder
	fmt.Fprintf(&s, "table ip %s {\n  counter dropped {}\n", sc.nftTable)
	for i := range sc.backends {
		fmt.Fprintf(&s, "  counter s%d {}\n", i+1)
	}
	s.WriteString("  chain input {\n    type filter hook input priority 0; policy accept;\n")
	for i, b := range sc.backends {
		host, port, _ := net.SplitHostPort(b.addr)
		fmt.Fprintf(&s, "    ip daddr %s tcp dport %s tcp flags & (syn | ack) == syn counter name \"s%d\"\n", host, port, i+1)
	}
	s.WriteString("  }\n}\n")
	sc.nft(s.String())
	nft := testenv.Tool(sc.t, "nft", "nftables")
	sc.t.Cleanup(func() { _ = exec.Command(nft, "delete", "table", "ip", sc.nftTable).Run() })
}

// drop makes backend i drop every packet sent to it, after counting SYNs.
func (sc *passiveScenario) drop(i int) {
	sc.t.Helper()
	host, port, _ := net.SplitHostPort(sc.backends[i].addr)
	sc.nft(fmt.Sprintf("add rule ip %s input ip daddr %s tcp dport %s counter name \"dropped\" drop\n", sc.nftTable, host, port))
}

// dropped returns the packets drop rules dropped so far.
func (sc *passiveScenario) dropped() uint64 {
	sc.t.Helper()
	return sc.counter("dropped")
}

var packetsRE = regexp.MustCompile(`packets (\d+)`)

// syns returns the SYNs sent to backend i so far.
func (sc *passiveScenario) syns(i int) uint64 {
	sc.t.Helper()
	return sc.counter(fmt.Sprintf("s%d", i+1))
}

// counter returns the packets the scenario's nftables counter name counted.
func (sc *passiveScenario) counter(name string) uint64 {
	sc.t.Helper()
	out, err := exec.Command(testenv.Tool(sc.t, "nft", "nftables"), "list", "counter", "ip", sc.nftTable, name).CombinedOutput()
	if err != nil {
		sc.t.Fatalf("nft list counter: %v: %s", err, out)
	}
	m := packetsRE.FindSubmatch(out)
	if m == nil {
		sc.t.Fatalf("nft list counter: no packet count in %q", out)
	}
	n, err := strconv.ParseUint(string(m[1]), 10, 64)
	if err != nil {
		sc.t.Fatal(err)
	}
	return n
}

// getJSON reads sonde's API at path into v.
func (sc *passiveScenario) getJSON(path string, v any) {
	sc.t.Helper()
	resp, err := http.Get(sc.api + path)
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		sc.t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		sc.t.Fatalf("GET %s: %v", path, err)
	}
}

func (sc *passiveScenario) targets() []api.TargetJSON {
	sc.t.Helper()
	var page api.TargetsPage
	sc.getJSON("/api/v1/targets?limit=1000", &page)
	return page.Targets
}

// waitHealthy waits for sonde's first probes to find the three backends
// healthy, and for HAProxy to route to all three.
func (sc *passiveScenario) waitHealthy() {
	sc.t.Helper()
	testenv.Eventually(sc.t, "three healthy targets", func() ([]api.TargetJSON, bool) {
		ts := sc.targets()
		n := 0
		for _, x := range ts {
			if x.State == "healthy" && x.Route == "routed" {
				n++
			}
		}
		return ts, n == 3
	})
	if got := sc.admin(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"s1": "0", "s2": "0", "s3": "0"}) {
		sc.t.Fatalf("HAProxy admin states %v at start, want all ready", got)
	}
}

// othersStayHealthy checks that every target but except is healthy and
// routed.
func (sc *passiveScenario) othersStayHealthy(except *passiveBackend) {
	sc.t.Helper()
	for _, x := range sc.targets() {
		if except != nil && x.Target == except.addr {
			continue
		}
		if x.State != "healthy" || x.Route != "routed" {
			sc.t.Errorf("target %s is %s and %s, want healthy and routed", x.Target, x.State, x.Route)
		}
	}
}

// events returns sonde's events after since.
func (sc *passiveScenario) events(since uint64) []api.Event {
	sc.t.Helper()
	var all []api.Event
	for {
		var page api.EventsPage
		sc.getJSON(fmt.Sprintf("/api/v1/events?since=%d&limit=0", since), &page)
		all = append(all, page.Events...)
		if len(page.Events) == 0 || page.Next <= since {
			return all
		}
		since = page.Next
	}
}

// lastSeq returns the number of the newest event.
func (sc *passiveScenario) lastSeq() uint64 {
	sc.t.Helper()
	var page api.EventsPage
	sc.getJSON("/api/v1/events?since=0&limit=0", &page)
	return page.Next
}

// waitStateEvent waits for the state event that makes target to after
// event number since.
func (sc *passiveScenario) waitStateEvent(target, to string, since uint64) api.Event {
	sc.t.Helper()
	return testenv.Eventually(sc.t, "target "+target+" "+to, func() (api.Event, bool) {
		for _, e := range sc.events(since) {
			if e.Kind == api.KindState && e.Target == target && e.To == to {
				return e, true
			}
		}
		return api.Event{}, false
	})
}

// metric returns the value of one series of sonde's /metrics; it fails the
// test when there is no such series.
func (sc *passiveScenario) metric(name string, labels map[string]string) float64 {
	sc.t.Helper()
	resp, err := http.Get(sc.api + "/metrics")
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		sc.t.Fatalf("parse /metrics: %v", err)
	}
	mf, ok := mfs[name]
	if ok {
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	sc.t.Fatalf("no series %s%v in /metrics", name, labels)
	return 0
}

// admin returns srv_admin_state of every server of be_api by name: 0
// ready, 1 forced maintenance.
func (sc *passiveScenario) admin() map[string]string {
	sc.t.Helper()
	servers, err := sc.rl.servers(context.Background(), "be_api")
	if err != nil {
		sc.t.Fatal(err)
	}
	states := map[string]string{}
	for _, s := range servers {
		states[s["srv_name"]] = s["srv_admin_state"]
	}
	return states
}

// waitAdmin waits for HAProxy's servers to be in the admin states want and
// logs how long after from they got there.
func (sc *passiveScenario) waitAdmin(from time.Time, want map[string]string) {
	sc.t.Helper()
	testenv.Eventually(sc.t, fmt.Sprintf("HAProxy admin states %v", want), func() (map[string]string, bool) {
		got := sc.admin()
		return got, fmt.Sprint(got) == fmt.Sprint(want)
	})
	sc.t.Logf("HAProxy admin states %v %v after the failure began (as polled)", want, time.Since(from).Round(time.Millisecond))
}

// noMoreConnects checks that HAProxy, once it put backend i in
// maintenance, sends it nothing: with the load stopped, further requests
// all succeed on the other backends and not a SYN goes to i.
func (sc *passiveScenario) noMoreConnects(i int) {
	sc.t.Helper()
	const n = 30
	before := sc.syns(i)
	var served int64
	for _, b := range sc.backends {
		served += b.served.Load()
	}
	c := &http.Client{Timeout: 10 * time.Second}
	for range n {
		resp, err := c.Get("http://" + sc.frontend + "/lb")
		if err != nil {
			sc.t.Fatalf("through HAProxy after the maintenance: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			sc.t.Fatalf("through HAProxy after the maintenance: %s", resp.Status)
		}
	}
	if after := sc.syns(i); after != before {
		sc.t.Errorf("HAProxy sent %d SYNs to backend s%d in maintenance", after-before, i+1)
	}
	var now int64
	for _, b := range sc.backends {
		now += b.served.Load()
	}
	if now-served != n {
		sc.t.Errorf("the other backends served %d of %d requests", now-served, n)
	}
}

// passiveLoad is a client sending requests through HAProxy at a steady
// pace, each on its own goroutine, at most passiveLoadInFlight at once,
// until it is stopped or has sent passiveLoadMax requests or run for
// passiveLoadFor.
type passiveLoad struct {
	sc     *passiveScenario
	cancel context.CancelFunc
	done   chan struct{}
	sent   atomic.Int64
	failed atomic.Int64 // transport errors and answers other than 200
}

const (
	passiveLoadEvery    = 10 * time.Millisecond
	passiveLoadInFlight = 200
	passiveLoadMax      = 4000
	passiveLoadFor      = 30 * time.Second
)

func (sc *passiveScenario) startLoad() *passiveLoad {
	ctx, cancel := context.WithTimeout(context.Background(), passiveLoadFor)
	ld := &passiveLoad{sc: sc, cancel: cancel, done: make(chan struct{})}
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: passiveLoadInFlight},
	}
	go func() {
		defer close(ld.done)
		defer c.CloseIdleConnections()
		var wg sync.WaitGroup
		defer wg.Wait()
		slots := make(chan struct{}, passiveLoadInFlight)
		tick := time.NewTicker(passiveLoadEvery)
		defer tick.Stop()
		for ld.sent.Load() < passiveLoadMax {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				continue // as many in flight as allowed: skip a beat
			}
			ld.sent.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				resp, err := c.Get("http://" + sc.frontend + "/lb")
				if err != nil {
					ld.failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					ld.failed.Add(1)
				}
			}()
		}
	}()
	sc.t.Cleanup(func() { ld.cancel(); <-ld.done })
	return ld
}

// waitServed waits until every backend has served at least n requests of
// the load.
func (ld *passiveLoad) waitServed(t *testing.T, n int64) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("%d requests served by each backend", n), func() ([3]int64, bool) {
		var got [3]int64
		ok := true
		for i, b := range ld.sc.backends {
			got[i] = b.served.Load()
			ok = ok && got[i] >= n
		}
		return got, ok
	})
}

// stop stops sending and waits for the requests in flight.
func (ld *passiveLoad) stop(t *testing.T) {
	t.Helper()
	ld.cancel()
	testenv.ReturnsWithin(t, "the load's requests in flight", func() { <-ld.done })
	t.Logf("load: %d requests through HAProxy, %d failed", ld.sent.Load(), ld.failed.Load())
}
