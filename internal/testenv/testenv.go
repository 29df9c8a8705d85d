// Package testenv is test support: what a test needs from its environment
// (root, a recent kernel, the sonde binary) and how it says so. Only tests
// import it, so the sonde binary never links package testing.
package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequirePrivileged is for tests that need root (network namespaces, raw
// sockets, eBPF): it returns at once as root; otherwise it skips tb, or fails
// it when the environment variable SONDE_REQUIRE_PRIV is 1 (as CI sets it), so
// privileged tests cannot skip silently. needs says what the test needs root
// for.
func RequirePrivileged(tb testing.TB, needs string) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("SONDE_REQUIRE_PRIV") == "1" {
		tb.Fatalf("test needs root (%s) and SONDE_REQUIRE_PRIV=1 is set", needs)
	}
	tb.Skipf("test needs root (%s); run as root, or set SONDE_REQUIRE_PRIV=1 to make this a failure", needs)
}

// Unavailable skips tb because what it needs from this machine is
// missing (err says why), or fails it when SONDE_REQUIRE_PRIV is 1, as CI
// sets it: a test CI runs cannot skip silently.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv("SONDE_REQUIRE_PRIV") == "1" {
		tb.Fatalf("%s: %v (SONDE_REQUIRE_PRIV=1 is set)", what, err)
	}
	tb.Skipf("%s: %v; set SONDE_REQUIRE_PRIV=1 to make this a failure", what, err)
}

// Tool returns the path of the program name, which the Debian package pkg
// installs (.ci/run installs it for CI). It looks in PATH, then in the sbin
// directories, which Debian leaves out of the PATH of users other than root
// but where it installs programs any user may run (haproxy). When it is
// missing the test skips, or fails when SONDE_REQUIRE_PRIV is 1, so CI
// cannot skip it silently.
func Tool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	for _, dir := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if path, e := exec.LookPath(filepath.Join(dir, name)); e == nil {
			return path
		}
	}
	if os.Getenv("SONDE_REQUIRE_PRIV") == "1" {
		tb.Fatalf("test needs %s (Debian package %s) and SONDE_REQUIRE_PRIV=1 is set: %v", name, pkg, err)
	}
	tb.Skipf("test needs %s: apt-get install %s", name, pkg)
	return ""
}

// Process is a program a test started with [Start].
type Process struct {
	mu  sync.Mutex
	out []byte
}

// Write collects the program's output.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, b...)
	return len(b), nil
}

// Output returns what the program wrote to stdout and stderr so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.out)
}

// Start starts cmd, collecting its output, and stops it by its PID when tb
// ends: SIGTERM, then SIGKILL if it has not exited after 15 s.
func Start(tb testing.TB, cmd *exec.Cmd) *Process {
	tb.Helper()
	p := &Process{}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	tb.Cleanup(func() {
		_ = unix.Kill(pid, unix.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = unix.Kill(pid, unix.SIGKILL)
			<-done
		}
	})
	return p
}

// KernelAtLeast reports whether the running kernel's release is major.minor
// or newer, so a test can tell a feature missing from an old kernel (skip)
// from one missing from a kernel that has it (fail). It fails tb when the
// release cannot be read.
func KernelAtLeast(tb testing.TB, major, minor int) bool {
	tb.Helper()
	ok, err := kernelAtLeast(major, minor)
	if err != nil {
		tb.Fatal(err)
	}
	return ok
}

func kernelAtLeast(major, minor int) (bool, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false, fmt.Errorf("uname: %w", err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return false, fmt.Errorf("kernel release %q: want MAJOR.MINOR…", rel)
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false, fmt.Errorf("kernel release %q: want MAJOR.MINOR…", rel)
	}
	return ma > major || ma == major && mi >= minor, nil
}

var sonde struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Sonde returns the path of a sonde binary built from this checkout, built
// once per test process. Tests that use it call [Main] from TestMain, which
// removes the binary when they end.
func Sonde(tb testing.TB) string {
	tb.Helper()
	sonde.once.Do(func() {
		_, file, _, _ := runtime.Caller(0) // .../internal/testenv/testenv.go
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if sonde.dir, sonde.err = os.MkdirTemp("", "sonde-test-bin-"); sonde.err != nil {
			return
		}
		// Readable by all, so tests can run it as an unprivileged user.
		if sonde.err = os.Chmod(sonde.dir, 0o755); sonde.err != nil {
			return
		}
		sonde.path = filepath.Join(sonde.dir, "sonde")
		cmd := exec.Command("go", "build", "-o", sonde.path, "./cmd/sonde")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build: it can drop capabilities
		if out, err := cmd.CombinedOutput(); err != nil {
			sonde.err = fmt.Errorf("go build ./cmd/sonde: %w\n%s", err, out)
		}
	})
	if sonde.err != nil {
		tb.Fatal(sonde.err)
	}
	return sonde.path
}

// Main runs a package's tests and then removes what [Sonde] built. Use it as
// func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if sonde.dir != "" {
		_ = os.RemoveAll(sonde.dir)
	}
	os.Exit(code)
}

