package probe

// TCPPath names how TCP checks are probed: which prober sends, and how the SYN
// prober catches its replies. These are the only names sonde uses for it: in
// `sonde version`, the daemon's startup log (tcp_path), the
// sonde_tcp_probe_path metric, and `sonde scan -path` and its summary.
type TCPPath string

// The TCP probe paths, from fastest to most available.
const (
	PathSynBPF    TCPPath = "syn-bpf"    // raw-socket SYNs, replies caught by the eBPF program (CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN)
	PathSynPacket TCPPath = "syn-packet" // raw-socket SYNs, replies read from an AF_PACKET socket (CAP_NET_RAW)
	PathConnect   TCPPath = "connect"    // a connect() per probe (no capability)
)

// TCPPaths returns every TCP path, from fastest to most available.
func TCPPaths() []TCPPath { return []TCPPath{PathSynBPF, PathSynPacket, PathConnect} }

// Describe says in a few words what the path does.
func (p TCPPath) Describe() string {
	switch p {
	case PathSynBPF:
		return "raw SYNs, replies caught by eBPF"
	case PathSynPacket:
		return "raw SYNs, replies read with AF_PACKET"
	case PathConnect:
		return "a connect() per probe"
	}
	return "unknown TCP probe path " + string(p)
}
