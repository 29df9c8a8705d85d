package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench/testenv"
	"github.com/sondeprobe/sonde/server"
)

// syncBuffer collects a process's output for a test reading it meanwhile.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingRE = regexp.MustCompile(`msg=serving listen=(\S+)`)

// runDaemon starts `sonde run` with args, waits until it serves, and returns
// a function that kills it with SIGKILL and waits for its end, the address
// it serves on and its log.
func runDaemon(t *testing.T, args ...string) (kill func(), addr string, logs *syncBuffer) {
	t.Helper()
	logs = &syncBuffer{}
	cmd := exec.Command(testenv.Sonde(t), append([]string{"run", "-listen", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	kill = func() {
		_ = cmd.Process.Signal(syscall.SIGKILL) // by its pid; a no-op once it exited
		<-exited
	}
	t.Cleanup(kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(logs.String()); m != nil {
			return kill, m[1], logs
		}
		select {
		case <-exited:
			t.Fatalf("sonde run exited before serving; log:\n%s", logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sonde run does not serve; log:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// targetOf returns the first target of the daemon at addr.
func targetOf(t *testing.T, addr string) server.TargetJSON {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/targets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Targets []server.TargetJSON `json:"targets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || len(page.Targets) != 1 {
		t.Fatalf("targets: %v %+v", err, page)
	}
	return page.Targets[0]
}

// TestRunStateSurvivesKill is issue 10's restart: `sonde run -state-file`
// is killed with SIGKILL and started again, and its target, which an App
// Gateway check starts unhealthy, is healthy and routed at once, since the
// time it became so, before any probe of the new process has answered (the
// backend hangs by then). A state file that is not one is reported and
// ignored: the daemon starts, its target in the initial state.
func TestRunStateSurvivesKill(t *testing.T) {
	var hang atomic.Bool
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(func() {
		close(release)
		backend.Close()
	})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sonde.yaml")
	state := filepath.Join(dir, "state")
	yaml := fmt.Sprintf(`
checks:
  gw: {preset: appgateway, protocol: http, interval: 200ms, timeout: 2s}
pools:
  - {name: gw, check: gw, targets: [%q]}
`, strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-config", cfg, "-state-file", state, "-state-interval", "100ms"}

	kill, addr, _ := runDaemon(t, args...)
	var before server.TargetJSON
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if before = targetOf(t, addr); before.State == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target %+v never healthy", before)
		}
	}
	time.Sleep(500 * time.Millisecond) // a few saves
	hang.Store(true)
	kill()

	kill, addr, logs := runDaemon(t, args...)
	after := targetOf(t, addr)
	if after.State != "healthy" || after.Route != "routed" || after.StateSince.Sub(before.StateSince).Abs() > time.Millisecond {
		t.Fatalf("after kill -9 and restart: %+v, want healthy and routed since %v", after, before.StateSince)
	}
	if !strings.Contains(logs.String(), "states restored") {
		t.Errorf("no restore logged:\n%s", logs)
	}

	kill()
	if err := os.WriteFile(state, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, addr, logs = runDaemon(t, args...)
	if x := targetOf(t, addr); x.State != "unhealthy" {
		t.Errorf("with a corrupt state file: %+v, want the check's initial state, unhealthy", x)
	}
	if !strings.Contains(logs.String(), "state file ignored") {
		t.Errorf("a corrupt state file was not reported:\n%s", logs)
	}
}