// LoopbackNamespace creates a network namespace with only lo up, for a test
// that must not touch the host's interfaces, and deletes it when tb ends. It
// returns the namespace's name.
func LoopbackNamespace(tb testing.TB) string {
	tb.Helper()
	ns := fmt.Sprintf("sonde-test-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		tb.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		tb.Fatalf("ip -n %s link set lo up: %v: %s", ns, err, out)
	}
	return ns
}

// IsolatedNetwork is for a test whose programs must send nothing beyond the
// machine (a DNS query, say) and need nothing but loopback: it returns a
// function that makes commands running name with args in a network
// namespace with only lo up. As root that is one namespace made by
// [LoopbackNamespace]; without root each command runs in a new user and
// network namespace of the test's user (unshare --user --map-root-user
// --net), where the kernel lets users make them. Where it does not, the
// test skips, or fails when SONDE_REQUIRE_PRIV is 1, as [RequirePrivileged]
// says; needs says what the test needs the namespace for.
func IsolatedNetwork(tb testing.TB, needs string) func(name string, args ...string) *exec.Cmd {
	tb.Helper()
	if os.Geteuid() == 0 {
		ns := LoopbackNamespace(tb)
		return func(name string, args ...string) *exec.Cmd {
			return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
		}
	}
	unshare, ip := Tool(tb, "unshare", "util-linux"), Tool(tb, "ip", "iproute2")
	cmd := func(name string, args ...string) *exec.Cmd {
		// sh -c SCRIPT ip NAME ARGS...: $0 is ip, "$@" the command.
		return exec.Command(unshare, append([]string{"--user", "--map-root-user", "--net",
			"sh", "-c", `"$0" link set lo up && exec "$@"`, ip, name}, args...)...)
	}
	if out, err := cmd("true").CombinedOutput(); err != nil {
		RequirePrivileged(tb, fmt.Sprintf("%s; users may not make namespaces here: %v: %s", needs, err, strings.TrimSpace(string(out))))
	}
	return cmd
}

var nsSeq atomic.Int64

// WaitLimit is how long [Eventually] waits before it fails a test: long
// enough for a loaded CI machine, where the awaited event takes
// milliseconds when all is well.
const WaitLimit = 60 * time.Second

// Eventually waits until poll reports done and returns the value it observed
// then. poll is called at once and then again after pauses that grow from a
// millisecond to a tenth of a second, so a cheap condition is seen soon and
// an expensive one (an HTTP request) does not load the machine. When poll has
// not reported done after [WaitLimit], or when the test's own deadline
// (go test -timeout) is near, Eventually fails tb with what, which says what
// was awaited, and the last value poll returned. poll may itself fail tb.
// Call it from the test's goroutine, as tb.Fatal requires.
func Eventually[T any](tb testing.TB, what string, poll func() (T, bool)) T {
	tb.Helper()
	return eventually(tb, what, WaitLimit, time.Millisecond, 100*time.Millisecond, poll)
}

// EventuallyWithin is [Eventually] with a limit of its own instead of
// [WaitLimit], for a test that asserts how soon something happens (a
// change shown within its detection window).
func EventuallyWithin[T any](tb testing.TB, what string, limit time.Duration, poll func() (T, bool)) T {
	tb.Helper()
	return eventually(tb, what, limit, time.Millisecond, 100*time.Millisecond, poll)
}

// EventuallyEvery is [Eventually] with the same pause between every two
// polls, for a benchmark that times the wait: the growing pause of
// Eventually would add up to a tenth of a second to what it measures.
func EventuallyEvery[T any](tb testing.TB, what string, pause time.Duration, poll func() (T, bool)) T {
	tb.Helper()
	return eventually(tb, what, WaitLimit, pause, pause, poll)
}

func eventually[T any](tb testing.TB, what string, wait, pause, maxPause time.Duration, poll func() (T, bool)) T {
	tb.Helper()
	start := time.Now()
	limit := start.Add(wait)
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		// Leave the test time to report rather than be killed by -timeout.
		if end, ok := d.Deadline(); ok && end.Add(-5*time.Second).Before(limit) {
			limit = end.Add(-5 * time.Second)
		}
	}
	for {
		v, done := poll()
		if done {
			return v
		}
		if !time.Now().Before(limit) {
			tb.Fatalf("waited %v for %s; last observed: %+v", time.Since(start).Round(time.Millisecond), what, v)
			return v
		}
		time.Sleep(min(pause, time.Until(limit)))
		pause = min(2*pause, maxPause)
	}
}

// Hang bounds the wait for a call that must not block: reaching it is the
// failure a test looks for, never its normal path.
const Hang = 10 * time.Second

// ReturnsWithin runs fn and fails tb when it has not returned after Hang
// (fn is left running).
func ReturnsWithin(tb testing.TB, what string, fn func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(Hang):
		tb.Fatalf("%s still blocks after %v", what, Hang)
	}
}

// SyncBuffer is a log destination safe for concurrent writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// AcceptAndClose accepts every connection to ln and closes it at once,
// until ln is closed: a listener whose connects succeed, for tests that
// count connections.
func AcceptAndClose(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}
