package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

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
