package syn

import (
	"net"
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

// Config configures a [Prober]. Table and Sink are required.
type Config struct {
	// Table holds the targets, addressed by id: a probe.Table, or a
	// daemon's own targets. It may grow and change while the prober runs (a
	// reload or discovery adds targets): an id is probed once the table has
	// it; a probe of an id without an endpoint (a target just removed) is not
	// sent. Its targets at New, with Destinations, choose the default source
	// addresses; a target of a family without a source gets outcome error.
	Table probe.Endpoints
	// Sink receives the results.
	Sink probe.Sink
	// Lanes is the number of concurrent Launch callers (scheduler shards);
	// each lane has its own sockets and buffers. Default 1.
	Lanes int
	// Source4 and Source6 are the source addresses for IPv4 and IPv6 targets.
	// By default each is the kernel's route source towards the first of
	// Destinations, else the table's first target, of that family.
	Source4, Source6 netip.Addr
	// Destinations are addresses the prober is about to probe that the
	// table may not hold yet (a daemon starting the prober for targets it
	// adds): their routes choose the default source addresses. Optional.
	Destinations []netip.Addr
	// Interface is the interface whose ingress carries the replies. By default
	// the one holding the source address (IPv4 first).
	Interface string
	// Ports is the source-port range; default DefaultPortRange().
	Ports PortRange
	// NextHopMAC, when set, sends SYNs as Ethernet frames to this MAC address
	// through an AF_PACKET socket on Interface, skipping the kernel's routing,
	// neighbour resolution and output firewall (about 10% less CPU a probe
	// here). Every target must then be behind that one next hop: sonde does not
	// check. By default SYNs go through a raw IP socket and the kernel routes
	// each one.
	NextHopMAC net.HardwareAddr
	// Batch is the largest number of packets per system call; default 256,
	// at least 64.
	Batch int
	// Path selects how replies are caught: [probe.PathSynBPF] by the eBPF
	// program (New fails without it), [probe.PathSynPacket] from an AF_PACKET
	// socket. Empty (the default) tries eBPF and falls back to AF_PACKET.
	Path probe.TCPPath
	// Attach selects TCX or TC for the eBPF capture; default bpf.AttachAuto.
	Attach bpf.Attach
	// RingBytes is the size of the BPF ring buffer or the AF_PACKET ring;
	// default 8 MiB.
	RingBytes int
	// PollInterval is how long replies may wait in the ring before the reader
	// drains it; default 2ms. It delays results, not RTTs, which come from
	// kernel timestamps.
	PollInterval time.Duration
	// KernelRST leaves the RST that closes each target's half-open
	// connection to the host's TCP. By default, with the eBPF capture, the
	// program answers each SYN-ACK itself (the same RST, sent from the
	// interface's egress) and the SYN-ACK never reaches the stack, which
	// spares the host a socket lookup, an RST and a route lookup per open
	// port. With AF_PACKET capture the kernel always answers.
	KernelRST bool
}
