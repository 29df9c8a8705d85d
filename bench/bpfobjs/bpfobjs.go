// Package bpfobjs finds the BPF maps and programs this process holds and
// asks the kernel about them: the memory charged to each map, the run time
// and count of the programs. The passive scenario of `sonde bench` measures
// the observer from the outside with it, as any tool would: package bpf
// keeps its maps and programs to itself, so the bench finds them among the
// process's descriptors — those that appeared when the observer was opened.
package bpfobjs

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Kind is what an anonymous-inode descriptor is.
type Kind string

// The kinds of BPF object descriptors.
const (
	Maps     Kind = "anon_inode:bpf-map"
	Programs Kind = "anon_inode:bpf-prog"
)

// FDs returns this process's descriptors of kind, sorted.
func FDs(kind Kind) ([]int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("list own descriptors: %w", err)
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && Kind(target) == kind {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

// Added returns the descriptors of after that are not in before (both
// sorted).
func Added(before, after []int) []int {
	var out []int
	for _, fd := range after {
		if _, found := slices.BinarySearch(before, fd); !found {
			out = append(out, fd)
		}
	}
	return out
}

// Map is one map and the memory the kernel charges to it.
type Map struct {
	Name       string // the map's name as loaded
	MaxEntries uint32 // its capacity
	Bytes      uint64 // the memory the kernel charges to it (memlock)
}

// MapMemory describes the maps behind fds.
func MapMemory(fds []int) ([]Map, error) {
	var out []Map
	for _, fd := range fds {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("duplicate map descriptor %d: %w", fd, err)
		}
		m, err := ebpf.NewMapFromFD(dup)
		if err != nil {
			unix.Close(dup)
			return nil, fmt.Errorf("map descriptor %d: %w", fd, err)
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("map descriptor %d: info: %w", fd, err)
		}
		mem, ok := info.Memlock()
		if !ok {
			return nil, fmt.Errorf("map %s: the kernel reports no memlock", info.Name)
		}
		out = append(out, Map{Name: info.Name, MaxEntries: info.MaxEntries, Bytes: mem})
	}
	return out, nil
}

// ProgRuntime returns the run time (ns) and count the kernel's statistics
// hold for the programs behind fds, together. The kernel counts only while
// its BPF statistics are on (BPF_ENABLE_STATS).
func ProgRuntime(fds []int) (ns, runs uint64, err error) {
	for _, fd := range fds {
		dup, derr := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if derr != nil {
			return 0, 0, fmt.Errorf("duplicate program descriptor %d: %w", fd, derr)
		}
		p, perr := ebpf.NewProgramFromFD(dup)
		if perr != nil {
			unix.Close(dup)
			return 0, 0, fmt.Errorf("program descriptor %d: %w", fd, perr)
		}
		st, serr := p.Stats()
		p.Close()
		if serr != nil {
			return 0, 0, fmt.Errorf("program descriptor %d: statistics: %w", fd, serr)
		}
		rt, rc := st.Runtime, st.RunCount
		ns += uint64(rt.Nanoseconds())
		runs += rc
	}
	return ns, runs, nil
}
