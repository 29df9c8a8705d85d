package syn_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
	"golang.org/x/sys/unix"
)

// tcpCounter reads one counter of the Tcp line of /proc/net/snmp in ns.
func tcpCounter(t *testing.T, ns, name string) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			if h == name && i < len(f) {
				n, _ := strconv.ParseUint(f[i], 10, 64)
				return n
			}
		}
	}
	t.Fatalf("no Tcp counter %s in %s's /proc/net/snmp", name, ns)
	return 0
}

// halfOpen counts the fleet's connections in SYN-RECV.
func halfOpen(t *testing.T, ns string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Htn", "state", "syn-recv").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(out), "\n")
}

// rstWatcher reads the frames that reach the fleet's side of the veth and
// checks every TCP RST from the prober: no options, no ACK and, with sums,
// its IP and TCP checksums. (The fleet's kernel would not tell a bad TCP
// checksum: a veth hands the packet over as already checked. The kernel's
// own RSTs cross it with the TCP checksum left to offload, a partial sum,
// so their checksums are not checked.)
type rstWatcher struct {
	fd   int
	sums bool
	seen int
	bad  []string
}

func watchRSTs(t *testing.T, f *fleet.Fleet, sums bool) *rstWatcher {
	t.Helper()
	w := &rstWatcher{sums: sums}
	err := netns.Do(f.FleetNS, func() error {
		ifi, err := net.InterfaceByName(f.FleetLink)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		w.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(w.fd) })
	return w
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// drain reads every frame waiting and checks the RSTs among them.
func (w *rstWatcher) drain() {
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(w.fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			return
		}
		pkt := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || !tcp.RST {
			continue
		}
		w.seen++
		if tcp.ACK || len(tcp.Options) > 0 || len(tcp.Payload) > 0 {
			w.bad = append(w.bad, fmt.Sprintf("RST with ACK %v, %d options, %d bytes", tcp.ACK, len(tcp.Options), len(tcp.Payload)))
		}
		if !w.sums {
			continue
		}
		want := tcp.Checksum
		var nl gopacket.NetworkLayer
		if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			nl = ip4
			hdr := slices.Clone(ip4.Contents)
			hdr[10], hdr[11] = 0, 0
			if sum := ipChecksum(hdr); sum != ip4.Checksum {
				w.bad = append(w.bad, fmt.Sprintf("IPv4 checksum %#x, want %#x", ip4.Checksum, sum))
			}
		} else if ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			nl = ip6
		}
		if err := tcp.SetNetworkLayerForChecksum(nl); err != nil {
			w.bad = append(w.bad, err.Error())
			continue
		}
		sb := gopacket.NewSerializeBuffer()
		if err := tcp.SerializeTo(sb, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
			w.bad = append(w.bad, err.Error())
			continue
		}
		if tcp.Checksum != want {
			w.bad = append(w.bad, fmt.Sprintf("TCP checksum %#x, want %#x", want, tcp.Checksum))
		}
	}
}

func ipChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TestAnswerInPlace checks the eBPF program's RSTs over IPv4 and IPv6: each
// SYN-ACK is answered by the program (the prober host's TCP sends no RST),
// and the RST closes the target's half-open connection as the kernel's
// would (none stays in SYN-RECV). With KernelRST, the kernel answers.
func TestAnswerInPlace(t *testing.T) {
	testenv.RequirePrivileged(t, "network namespaces, raw sockets, BPF")
	f, err := fleet.New(fleet.Config{Prefix: netip.MustParsePrefix("198.18.0.0/24"),
		Prefix6: fleet.DefaultPrefix6, Listen: []uint16{80}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, kernel := range []bool{false, true} {
		t.Run(map[bool]string{false: "ebpf", true: "kernel"}[kernel], func(t *testing.T) {
			tab := probe.NewTable(64)
			for i := range 32 {
				tab.Add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 80))
				a6 := fleet.DefaultPrefix6.Addr().As16()
				a6[15] = byte(i + 1)
				tab.Add(netip.AddrPortFrom(netip.AddrFrom16(a6), 80))
			}
			s := &probetest.Sink{}
			var p *syn.Prober
			if err := netns.Do(f.ProberNS, func() error {
				var err error
				p, err = syn.New(syn.Config{Table: tab, Sink: s, Path: probe.PathSynBPF, KernelRST: kernel})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			w := watchRSTs(t, f, !kernel)
			rsts := tcpCounter(t, f.ProberNS, "OutRsts")
			reqs := make([]probe.Request, tab.Len())
			for i := range reqs {
				reqs[i] = probe.Request{ID: uint32(i), Gen: 1}
			}
			p.Launch(0, reqs)
			testenv.Eventually(t, fmt.Sprintf("%d results", tab.Len()), func() (int, bool) { n := s.Count(); return n, n >= tab.Len() })
			for id, r := range s.ByID() {
				if r.Outcome != probe.Success {
					t.Errorf("%v: %v, want success", tab.Endpoint(id), r.Outcome)
				}
			}
			testenv.Eventually(t, "no half-open connection in the fleet", func() (int, bool) { n := halfOpen(t, f.FleetNS); return n, n == 0 })
			w.drain()
			if w.seen < tab.Len() || len(w.bad) > 0 {
				t.Errorf("%d RSTs reached the fleet for %d SYN-ACKs; wrong: %v", w.seen, tab.Len(), w.bad)
			}
			c := p.Counters()
			sent := tcpCounter(t, f.ProberNS, "OutRsts") - rsts
			switch {
			case !kernel && (c.Answered != c.SynAck || sent != 0):
				t.Errorf("eBPF answers: %d of %d SYN-ACKs answered by the program, %d RSTs by the kernel; want all, none", c.Answered, c.SynAck, sent)
			case kernel && (c.Answered != 0 || sent < c.SynAck):
				t.Errorf("kernel answers: %d answered by the program, %d RSTs by the kernel for %d SYN-ACKs", c.Answered, sent, c.SynAck)
			}
		})
	}
}
