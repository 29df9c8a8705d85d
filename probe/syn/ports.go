package syn

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of TCP source ports owned by the prober.
type PortRange struct {
	First, Last uint16 // the first and last port, inclusive
}

// Len returns the number of ports in the range.
func (r PortRange) Len() int { return int(r.Last) - int(r.First) + 1 }

// Port returns the source port of probe generation gen of target id: a hash
// of id spreads targets over the range and each generation moves one port on,
// so consecutive probes of a target never share a port (until the range wraps).
func (r PortRange) Port(id, gen uint32) uint16 {
	h := uint64(id * 0x9e3779b1) // Fibonacci hashing
	return r.First + uint16((h+uint64(gen))%uint64(r.Len()))
}

// String formats the range as "first-last".
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// DefaultPortRange returns the source ports used when none are configured:
// 61000–65535, above the kernel's default ephemeral range 32768–60999, so
// replies never collide with the machine's own connections. When
// /proc/sys/net/ipv4/ip_local_port_range reaches above 60999, the same number
// of ports just below the ephemeral range is used instead (or an error is
// returned when there is no room).
func DefaultPortRange() (PortRange, error) {
	r := PortRange{61000, 65535}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return r, nil // no procfs: assume the kernel's default
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return r, nil
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi < int(r.First) {
		return r, nil
	}
	if n := r.Len(); lo-n >= 1024 {
		return PortRange{uint16(lo - n), uint16(lo - 1)}, nil
	}
	return PortRange{}, fmt.Errorf("the ephemeral port range %d-%d leaves no room for a source-port range: configure one", lo, hi)
}
