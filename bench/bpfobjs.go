package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The passive scenario measures the observer from the outside, as any
// tool would: package bpf keeps its maps and programs to itself, so the
// bench finds them among this process's descriptors — those that appeared
// when the observer was opened — and asks the kernel about each.

// bpfKind is what an anonymous-inode descriptor is.
type bpfKind string

const (
	bpfMapFD  bpfKind = "anon_inode:bpf-map"
	bpfProgFD bpfKind = "anon_inode:bpf-prog"
)

// bpfFDs returns this process's descriptors of kind, sorted.
func bpfFDs(kind bpfKind) ([]int, error) {
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
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && bpfKind(target) == kind {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

// newFDs returns the descriptors of after that are not in before (both
// sorted).
func newFDs(before, after []int) []int {
	var out []int
	for _, fd := range after {
		if _, found := slices.BinarySearch(before, fd); !found {
			out = append(out, fd)
		}
	}
	return out
}

// bpfMapMemory is one map and the memory the kernel charges to it.
type bpfMapMemory struct {
	Name       string
	MaxEntries uint32
	Bytes      uint64
}

// mapMemory describes the maps behind fds.
func mapMemory(fds []int) ([]bpfMapMemory, error) {
	var out []bpfMapMemory
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
		out = append(out, bpfMapMemory{Name: info.Name, MaxEntries: info.MaxEntries, Bytes: mem})
	}
	return out, nil
}

// progRuntime is the run time and count the kernel's statistics hold for
// the programs behind fds, together.
func progRuntime(fds []int) (ns, runs uint64, err error) {
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
