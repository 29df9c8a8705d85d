package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// sondeProc is a `sonde run` process started by a test, serving on a free
// loopback port, with its log kept.
type sondeProc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	logs []string // JSON log lines
	done chan error
}

// startSonde runs the sonde binary with `run -config cfg` and args, and
// stops it when the test ends (or earlier with stop).
func startSonde(t *testing.T, cfg string, args ...string) *sondeProc {
	t.Helper()
	return startSondeIn(t, nil, cfg, args...)
}

// startSondeIn is startSonde with the command run by wrap (a command that
// ends by executing its arguments, such as unshare), when not nil.
func startSondeIn(t *testing.T, wrap []string, cfg string, args ...string) *sondeProc {
	t.Helper()
	args = append([]string{"run", "-config", cfg, "-listen", "127.0.0.1:0", "-log-format", "json", "-syn=false"}, args...)
	argv := append(append(slices.Clone(wrap), testenv.Sonde(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sondeProc{cmd: cmd, done: make(chan error, 1)}
	listen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				listen <- rec.Listen
			}
			p.mu.Lock()
			p.logs = append(p.logs, sc.Text())
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("sonde %v log:\n%s", args, p.log())
		}
	})
	select {
	case p.addr = <-listen:
		return p
	case err := <-p.done:
		p.done <- err
		t.Fatalf("sonde %v exited before serving: %v\n%s", args, err, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("sonde %v did not serve within 60 s:\n%s", args, p.log())
	}
	return nil
}

