package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
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
func startDaemonProc(t *testing.T, prefix []string, args ...string) *daemonProc {
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
	listeningRE = regexp.MustCompile(`msg=listening listen=(\S+)`) // before the load
	servingRE   = regexp.MustCompile(`msg=serving listen=(\S+)`)   // after it
	loadedRE    = regexp.MustCompile(`msg="configuration loaded"`)
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
// configuration: harmless, and a reload follows once it has started (of an
// unchanged file: it finds the file unchanged, logged at debug level). Then
// SIGTERM stops it with exit 0.
func TestRunSignalsDuringStart(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, slowStartConfig)
	p := startDaemonProc(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false", "-watch=false", "-log-level", "debug")
	p.waitLog(t, listeningRE, 30*time.Second) // logged just before the load
	for range 3 {
		p.signal(t, syscall.SIGHUP)
		time.Sleep(5 * time.Millisecond) // signals spread over the load, not one burst: the behaviour under test
	}
	p.waitLog(t, loadedRE, 60*time.Second)
	p.waitLog(t, regexp.MustCompile(`msg="configuration unchanged"`), 60*time.Second)
	if strings.Index(p.logText(), "configuration unchanged") < strings.Index(p.logText(), "configuration loaded") {
		t.Fatal("reloaded before the first load completed")
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}

// TestRunHangupAtStart sends SIGHUP to a starting daemon as early as a
// program can act on a signal: as soon as the first package of this module
// but package earlysignal has been initialised (GODEBUG=inittrace=1 tells
// when), with most of the binary's initialisation still to run. It must be
// a reload once the daemon runs, not the daemon's end, in each of a few
// tries. (A signal before the Go runtime itself runs ends any process: no
// program can catch it.)
func TestRunHangupAtStart(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "checks:\n  web: {protocol: tcp, tcp_mode: connect, port: 9}\npools:\n  - {name: p, check: web, targets: [127.0.0.1], disabled: [127.0.0.1]}\n")
	early := "init " + module + "/internal/earlysignal "
	for try := range 5 {
		cmd := exec.Command(testenv.Sonde(t), "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false", "-watch=false", "-log-level", "debug")
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		bound := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() }) // ours, by its PID
		var log strings.Builder
		sent, caught, reloaded := false, false, false
		sc := bufio.NewScanner(stderr)
		for !reloaded && sc.Scan() {
			line := sc.Text()
			log.WriteString(line + "\n")
			switch {
			case strings.HasPrefix(line, early):
				caught = true
			case !sent && strings.HasPrefix(line, "init "+module+"/"):
				if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				sent = true
				if !caught {
					t.Errorf("try %d: %s initialised before package earlysignal", try, strings.Fields(line)[1])
				}
			case strings.Contains(line, `msg="configuration unchanged"`):
				reloaded = sent
			}
		}
		if reloaded {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		err = cmd.Wait()
		bound.Stop()
		if !reloaded || err != nil {
			t.Fatalf("try %d: SIGHUP sent during the start (%v): %v, want a reload and then exit 0 on SIGTERM; log:\n%s", try, sent, err, log.String())
		}
	}
}

// TestProbeEndsOnHangup checks that the commands that do not reload still
// end on SIGHUP, as programs do by default: sonde probe of a server that
// never answers, hung up while it waits.
func TestProbeEndsOnHangup(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(testenv.Sonde(t), "probe", "-timeout", "30s", "http://"+l.Addr().String()+"/")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bound := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() }) // ours, by its PID
	defer bound.Stop()
	c, err := l.Accept() // the probe waits for an answer from here on
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGHUP {
		t.Fatalf("sonde probe after SIGHUP: %v, want ended by the signal", err)
	}
}

// TestRunTermDuringStart stops the daemon while it loads: it exits 0 once
// the load completes, without running.
func TestRunTermDuringStart(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, slowStartConfig)
	p := startDaemonProc(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	p.waitLog(t, listeningRE, 30*time.Second)
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM during the start, want 0", code)
	}
}

// TestRunShutdownSlowClient stops the daemon while a client is stuck in the
// middle of a request: it still exits 0, within the shutdown grace.
func TestRunShutdownSlowClient(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "checks:\n  web: {protocol: tcp, tcp_mode: connect, port: 9}\npools:\n  - {name: p, check: web, targets: [127.0.0.1]}\n")
	p := startDaemonProc(t, nil, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
	addr := p.waitLog(t, servingRE, 30*time.Second)[1]
	p.waitLog(t, loadedRE, 30*time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/v1/targets HTTP/1.1\r\n") // and never the rest
	// Time is what makes a client slow: the daemon shows nothing of a
	// half-read request to wait for.
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
	prlimit := testenv.Tool(t, "prlimit", "util-linux")
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
	p := startDaemonProc(t, []string{prlimit, "--nofile=1024:1024", "--"}, "run", "-config", file, "-listen", "127.0.0.1:0", "-syn=false")
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
		time.Sleep(100 * time.Millisecond) // the requests span two seconds of probes: the behaviour under test
	}
	if strings.Contains(p.logText(), "to=unhealthy") || strings.Contains(p.logText(), "too many open files") {
		t.Fatal("the daemon ran out of descriptors or marked the target unhealthy")
	}
}

