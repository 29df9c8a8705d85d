package bench

import (
	"net/netip"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/probe"
)

// The fleet that [Run] builds answers for BenchPrefix, a /15 of the range
// reserved for benchmarks (RFC 2544): 131,072 addresses. Its first /16 holds
// the static subsets (dropped, rejected, unreachable), so sweeps meet every
// outcome; its second /16 is clean, for scenarios that need every target
// healthy until they break some on purpose.
var BenchPrefix = netip.MustParsePrefix("198.18.0.0/15")

// Ports of the bench fleet.
const (
	// ScanPort has a listener that accepts and closes connections: the
	// sweep and the connect() probes aim at it.
	ScanPort = 80
	// HTTPPort has an HTTP server answering 200 "ok" without keep-alive.
	HTTPPort = 8080
	// HTTPSPort has the same server behind TLS (a self-signed certificate).
	HTTPSPort = 8443
	// FirstSteadyPort is the first of the listening ports that the steady
	// scenario spreads its (address, port) targets over, one port per
	// BenchPrefix worth of targets.
	FirstSteadyPort = 9000
)

// Static subsets of the bench fleet's first /16, by offset i from the start
// of BenchPrefix: they hold on every port.
var (
	dropBlock    = netip.MustParsePrefix("198.18.100.0/24") // silently dropped: timeout
	rejectBlock  = netip.MustParsePrefix("198.18.101.0/24") // TCP RST from a firewall: refused
	unreachBlock = netip.MustParsePrefix("198.18.102.0/28") // ICMP host unreachable
)

const (
	scatterLimit = 1 << 16 // scattered subsets only in the first /16
	dropMod      = 251     // i%dropMod == dropRem is dropped
	dropRem      = 7
	rejectMod    = 241 // i%rejectMod == rejectRem is rejected
	rejectRem    = 9
)

// offset returns a's offset from the start of BenchPrefix, or -1 when a is
// outside it.
func offset(a netip.Addr) int {
	if !BenchPrefix.Contains(a) {
		return -1
	}
	b, base := a.As4(), BenchPrefix.Addr().As4()
	return int(b[1]-base[1])<<16 | int(b[2])<<8 | int(b[3])
}

// addrAt returns the address at offset i of BenchPrefix.
func addrAt(i int) netip.Addr {
	base := BenchPrefix.Addr().As4()
	return netip.AddrFrom4([4]byte{base[0], base[1] + byte(i>>16), byte(i >> 8), byte(i)})
}

// Truth returns the outcome a SYN or connect() probe of address a on a
// listening port of the bench fleet must have, when no scenario has changed
// the fleet: Timeout for dropped addresses, Refused for rejected ones,
// Unreachable for those answered with ICMP, Success for the rest. Addresses
// outside BenchPrefix get Timeout: the fleet does not answer them.
func Truth(a netip.Addr) probe.Outcome {
	i := offset(a)
	switch {
	case i < 0:
		return probe.Timeout
	case dropBlock.Contains(a) || i < scatterLimit && i%dropMod == dropRem:
		return probe.Timeout // the drop rule comes first in the fleet's chain
	case rejectBlock.Contains(a) || i < scatterLimit && i%rejectMod == rejectRem:
		return probe.Refused
	case unreachBlock.Contains(a):
		return probe.Unreachable
	}
	return probe.Success
}

// benchFleetConfig returns the configuration of the bench fleet with
// steadyPorts listening ports from FirstSteadyPort.
func benchFleetConfig(steadyPorts int) fleet.Config {
	cfg := fleet.Config{
		Prefix:      BenchPrefix,
		Listen:      []uint16{ScanPort},
		HTTP:        []uint16{HTTPPort},
		HTTPS:       []uint16{HTTPSPort},
		Drop:        []netip.Prefix{dropBlock},
		Reject:      []netip.Prefix{rejectBlock},
		Unreachable: []netip.Prefix{unreachBlock},
	}
	for p := range steadyPorts {
		cfg.Listen = append(cfg.Listen, uint16(FirstSteadyPort+p))
	}
	// The fleet's drop rule comes before its reject rule, as in Truth.
	for i := range scatterLimit {
		a := addrAt(i)
		switch {
		case dropBlock.Contains(a):
		case i%dropMod == dropRem:
			cfg.Drop = append(cfg.Drop, netip.PrefixFrom(a, 32))
		case rejectBlock.Contains(a):
		case i%rejectMod == rejectRem:
			cfg.Reject = append(cfg.Reject, netip.PrefixFrom(a, 32))
		}
	}
	return cfg
}

// blocks returns the fewest aligned CIDR blocks that cover the addresses at
// offsets [first, first+n) of BenchPrefix.
func blocks(first, n int) []netip.Prefix {
	var out []netip.Prefix
	for n > 0 {
		// The largest aligned block that starts at first and fits in n.
		size := 1
		for first%(size*2) == 0 && size*2 <= n {
			size *= 2
		}
		bits := 32
		for s := size; s > 1; s >>= 1 {
			bits--
		}
		out = append(out, netip.PrefixFrom(addrAt(first), bits))
		first += size
		n -= size
	}
	return out
}
