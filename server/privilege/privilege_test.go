//go:build linux

package privilege

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/bench/testenv"
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
	os.Exit(m.Run())
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

// TestDrop drops capabilities in a child process (as root) and checks every
// thread's sets: effective and permitted are what was kept, inheritable,
// ambient and the rest of the bounding set are empty, no_new_privs is set.
func TestDrop(t *testing.T) {
	testenv.RequirePrivileged(t, "capabilities to drop")
	keep := Of(unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_NET_ADMIN)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x", helperEnv, uint64(keep)))
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), ErrCgo.Error()) {
		t.Skip("this test binary links cgo (as -race does); the run without -race tests Drop")
	}
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	want := map[string]string{
		"CapEff:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapPrm:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapBnd:":     fmt.Sprintf("%016x", uint64(keep)),
		"CapInh:":     "0000000000000000",
		"CapAmb:":     "0000000000000000",
		"NoNewPrivs:": "1",
	}
	threads := map[string]bool{}
	for line := range strings.Lines(string(out)) {
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
	if !strings.Contains(string(out), fmt.Sprintf("kept %#x", uint64(keep))) || !strings.Contains(string(out), "bounding true") {
		t.Errorf("result:\n%s", out)
	}
}
