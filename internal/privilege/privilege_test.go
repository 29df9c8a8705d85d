//go:build linux

package privilege

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestSetString(t *testing.T) {
	for _, tt := range []struct {
		s    Set
		want string
	}{
		{0, "none"},
		{Of(unix.CAP_NET_RAW), "CAP_NET_RAW"},
		{Of(unix.CAP_BPF, unix.CAP_NET_RAW, unix.CAP_NET_ADMIN), "CAP_NET_ADMIN,CAP_NET_RAW,CAP_BPF"},
		{Of(63), "CAP_63"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%#x: %q, want %q", uint64(tt.s), got, tt.want)
		}
	}
}

// helperEnv makes the test binary drop to the set it names (hex) and print
// every thread's capability lines.
const helperEnv = "SONDE_TEST_DROP_KEEP"

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		keep, err := strconv.ParseUint(v, 16, 64)
		if err == nil {
			var res Result
			if res, err = Drop(Set(keep)); err == nil {
				fmt.Printf("kept %#x dropped %#x bounding %v\n", uint64(res.Kept), uint64(res.Dropped), res.Bounding)
				err = printThreads()
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if helper.dir != "" {
		_ = os.RemoveAll(helper.dir)
	}
	os.Exit(code)
}

// printThreads prints the capability and no_new_privs lines of every thread.
func printThreads() error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return err
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "Cap") || strings.HasPrefix(line, "NoNewPrivs") {
				fmt.Print(filepath.Base(filepath.Dir(f)), " ", line)
			}
		}
	}
	return nil
}

// helper is the test binary runDrop runs, built once per test process.
var helper struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// runDrop runs a test binary of this package as the helper that drops to
// keep, after the command prefix (a program and its arguments, which runs
// the helper), and returns what it printed. The helper is built again with
// CGO_ENABLED=0: Drop returns ErrCgo in a binary that links cgo, as this one
// does under -race or wherever a C compiler makes package net (which
// internal/testenv imports) use it.
func runDrop(t *testing.T, keep Set, prefix ...string) string {
	t.Helper()
	helper.once.Do(func() {
		if helper.dir, helper.err = os.MkdirTemp("", "sonde-test-privilege-"); helper.err != nil {
			return
		}
		helper.path = filepath.Join(helper.dir, "privilege.test")
		build := exec.Command("go", "test", "-c", "-o", helper.path, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			helper.err = fmt.Errorf("go test -c: %w\n%s", err, out)
		}
	})
	if helper.err != nil {
		t.Fatal(helper.err)
	}
	args := append(prefix, helper.path, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x", helperEnv, uint64(keep)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return string(out)
}

// checkThreads checks the capability lines of every thread in the helper's
// output out against want (field, with its colon, to value).
func checkThreads(t *testing.T, out string, want map[string]string) {
	t.Helper()
	threads := map[string]bool{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		threads[f[0]] = true
		if w, ok := want[f[1]]; ok && f[2] != w {
			t.Errorf("thread %s: %s %s, want %s", f[0], f[1], f[2], w)
		}
	}
	if len(threads) < 2 {
		t.Errorf("saw %d threads, want several:\n%s", len(threads), out)
	}
}

// TestDrop drops capabilities in a child process (as root) and checks every
// thread's sets: effective and permitted are what was kept, inheritable,
// ambient and the rest of the bounding set are empty, no_new_privs is set.
func TestDrop(t *testing.T) {
	testenv.RequirePrivileged(t, "capabilities to drop")
	keep := Of(unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_NET_ADMIN)
	out := runDrop(t, keep)
	checkThreads(t, out, map[string]string{
		"CapEff:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapPrm:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapBnd:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapInh:":     "0000000000000000",
		"CapAmb:":     "0000000000000000",
		"NoNewPrivs:": "1",
	})
	if !strings.Contains(out, fmt.Sprintf("kept %#x", uint64(keep))) || !strings.Contains(out, "bounding true") {
		t.Errorf("result:\n%s", out)
	}
}

// TestDropWithoutCapabilities drops in a child process that holds no
// capability, as `sonde run` by a user without any does: nothing is kept,
// the bounding set is left (changing it needs CAP_SETPCAP), and still every
// thread has empty sets and no_new_privs. setpriv clears the child's
// inheritable and ambient sets and, as root, its bounding set, so that uid
// 0 runs it without capabilities.
func TestDropWithoutCapabilities(t *testing.T) {
	keep := Of(unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_NET_ADMIN)
	prefix := []string{testenv.Tool(t, "setpriv", "util-linux"), "--inh-caps=-all", "--ambient-caps=-all"}
	if os.Geteuid() == 0 {
		prefix = append(prefix, "--bounding-set=-all")
	}
	out := runDrop(t, keep, prefix...)
	checkThreads(t, out, map[string]string{
		"CapEff:":     "0000000000000000",
		"CapPrm:":     "0000000000000000",
		"CapInh:":     "0000000000000000",
		"CapAmb:":     "0000000000000000",
		"NoNewPrivs:": "1",
	})
	if !strings.Contains(out, "kept 0x0 dropped 0x0 bounding false") {
		t.Errorf("result:\n%s", out)
	}
}
