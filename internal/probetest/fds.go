package probetest

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// WithoutDescriptors runs fn with the process's soft RLIMIT_NOFILE lowered
// to the descriptors already open, so the next socket() fails with EMFILE,
// and restores the limit afterwards. The limit is the whole process's: call
// it only from a test that does not run in parallel with others.
func WithoutDescriptors(tb testing.TB, fn func()) {
	tb.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		tb.Fatal(err)
	}
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	names, err := dir.Readdirnames(-1)
	self := dir.Fd()
	dir.Close()
	if err != nil {
		tb.Fatal(err)
	}
	open := map[uint64]bool{}
	for _, name := range names {
		if n, err := strconv.ParseUint(name, 10, 32); err == nil && uintptr(n) != self {
			open[n] = true
		}
	}
	// The kernel gives a new descriptor the lowest free number below the
	// limit: with the limit at the lowest free number, there is none.
	low := old
	low.Cur = 0
	for open[low.Cur] {
		low.Cur++
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			tb.Fatal(err)
		}
	}()
	fn()
}
