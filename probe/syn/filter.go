package syn

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// replyFilter assembles the classic BPF filter of the AF_PACKET path. Offsets
// are from the IP header (SOCK_DGRAM). It keeps, up to snap bytes of each:
//   - IPv4 or IPv6 (no extension headers) TCP whose destination port is in
//     ports and whose flags are RST, or SYN and ACK;
//   - ICMP destination unreachable (type 3) and ICMPv6 destination
//     unreachable (type 1).
//
// Addresses and the ports quoted by ICMP are checked in user space, where the
// cookie check rejects everything that is not an answer to our probes.
func replyFilter(ports PortRange, snap uint32) ([]unix.SockFilter, error) {
	const (
		ldb  = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldh  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldbx = unix.BPF_LD | unix.BPF_B | unix.BPF_IND
		ldhx = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		msh  = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		and  = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jgt  = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	lo, hi := uint32(ports.First), uint32(ports.Last)
	var a cbpfAsm
	a.op(ldb, 0)
	a.op(and, 0xf0)
	a.jmp(jeq, 0x40, "v4", "")
	a.jmp(jeq, 0x60, "v6", "drop")

	a.label("v4")
	a.op(ldb, 9)
	a.jmp(jeq, 6, "tcp4", "")
	a.jmp(jeq, 1, "icmp4", "drop")
	a.label("tcp4")
	a.op(ldh, 6)
	a.jmp(jset, 0x1fff, "drop", "") // not the first fragment
	a.op(msh, 0)                    // X = IPv4 header length
	a.op(ldhx, 2)                   // destination port
	a.jmp(jge, lo, "", "drop")
	a.jmp(jgt, hi, "drop", "")
	a.op(ldbx, 13) // flags
	a.jmp(jset, tcpFlagRST, "accept", "")
	a.op(and, tcpFlagSYN|tcpFlagACK)
	a.jmp(jeq, tcpFlagSYN|tcpFlagACK, "accept", "drop")
	a.label("icmp4")
	a.op(msh, 0)
	a.op(ldbx, 0) // ICMP type
	a.jmp(jeq, 3, "accept", "drop")

	a.label("v6")
	a.op(ldb, 6) // next header
	a.jmp(jeq, 6, "tcp6", "")
	a.jmp(jeq, 58, "icmp6", "drop")
	a.label("tcp6")
	a.op(ldh, ip6HdrLen+2)
	a.jmp(jge, lo, "", "drop")
	a.jmp(jgt, hi, "drop", "")
	a.op(ldb, ip6HdrLen+13)
	a.jmp(jset, tcpFlagRST, "accept", "")
	a.op(and, tcpFlagSYN|tcpFlagACK)
	a.jmp(jeq, tcpFlagSYN|tcpFlagACK, "accept", "drop")
	a.label("icmp6")
	a.op(ldb, ip6HdrLen)
	a.jmp(jeq, 1, "accept", "drop")

	a.label("accept")
	a.op(ret, snap)
	a.label("drop")
	a.op(ret, 0)
	return a.assemble()
}

// cbpfAsm assembles classic BPF with symbolic jump targets ("" = next).
type cbpfAsm struct {
	ins    []unix.SockFilter
	jt, jf []string
	labels map[string]int
}

func (a *cbpfAsm) op(code uint16, k uint32) { a.jmp(code, k, "", "") }

func (a *cbpfAsm) jmp(code uint16, k uint32, jt, jf string) {
	a.ins = append(a.ins, unix.SockFilter{Code: code, K: k})
	a.jt = append(a.jt, jt)
	a.jf = append(a.jf, jf)
}

func (a *cbpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *cbpfAsm) assemble() ([]unix.SockFilter, error) {
	rel := func(i int, name string) (uint8, error) {
		if name == "" {
			return 0, nil
		}
		t, ok := a.labels[name]
		if !ok || t <= i || t-i-1 > 255 {
			return 0, fmt.Errorf("cbpf: bad jump from %d to %q", i, name)
		}
		return uint8(t - i - 1), nil
	}
	for i := range a.ins {
		var err1, err2 error
		a.ins[i].Jt, err1 = rel(i, a.jt[i])
		a.ins[i].Jf, err2 = rel(i, a.jf[i])
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
	}
	return a.ins, nil
}
