//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Traffic-control netlink constants (linux/pkt_sched.h, linux/pkt_cls.h) that
// x/sys/unix does not define.
const (
	tcHClsact        = 0xfffffff1 // TC_H_CLSACT: parent of the clsact qdisc
	tcHMinIngress    = 0xfff2     // TC_H_MIN_INGRESS
	tcaBPFFD         = 6          // TCA_BPF_FD
	tcaBPFName       = 7          // TCA_BPF_NAME
	tcaBPFFlags      = 8          // TCA_BPF_FLAGS
	tcaBPFActDirect  = 1          // TCA_BPF_FLAG_ACT_DIRECT
	tcFilterPriority = 0xc0de     // our filter's priority, so Close deletes only ours
	tcmsgLen         = 20         // sizeof(struct tcmsg)
)

var nlSeq atomic.Uint32

// attachClsact attaches prog as a direct-action cls_bpf filter on ifindex's
// ingress, adding a clsact qdisc when there is none. The returned function
// removes the filter, and the qdisc when this call added it.
func attachClsact(ifindex int, prog *ebpf.Program) (_ func() error, err error) {
	fd, err := openNetlink()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	createdQdisc := true
	err = tcRequest(fd, unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifindex,
		tcHClsact&0xffff0000, tcHClsact, 0, tcAttrs("clsact", nil))
	if errors.Is(err, unix.EEXIST) {
		createdQdisc, err = false, nil
	}
	if err != nil {
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	info := uint32(tcFilterPriority)<<16 | uint32(htons(unix.ETH_P_ALL))
	parent := uint32(tcHClsact&0xffff0000 | tcHMinIngress)
	var opts []byte
	opts = appendAttr(opts, tcaBPFFD, binary.NativeEndian.AppendUint32(nil, uint32(prog.FD())))
	opts = appendAttr(opts, tcaBPFName, []byte("sonde_capture\x00"))
	opts = appendAttr(opts, tcaBPFFlags, binary.NativeEndian.AppendUint32(nil, tcaBPFActDirect))
	err = tcRequest(fd, unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifindex, 1, parent, info, tcAttrs("bpf", opts))
	if err != nil {
		if createdQdisc {
			err = errors.Join(err, deleteClsact(fd, ifindex))
		}
		return nil, fmt.Errorf("add bpf filter: %w", err)
	}
	return func() error {
		err := tcRequest(fd, unix.RTM_DELTFILTER, 0, ifindex, 1, parent, info, tcAttrs("bpf", nil))
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
			err = nil // the interface went away, and the filter with it
		}
		if createdQdisc {
			err = errors.Join(err, deleteClsact(fd, ifindex))
		}
		return errors.Join(err, unix.Close(fd))
	}, nil
}

func deleteClsact(fd, ifindex int) error {
	err := tcRequest(fd, unix.RTM_DELQDISC, 0, ifindex, tcHClsact&0xffff0000, tcHClsact, 0, tcAttrs("clsact", nil))
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
		return nil
	}
	return err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tcAttrs encodes TCA_KIND and, when opts is not nil, TCA_OPTIONS.
func tcAttrs(kind string, opts []byte) []byte {
	b := appendAttr(nil, unix.TCA_KIND, append([]byte(kind), 0))
	if opts != nil {
		b = appendAttr(b, unix.TCA_OPTIONS|unix.NLA_F_NESTED, opts)
	}
	return b
}

// appendAttr appends one netlink attribute, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// openNetlink opens an rtnetlink socket in the calling thread's network
// namespace. The socket keeps that namespace, so a filter attached through it
// is removed through it too, whatever thread Close runs on.
func openNetlink() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	return fd, nil
}

// tcRequest sends one rtnetlink traffic-control request (struct tcmsg plus
// attrs) on fd and waits for its acknowledgment.
func tcRequest(fd int, typ uint16, flags uint16, ifindex int, handle, parent, info uint32, attrs []byte) error {
	seq := nlSeq.Add(1)
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+tcmsgLen+len(attrs))
	ne := binary.NativeEndian
	msg = append(msg, unix.AF_UNSPEC, 0, 0, 0)
	msg = ne.AppendUint32(msg, uint32(int32(ifindex)))
	msg = ne.AppendUint32(msg, handle)
	msg = ne.AppendUint32(msg, parent)
	msg = ne.AppendUint32(msg, info)
	msg = append(msg, attrs...)
	ne.PutUint32(msg[0:4], uint32(len(msg)))
	ne.PutUint16(msg[4:6], typ)
	ne.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	ne.PutUint32(msg[8:12], seq)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return os.NewSyscallError("sendto", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return os.NewSyscallError("recvfrom", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("parse netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error message")
			}
			if errno := int32(ne.Uint32(m.Data[0:4])); errno != 0 {
				return unix.Errno(-errno)
			}
			return nil
		}
	}
}