// stop ends the process with SIGTERM (SIGKILL after 30 s); it may be called
// more than once.
func (p *sondeProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("sonde (pid %d) did not stop within 30 s of SIGTERM", p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *sondeProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

func (p *sondeProc) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

type apiPools struct {
	Shard, Shards int
	Pools         []struct {
		Name                                 string
		Targets, Healthy, Unhealthy, Unknown int
		Routable                             int
		FailingOpen                          bool `json:"failing_open"`
	}
}

type apiTargets struct {
	Targets []struct{ Target, Pool string }
	Total   int
}

// closedPort reserves a TCP port on every address without listening on it:
// connections to any loopback address on it are refused, and no other
// socket can take it while the test runs.
func closedPort(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*unix.SockaddrInet4).Port
}

// TestShardsTogether runs the real binary as three shards of one
// configuration, then as four: the three report every target exactly once
// through their APIs, never split an endpoint's probe stream, and apply the
// pool policy to their slices; going to four moves about a quarter of the
// endpoints, each to the new shard.
func TestShardsTogether(t *testing.T) {
	t.Parallel()
	refused := closedPort(t)
	var up []string
	for range 8 {
		up = append(up, strconv.Quote(tcpListener(t)))
	}
	// 512 refusing endpoints in pool "down", the first 128 of them also in
	// pool "shared" with a check of the same probe class (one stream per
	// endpoint), and 8 answering endpoints in pool "up".
	cfg := writeConfig(t, fmt.Sprintf(`
checks:
  fast: {protocol: tcp, tcp_mode: connect, port: %d, interval: 3s, timeout: 1s, rise: 1, fall: 1}
  slow: {protocol: tcp, tcp_mode: connect, port: %d, interval: 9s, timeout: 1s, rise: 1, fall: 1}
  up: {protocol: tcp, tcp_mode: connect, interval: 3s, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: down, check: fast, targets: ["127.1.0.0/23"]}
  - {name: shared, check: slow, targets: ["127.1.0.0/25"]}
  - {name: up, check: up, targets: [%s]}
`, refused, refused, strings.Join(up, ", ")))
	want := map[string]int{"down": 512, "shared": 128, "up": 8}

	owners3 := runShards(t, cfg, 3, want)
	owners4 := runShards(t, cfg, 4, want)
	moved := 0
	for ep, s3 := range owners3 {
		s4, ok := owners4[ep]
		if !ok {
			t.Fatalf("%s is in no shard of 4", ep)
		}
		if s4 != s3 {
			moved++
			if s4 != 3 {
				t.Errorf("%s moved from shard %d/3 to %d/4: only the new shard 3 takes targets", ep, s3, s4)
			}
		}
	}
	share := float64(moved) / float64(len(owners3))
	t.Logf("going from 3 to 4 shards moved %d of %d endpoints (%.1f %%)", moved, len(owners3), 100*share)
	if share > 0.35 || share < 0.15 {
		t.Errorf("going from 3 to 4 shards moved %.1f %% of endpoints, want about 25 %% (at most 35 %%)", 100*share)
	}
}

// runShards runs n shards of cfg, checks them, stops them and returns the
// shard of every endpoint.
func runShards(t *testing.T, cfg string, n int, want map[string]int) map[string]int {
	t.Helper()
	procs := make([]*sondeProc, n)
	for i := range procs {
		procs[i] = startSonde(t, cfg, "-shard", fmt.Sprintf("%d/%d", i, n))
	}
	defer func() {
		for _, p := range procs {
			p.stop(t)
		}
	}()

	owner := map[string]int{}  // endpoint → shard
	seen := map[string][]int{} // pool/target → shards that report it
	counts := map[string]int{} // pool → targets over all shards
	for i, p := range procs {
		var pools apiPools
		p.get(t, "/api/v1/pools", &pools)
		if pools.Shard != i || pools.Shards != n {
			t.Errorf("process %d/%d: /api/v1/pools says shard %d of %d", i, n, pools.Shard, pools.Shards)
		}
		for _, pl := range pools.Pools {
			counts[pl.Name] += pl.Targets
		}
		var ts apiTargets
		p.get(t, "/api/v1/targets?limit=0", &ts)
		for _, x := range ts.Targets {
			key := x.Pool + "/" + x.Target
			seen[key] = append(seen[key], i)
			if o, ok := owner[x.Target]; ok && o != i {
				t.Errorf("endpoint %s is probed by shards %d and %d of %d: a stream is split", x.Target, o, i, n)
			}
			owner[x.Target] = i
		}
		if line := fmt.Sprintf(`"msg":"configuration loaded","shard":"%d/%d"`, i, n); !strings.Contains(p.log(), line) {
			t.Errorf("process %d/%d: no start log with %s:\n%s", i, n, line, p.log())
		}
	}
	total := 0
	for _, c := range want {
		total += c
	}
	if len(seen) != total {
		t.Errorf("%d shards report %d distinct targets, want %d", n, len(seen), total)
	}
	for key, shards := range seen {
		if len(shards) != 1 {
			t.Errorf("%s is reported by shards %v of %d, want exactly one", key, shards, n)
		}
	}
	for pool, c := range want {
		if counts[pool] != c {
			t.Errorf("%d shards: pool %s has %d targets in all, want %d", n, pool, counts[pool], c)
		}
	}
	checkPolicies(t, procs, want)
	return owner
}

// checkPolicies waits until every target is decided, then checks the pool
// numbers each shard gives for its slice: all of "up" healthy; "down" has
// no healthy target anywhere, so every shard's slice fails open and keeps
// its targets in rotation (P2).
func checkPolicies(t *testing.T, procs []*sondeProc, want map[string]int) {
	t.Helper()
	type sum struct {
		healthy, routable map[string]int
		undecided         int
		open              bool // every slice of down fails open
	}
	s := testenv.Eventually(t, fmt.Sprintf("every target decided over %d shards", len(procs)), func() (sum, bool) {
		s := sum{healthy: map[string]int{}, routable: map[string]int{}, open: true}
		for _, p := range procs {
			var pools apiPools
			p.get(t, "/api/v1/pools", &pools)
			for _, pl := range pools.Pools {
				s.undecided += pl.Unknown
				s.healthy[pl.Name] += pl.Healthy
				s.routable[pl.Name] += pl.Routable
				if pl.Name == "down" && pl.Targets > 0 && !pl.FailingOpen {
					s.open = false
				}
			}
		}
		return s, s.undecided == 0
	})
	if s.healthy["up"] != want["up"] || s.healthy["down"] != 0 || !s.open || s.routable["down"] != want["down"] {
		t.Errorf("decided pools over %d shards: healthy %v, routable %v, every slice of down failing open %t; want all of up healthy, down failing open everywhere with its %d targets routed",
			len(procs), s.healthy, s.routable, s.open, want["down"])
	}
}

// TestRunReloadsChangedConfig: sonde run reloads a configuration mounted
// the way Kubernetes mounts a ConfigMap when the kubelet swaps it, without
// a signal; SIGHUP still reloads.
func TestRunReloadsChangedConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := tcpListener(t), tcpListener(t)
	version := func(n int, targets ...string) {
		t.Helper()
		ts := filepath.Join(dir, fmt.Sprintf("..2026_01_01_00_00_0%d.000", n))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		var q []string
		for _, x := range targets {
			q = append(q, strconv.Quote(x))
		}
		yaml := fmt.Sprintf("checks: {c: {protocol: tcp, tcp_mode: connect, interval: 1s}}\npools: [{name: p, check: c, targets: [%s]}]\n", strings.Join(q, ", "))
		if err := os.WriteFile(filepath.Join(ts, "sonde.yaml"), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version(1, a)
	if err := os.Symlink("..data/sonde.yaml", filepath.Join(dir, "sonde.yaml")); err != nil {
		t.Fatal(err)
	}
	p := startSonde(t, filepath.Join(dir, "sonde.yaml"))
	targets := func() int {
		var pools apiPools
		p.get(t, "/api/v1/pools", &pools)
		return pools.Pools[0].Targets
	}
	if n := targets(); n != 1 {
		t.Fatalf("%d targets at start, want 1", n)
	}

	version(2, a, b)
	testenv.Eventually(t, "the swapped ConfigMap reloaded, with 2 targets", func() (int, bool) { n := targets(); return n, n == 2 })
	if !strings.Contains(p.log(), `"msg":"configuration changed on disk"`) {
		t.Errorf("no log of the change:\n%s", p.log())
	}

	reloads := func() int {
		resp, err := http.Get("http://" + p.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		re := regexp.MustCompile(`^sonde_config_reloads_total\{result="success"\} (\d+)$`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				return n
			}
		}
		return 0
	}
	before := reloads()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, fmt.Sprintf("a reload after SIGHUP, beyond %d", before), func() (int, bool) { n := reloads(); return n, n > before })
}