// capLines returns, for every thread of process pid, its Cap* and
// NoNewPrivs lines from /proc, as "field value" pairs by thread.
func capLines(t *testing.T, pid int) map[string]map[string]string {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	out := map[string]map[string]string{}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && (strings.HasPrefix(k, "Cap") || k == "NoNewPrivs") {
				m[k] = strings.TrimSpace(v)
			}
		}
		out[f] = m
	}
	return out
}

// TestRunDropsCapabilities starts the daemon with a TCP check on the SYN
// prober in a namespace of its own, as root, as root with -syn=false (with a
// check in tcp_mode auto, and with one in tcp_mode syn), and as an
// unprivileged user given exactly CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN
// (setpriv): once started, every thread holds only what reloads need (the
// three while a reload may start a SYN prober or one runs, else none),
// no_new_privs is set, and a reload of a changed file still runs the SYN
// prober with eBPF.
func TestRunDropsCapabilities(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, eBPF, setpriv")
	setpriv := testenv.Tool(t, "setpriv", "util-linux")
	const (
		three = "0000008000003000" // CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_BPF (39)
		none  = "0000000000000000"
	)
	conf := func(mode string, interval int) string {
		return fmt.Sprintf("checks:\n  t: {protocol: tcp, tcp_mode: %s, port: 1, interval: %dms, timeout: 500ms}\npools:\n  - {name: lo, check: t, targets: [127.0.0.1]}\n", mode, interval)
	}
	unprivileged := []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=+net_raw,+bpf,+net_admin", "--ambient-caps=+net_raw,+bpf,+net_admin", "--bounding-set=+net_raw,+bpf,+net_admin"}
	for _, tt := range []struct {
		name   string
		mode   string
		prefix []string
		flags  []string
		want   map[string]string
		path   string
	}{
		{"root", "auto", nil, nil, map[string]string{"CapEff": three, "CapPrm": three, "CapBnd": three, "CapInh": none, "CapAmb": none, "NoNewPrivs": "1"}, "syn-bpf"},
		{"root without the SYN prober", "auto", nil, []string{"-syn=false"}, map[string]string{"CapEff": none, "CapPrm": none, "CapBnd": none, "NoNewPrivs": "1"}, "connect"},
		{"root with -syn=false and a check in tcp_mode syn", "syn", nil, []string{"-syn=false"}, map[string]string{"CapEff": three, "CapPrm": three, "CapBnd": three, "NoNewPrivs": "1"}, "syn-bpf"},
		{"unprivileged with three capabilities", "auto", unprivileged, nil, map[string]string{"CapEff": three, "CapPrm": three, "CapAmb": none, "CapInh": none, "NoNewPrivs": "1"}, "syn-bpf"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := writeConfig(t, conf(tt.mode, 200))
			for _, p := range []string{filepath.Dir(filepath.Dir(file)), filepath.Dir(file)} { // readable by nobody
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(file, 0o644); err != nil {
				t.Fatal(err)
			}
			ns := testenv.LoopbackNamespace(t)
			prefix := append([]string{"ip", "netns", "exec", ns}, tt.prefix...)
			args := append([]string{"run", "-config", file, "-listen", "127.0.0.1:0", "-watch=false"}, tt.flags...)
			p := startDaemonProc(t, prefix, args...)
			p.waitLog(t, regexp.MustCompile(`msg="capabilities dropped"`), 30*time.Second)
			if !strings.Contains(p.logText(), "tcp_path="+tt.path) {
				t.Fatalf("tcp_path is not %s", tt.path)
			}
			for task, got := range capLines(t, p.cmd.Process.Pid) {
				for k, v := range tt.want {
					if got[k] != v {
						t.Errorf("%s: %s %s, want %s", task, k, got[k], v)
					}
				}
			}
			// A changed file (an unchanged one is not even read again).
			if err := os.WriteFile(file, []byte(conf(tt.mode, 300)), 0o644); err != nil {
				t.Fatal(err)
			}
			p.signal(t, syscall.SIGHUP)
			m := p.waitLog(t, regexp.MustCompile(`msg="configuration reloaded".* tcp_path=(\S+)`), 30*time.Second)
			if m[1] != tt.path {
				t.Errorf("after a reload: tcp_path %s, want %s", m[1], tt.path)
			}
			if strings.Contains(p.logText(), "AF_PACKET") {
				t.Error("a reload fell back to AF_PACKET")
			}
			p.signal(t, syscall.SIGTERM)
			if code := p.exitCode(t, 30*time.Second); code != 0 {
				t.Fatalf("exit %d", code)
			}
		})
	}
}
