package probe

import (
	_ "unsafe" // for go:linkname
)

// Nanotime returns the kernel's CLOCK_MONOTONIC in nanoseconds: the clock of
// bpf_ktime_get_ns, of packet timestamps converted by the SYN prober and of
// the scheduler's real clock, so a kernel timestamp and a reading of Nanotime
// can be subtracted directly. It costs a vDSO call, no system call, and is
// safe for concurrent use.
//
// It is the Go runtime's own clock, which on Linux reads CLOCK_MONOTONIC and
// nothing else; the runtime keeps this symbol linkable on purpose
// (go.dev/issue/67401). Anchoring time.Now to one clock_gettime reading
// instead would be off by the gap between the two reads.
func Nanotime() int64 { return nanotime() }

//go:linkname nanotime runtime.nanotime
func nanotime() int64
