// Package netns runs code and commands inside a named network namespace
// (one under /run/netns, as `ip netns add` makes).
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

var errEmptyNamespace = errors.New("empty namespace name")

// Do runs fn with the calling goroutine locked to an OS thread that
// has joined network namespace ns (a name under /run/netns), then moves the
// thread back. Sockets created in fn belong to ns for their whole life;
// goroutines started by fn do not run in ns. When the thread cannot be moved
// back it stays locked, so the runtime retires it with the goroutine instead of
// reusing a thread in the wrong namespace.
func Do(ns string, fn func() error) error {
	if ns == "" {
		return errEmptyNamespace
	}
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("open namespace: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", ns, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with the goroutine.
		return errors.Join(fnErr, fmt.Errorf("leave namespace %s: %w", ns, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Command returns a command that runs name with args inside network namespace
// ns through `ip netns exec`. The caller sets its I/O and starts it.
func Command(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}
