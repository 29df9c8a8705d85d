// Package syn is sonde's TCP SYN prober: a raw-socket sender and a reply
// reader that together probe very many endpoints without a connect() and a
// socket per probe (docs/semantics.md T1–T4).
//
// # Sending
//
// A SYN is built once per source address with gopacket ([Prober] keeps it as a
// template) and patched per probe: destination address and port, source port,
// sequence number and the IP and TCP checksums, computed incrementally from
// sums over the fixed bytes. Batches go to the kernel with one sendmmsg(2) on
// a raw IP socket (IPPROTO_RAW), up to [Config.Batch] packets a call, so the
// kernel routes each packet and resolves its next hop; with
// [Config.NextHopMAC] they go as Ethernet frames through an AF_PACKET socket
// instead. Each lane (scheduler shard) owns its sockets and buffers, so the
// hot path takes no lock and allocates nothing.
//
// # Cookies and per-target state
//
// The sequence number is id XOR SipHash-2-4(key, src‖dst‖sport‖dport) with a
// random 128-bit key per prober, so a reply gives back the target id without a
// table of flows; see cookieKey. Per target the prober keeps only the send
// time of its last probe (CLOCK_MONOTONIC ns, stamped per batch just before
// the system call), the generation of that probe and whether it was answered:
// 16 bytes. The source port is [PortRange.Port](id, gen), so a late answer to
// an older probe of the same target arrives on the wrong port and is dropped
// as stale. RTT is the reply's kernel timestamp minus the send time, both
// CLOCK_MONOTONIC. A probe nobody answers produces no Result: the scheduler
// times it out itself. The targets' table and this state grow while the
// prober runs (a daemon's reload adds targets, and gives the ids of removed
// ones to new ones): a reply is checked against the endpoint its id has now,
// so one to an id's former target is dropped as invalid.
//
// # Capturing replies
//
// With CAP_BPF and CAP_NET_ADMIN the replies are caught by the eBPF program in
// package bpf on the probing interface's ingress (TCX, or TC on kernels before
// 6.6) and read from a BPF ring buffer in bulk every [Config.PollInterval]
// (or sooner, when the ring fills past half its size: see wakeupBytes).
// Without them the prober falls back to an AF_PACKET socket with a classic BPF
// filter and a TPACKET_V3 ring, read block by block. The path in use,
// [probe.PathSynBPF] or [probe.PathSynPacket], is reported by [Prober.Path]
// and [Counters.Path]. Without
// CAP_NET_RAW, [New] returns [ErrNoRawSocket] and callers use the connect()
// prober.
//
// Every SYN-ACK is answered with an RST, which closes the half-open
// connection on the target (T3): on the eBPF path by the capture program
// itself, which turns the SYN-ACK into that RST in place and sends it back
// out, so the host's TCP never sees it (about a fifth of a sweep's CPU
// spared); on the AF_PACKET path, and with [Config.KernelRST], by the
// kernel.
//
// # Users
//
// The daemon's scheduler drives a [Prober] as a [probe.Launcher], one lane
// per shard. [Sweep] probes every endpoint of a table once, from paced lanes,
// and keeps one outcome each: the engine of `sonde scan`. [OneShot] probes
// single endpoints on demand, for `sonde probe syn://`.
//
// # Files
//
//	ports.go          source-port range
//	config.go         Config
//	counters.go       Counters
//	targets.go        per-target probe state, in blocks that grow with the table
//	prober.go         Prober: construction, accessors, Close
//	route.go          default source addresses and the capture interface
//	packet.go         SYN templates; cookie.go the sequence-number cookie
//	send.go           batch writers: raw IP socket, AF_PACKET frames
//	launch.go         lanes, Launch and flush
//	capture.go        capture choice and the reply reader
//	capture_bpf.go    eBPF ring-buffer capture
//	capture_packet.go AF_PACKET capture; filter.go its classic BPF filter
//	decode.go         reply decoding; match.go reply matching
//	pacer.go          rate pacing; sweep.go Sweep; oneshot.go OneShot
package syn
