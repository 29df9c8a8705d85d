package syn

import (
	"errors"
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchWriter sends a batch of complete IP packets (header first) with as few
// system calls as it can. It returns how many packets, from the start of the
// batch, were handed to the kernel, and the error that stopped it early: the
// packet at that index failed. It is the test seam of the sender: unit tests
// give the prober a writer that keeps the packets instead.
type batchWriter interface {
	// frameHeader returns the link-layer header the packets need in front of
	// their IP header (nil for an IP-level socket); the lane writes it once
	// into every slot and hands the writer the frames.
	frameHeader() []byte
	writeBatch(pkts [][]byte) (int, error)
	close() error
}

// rawWriter sends through a raw IP socket (IPPROTO_RAW, which implies
// IP_HDRINCL/IPV6_HDRINCL) with sendmmsg(2): one system call a batch, the
// destination of each message read from its packet. The kernel routes every
// packet, resolves the next hop and passes it through the output firewall,
// so it works on any interface and route; non-blocking (MSG_DONTWAIT).
type rawWriter struct {
	fd   int
	v6   bool
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
	sa4  []unix.RawSockaddrInet4
	sa6  []unix.RawSockaddrInet6
}

// ErrNoRawSocket is returned by [New] when the process may not open raw
// sockets (it lacks CAP_NET_RAW). Callers fall back to the connect() prober.
var ErrNoRawSocket = errors.New("raw sockets need CAP_NET_RAW")

// openRaw opens a raw sending socket for IPv4 or IPv6 with room for batches of
// up to n packets.
func openRaw(v6 bool, n int) (*rawWriter, error) {
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %w", ErrNoRawSocket, err)
		}
		return nil, os.NewSyscallError("socket", err)
	}
	// A deep send buffer lets a burst of batches through without EAGAIN;
	// SO_SNDBUFFORCE ignores wmem_max but needs CAP_NET_ADMIN, so fall back.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	w := &rawWriter{fd: fd, v6: v6, msgs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	if v6 {
		w.sa6 = make([]unix.RawSockaddrInet6, n)
	} else {
		w.sa4 = make([]unix.RawSockaddrInet4, n)
	}
	for i := range w.msgs {
		h := &w.msgs[i].Hdr
		h.Iov = &w.iovs[i]
		h.Iovlen = 1
		if v6 {
			w.sa6[i].Family = unix.AF_INET6
			h.Name = (*byte)(unsafe.Pointer(&w.sa6[i]))
			h.Namelen = unix.SizeofSockaddrInet6
		} else {
			w.sa4[i].Family = unix.AF_INET
			h.Name = (*byte)(unsafe.Pointer(&w.sa4[i]))
			h.Namelen = unix.SizeofSockaddrInet4
		}
	}
	return w, nil
}

func (w *rawWriter) writeBatch(pkts [][]byte) (int, error) {
	n := min(len(pkts), len(w.msgs))
	for i, p := range pkts[:n] {
		w.iovs[i].Base = &p[0]
		w.iovs[i].SetLen(len(p))
		if w.v6 {
			copy(w.sa6[i].Addr[:], p[24:40])
		} else {
			copy(w.sa4[i].Addr[:], p[16:20])
		}
	}
	return sendmmsg(w.fd, w.msgs[:n])
}

func (w *rawWriter) frameHeader() []byte { return nil }

func (w *rawWriter) close() error { return unix.Close(w.fd) }

// packetWriter sends complete Ethernet frames through an AF_PACKET socket bound
// to one interface, with sendmmsg(2) and PACKET_QDISC_BYPASS. It skips the
// kernel's routing, neighbour resolution and output firewall hooks, which makes
// it cheaper per packet than rawWriter, but it is only correct when every
// packet goes to the same next hop, whose MAC address is in the frame header.
type packetWriter struct {
	fd     int
	header []byte // Ethernet header prepended to every packet
	msgs   []unix.Mmsghdr
	iovs   []unix.Iovec
}

// openPacketWriter opens an AF_PACKET sender on ifindex for frames from src to
// dst carrying ethertype, with room for batches of up to n packets.
func openPacketWriter(ifindex int, src, dst [6]byte, ethertype uint16, n int) (*packetWriter, error) {
	// Protocol 0: the socket receives nothing.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %w", ErrNoRawSocket, err)
		}
		return nil, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1) // kernel 3.14
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	w := &packetWriter{fd: fd, msgs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	w.header = append(append(append(w.header, dst[:]...), src[:]...), byte(ethertype>>8), byte(ethertype))
	for i := range w.msgs {
		w.msgs[i].Hdr.Iov = &w.iovs[i]
		w.msgs[i].Hdr.Iovlen = 1
	}
	return w, nil
}

func (w *packetWriter) frameHeader() []byte { return w.header }

func (w *packetWriter) writeBatch(pkts [][]byte) (int, error) {
	n := min(len(pkts), len(w.msgs))
	for i, p := range pkts[:n] {
		w.iovs[i].Base = &p[0]
		w.iovs[i].SetLen(len(p))
	}
	return sendmmsg(w.fd, w.msgs[:n])
}

func (w *packetWriter) close() error { return unix.Close(w.fd) }

// sendmmsg sends msgs with as many sendmmsg(2) calls as it takes, without
// blocking. It returns how many went out and the error that stopped it.
//
// It uses RawSyscall6, which does not tell the Go scheduler about the system
// call. A batch keeps the kernel busy for a millisecond or so (on a veth the
// receiving side's TCP work runs inside the call), and with Syscall6 the
// runtime's monitor thread would wake every 20µs to hand the sender's P to
// another thread and back: measured here as about a quarter of the CPU time of
// a sweep in context switches. The call never blocks (MSG_DONTWAIT), so the P
// is busy, not idle, while it runs.
func sendmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	sent := 0
	for sent < len(msgs) {
		r, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd),
			uintptr(unsafe.Pointer(&msgs[sent])), uintptr(len(msgs)-sent), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return sent, errno
		}
		if r == 0 {
			return sent, unix.EAGAIN
		}
		sent += int(r)
	}
	return sent, nil
}

// openWriter opens the sender of family fam (0 IPv4, 1 IPv6) for one lane: an
// AF_PACKET writer when cfg.NextHopMAC is set, a raw IP socket otherwise.
func (p *Prober) openWriter(cfg Config, iface *net.Interface, fam int) (batchWriter, error) {
	if cfg.NextHopMAC == nil {
		return openRaw(fam == 1, p.batch)
	}
	var src, dst [6]byte
	if len(iface.HardwareAddr) != 6 || len(cfg.NextHopMAC) != 6 {
		return nil, fmt.Errorf("AF_PACKET sending needs Ethernet addresses (interface %s has %q, next hop %q)",
			iface.Name, iface.HardwareAddr, cfg.NextHopMAC)
	}
	copy(src[:], iface.HardwareAddr)
	copy(dst[:], cfg.NextHopMAC)
	ethertype := uint16(unix.ETH_P_IP)
	if fam == 1 {
		ethertype = unix.ETH_P_IPV6
	}
	return openPacketWriter(iface.Index, src, dst, ethertype, p.batch)
}
