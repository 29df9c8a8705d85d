//go:build linux

// Package privilege drops the Linux capabilities a running daemon no longer
// needs and sets no_new_privs, on every thread of the process.
//
// Capabilities belong to threads, and a Go program has many; the change is
// made on all of them with syscall.AllThreadsSyscall, which is not available
// in a binary linked with cgo: build sonde with CGO_ENABLED=0 (make build
// does), or [Drop] returns [ErrCgo] and changes nothing.
package privilege

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set is a set of capabilities, bit n for capability number n.
type Set uint64

// Of returns the set of the given capabilities (unix.CAP_* numbers).
func Of(caps ...int) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << c
	}
	return s
}

// Has reports whether capability c is in s.
func (s Set) Has(c int) bool { return s&(1<<c) != 0 }

// capNames are the capabilities' names, by number (linux/capability.h).
var capNames = [...]string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// String lists the capabilities' names, comma-separated, or "none".
func (s Set) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for x := s; x != 0; x &= x - 1 {
		c := bits.TrailingZeros64(uint64(x))
		if c < len(capNames) {
			names = append(names, capNames[c])
		} else {
			names = append(names, "CAP_"+strconv.Itoa(c))
		}
	}
	return strings.Join(names, ",")
}

// Current returns the calling thread's effective and permitted sets.
func Current() (effective, permitted Set, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, 0, fmt.Errorf("capget: %w", err)
	}
	effective = Set(data[0].Effective) | Set(data[1].Effective)<<32
	permitted = Set(data[0].Permitted) | Set(data[1].Permitted)<<32
	return effective, permitted, nil
}

// ErrCgo is returned by [Drop] in a binary linked with cgo, whose threads
// the Go runtime cannot all reach.
var ErrCgo = errors.New("a binary linked with cgo cannot change the capabilities of all its threads; build with CGO_ENABLED=0")

// Result says what [Drop] did.
type Result struct {
	Kept     Set  // capabilities still permitted and effective
	Dropped  Set  // capabilities that were permitted before and are no more
	Bounding bool // the others were also dropped from the bounding set (needs CAP_SETPCAP)
}

// Drop keeps, of the capabilities in keep, those the process has, permitted
// and effective; drops every other one, from the bounding set too when the
// process may (it has CAP_SETPCAP); clears the inheritable and ambient
// sets; and sets no_new_privs, so no exec can regain any. It acts on every
// thread of the process. Nothing sonde runs after it needs more than keep.
func Drop(keep Set) (Result, error) {
	eff, prm, err := Current()
	if err != nil {
		return Result{}, err
	}
	res := Result{Kept: keep & prm, Dropped: prm &^ keep}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); errno != 0 {
		if errno == syscall.ENOTSUP {
			return Result{}, ErrCgo
		}
		return Result{}, fmt.Errorf("clear ambient capabilities: %w", errno)
	}
	if eff.Has(unix.CAP_SETPCAP) {
		for c := 0; c <= lastCap(); c++ {
			if keep.Has(c) {
				continue
			}
			if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); errno != 0 && errno != syscall.EINVAL {
				return Result{}, fmt.Errorf("drop %s from the bounding set: %w", Set(1<<c), errno)
			}
		}
		res.Bounding = true
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(res.Kept), Permitted: uint32(res.Kept)},
		{Effective: uint32(res.Kept >> 32), Permitted: uint32(res.Kept >> 32)},
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return Result{}, fmt.Errorf("capset: %w", errno)
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return Result{}, fmt.Errorf("set no_new_privs: %w", errno)
	}
	return res, nil
}

// lastCap returns the highest capability number the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}
