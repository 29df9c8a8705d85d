package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/bench/testenv"
)

// daemonProc is a `sonde run` process started by a test, with its log.
type daemonProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  strings.Builder
	more chan struct{} // signalled on every log line
	done chan struct{} // closed when the process ended
	err  error         // its exit, valid after done
}

// startSonde runs the sonde binary with args (prefix, if any, runs it: a
// wrapper such as prlimit) and kills it when the test ends.
func startSonde(t *testing.T, prefix []string, args ...string) *daemonProc {
	t.Helper()
	argv := append(append(prefix, testenv.Sonde(t)), args...)
	p := &daemonProc{cmd: exec.Command(argv[0], argv[1:]...), more: make(chan struct{}, 1), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // the process is ours; a no-op once it ended
		<-p.done
		if t.Failed() {
			t.Logf("sonde log:\n%s", p.logText())
		}
	})
	return p
}

func (p *daemonProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits until the log matches re, and returns the first match's
// submatches.
func (p *daemonProc) waitLog(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if m := re.FindStringSubmatch(p.logText()); m != nil {
			return m
		}
		select {
		case <-p.more:
		case <-p.done:
			if m := re.FindStringSubmatch(p.logText()); m != nil {
				return m
			}
			t.Fatalf("sonde ended (%v) before logging %q", p.err, re)
		case <-deadline:
			t.Fatalf("no %q in the log within %v", re, timeout)
		}
	}
}

// exitCode waits for the process to end and returns its exit code.
func (p *daemonProc) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("sonde still runs %v later", timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait: %v", p.err)
	}
	return 0
}

func (p *daemonProc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal %v: %v", s, err)
	}
}

var (
	servingRE = regexp.MustCompile(`msg=serving listen=(\S+)`)
	loadedRE  = regexp.MustCompile(`msg="configuration loaded"`)
)

// slowStartConfig is a config whose load takes a while (a quarter of a
// million targets, all disabled, so none is probed).
const slowStartConfig = `
checks:
  web: {protocol: tcp, tcp_mode: connect, port: 9, interval: 60s}
pools:
  - {name: big, check: web, targets: ["198.16.0.0/14"], disabled: ["198.16.0.0/14"]}
`

// TestRunSignalsDuringStart sends SIGHUP while the daemon loads its
// configuration: harmless, and a reload follows once it has started. Then
// SIGTERM stops it with exit 0.
func TestRunSignalsDuringStart(t *testing.T) {
	file := writeConfig(t, slowStartConfig)
	p := startSonde(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	p.waitLog(t, servingRE, 30*time.Second) // logged just before the load
	for range 3 {
		p.signal(t, syscall.SIGHUP)
		time.Sleep(5 * time.Millisecond)
	}
	p.waitLog(t, loadedRE, 60*time.Second)
	p.waitLog(t, regexp.MustCompile(`msg="configuration reloaded"`), 60*time.Second)
	if strings.Index(p.logText(), "configuration reloaded") < strings.Index(p.logText(), "configuration loaded") {
		t.Fatal("reloaded before the first load completed")
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}

// TestRunTermDuringStart stops the daemon while it loads: it exits 0 once
// the load completes, without running.
func TestRunTermDuringStart(t *testing.T) {
	file := writeConfig(t, slowStartConfig)
	p := startSonde(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	p.waitLog(t, servingRE, 30*time.Second)
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM during the start, want 0", code)
	}
}

// TestRunShutdownSlowClient stops the daemon while a client is stuck in the
// middle of a request: it still exits 0, within the shutdown grace.
func TestRunShutdownSlowClient(t *testing.T) {
	file := writeConfig(t, "checks:\n  web: {protocol: tcp, tcp_mode: connect, port: 9}\npools:\n  - {name: p, check: web, targets: [127.0.0.1]}\n")
	p := startSonde(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	addr := p.waitLog(t, servingRE, 30*time.Second)[1]
	p.waitLog(t, loadedRE, 30*time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/v1/targets HTTP/1.1\r\n") // and never the rest
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d with a slow client, want 0", code)
	}
	// The 5 s grace, plus a loaded machine's slack: well below the slow
	// client's 5 s header timeout plus the old unbounded wait.
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("shutdown took %v", took)
	}
}

// TestRunIdleConnectionsNofile1024 runs the daemon with 1024 file
// descriptors and opens 1,100 idle connections to it: the API must keep
// answering, and the target it probes meanwhile must stay healthy.
func TestRunIdleConnectionsNofile1024(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptAndClose(t, ln)
	backend := ln.Addr().String()
	file := writeConfig(t, fmt.Sprintf(`
checks:
  web: {protocol: tcp, tcp_mode: connect, interval: 100ms, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: p, check: web, targets: [%q]}
`, backend))
	p := startSonde(t, []string{"prlimit", "--nofile=1024:1024", "--"}, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	addr := p.waitLog(t, servingRE, 30*time.Second)[1]
	if m := p.waitLog(t, regexp.MustCompile(`max_connections=(\d+) nofile=(\d+)`), 30*time.Second); m[1] != "256" || m[2] != "1024" {
		t.Fatalf("max_connections %s with nofile %s, want 256 with 1024", m[1], m[2])
	}
	p.waitLog(t, regexp.MustCompile(`msg="state change" target=`+regexp.QuoteMeta(backend)+` .*to=healthy`), 30*time.Second)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 1100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 20 { // two seconds of probes at 100 ms
		resp, err := client.Get("http://" + addr + "/api/v1/targets")
		if err != nil {
			t.Fatalf("request %d with 1,100 idle connections: %v", i, err)
		}
		var page struct {
			Targets []struct {
				State       string `json:"state"`
				LastOutcome string `json:"last_outcome"`
			} `json:"targets"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || len(page.Targets) != 1 || page.Targets[0].State != "healthy" {
			t.Fatalf("request %d: %+v (%v), want the target healthy", i, page, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(p.logText(), "to=unhealthy") || strings.Contains(p.logText(), "too many open files") {
		t.Fatal("the daemon ran out of descriptors or marked the target unhealthy")
	}
}
