//go:build linux

package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
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
	tcHMinEgress     = 0xfff3     // TC_H_MIN_EGRESS
	tcaBPFFD         = 6          // TCA_BPF_FD
	tcaBPFName       = 7          // TCA_BPF_NAME
	tcaBPFFlags      = 8          // TCA_BPF_FLAGS
	tcaBPFActDirect  = 1          // TCA_BPF_FLAG_ACT_DIRECT
	tcFilterPriority = 0xc0de     // our filters' priority
	tcmsgLen         = 20         // sizeof(struct tcmsg)
)

var nlSeq atomic.Uint32

// Our filters are found by kind, priority and name: a direct-action cls_bpf
// filter at tcFilterPriority named tcFilterName, a dot and its attachment's
// token (16 hex digits, random). While its filter may be on the interface,
// an attachment holds an abstract unix socket named after the token
// (tokenAddr) in the interface's network namespace. The kernel lets go of
// it when its process ends, however it ends, and it is seen by every
// process of that network namespace, whatever its pid namespace: a filter
// whose socket can be bound was left by a process that is gone (kill -9),
// and the next start removes it, while one whose socket is held is a live
// sonde's, even one in another container with the same pid. Filters named
// tcFilterName alone, of versions that judged their owner by the pid in
// their handle, are left alone: nothing proves their owner gone. Handles
// are random, tried again when taken.
const (
	tcFilterName  = "sonde_capture"
	tcAttachTries = 8
)

// tcState is what this process has attached with TC: the clsact qdiscs it
// is to remove once no filter is left on them (it created them, or took
// them over from a crashed run), by network namespace and interface. A
// reload attaches the new generation's filter before it detaches the old
// one, so a qdisc outlives each generation.
var tcState = struct {
	sync.Mutex
	qdiscs map[qdiscKey]bool
}{qdiscs: map[qdiscKey]bool{}}

// qdiscKey names an interface: the network namespace's inode and the
// interface's index in it.
type qdiscKey struct {
	netns   uint64
	ifindex int
}

// filterName returns the name of the filter of the attachment with token
// tok.
func filterName(tok uint64) string { return fmt.Sprintf("%s.%016x", tcFilterName, tok) }

// filterToken returns the token in a filter's name, or false for a name
// that is not of one of our attachments.
func filterToken(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, tcFilterName+".")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	tok, err := strconv.ParseUint(hex, 16, 64)
	return tok, err == nil
}

// tokenAddr is the abstract unix socket address of token tok.
func tokenAddr(tok uint64) *unix.SockaddrUnix {
	return &unix.SockaddrUnix{Name: fmt.Sprintf("@sonde/tc/%016x", tok)}
}

// holdToken binds the socket of token tok in the calling thread's network
// namespace and returns it: the attachment's sign of life.
func holdToken(tok uint64) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, tokenAddr(tok)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("hold tc filter token: %w", os.NewSyscallError("bind", err))
	}
	return fd, nil
}

// ownerGone reports whether no process holds the socket of token tok in
// the calling thread's network namespace: whether it can be held.
func ownerGone(tok uint64) (bool, error) {
	fd, err := holdToken(tok)
	switch {
	case err == nil:
		return true, unix.Close(fd)
	case errors.Is(err, unix.EADDRINUSE):
		return false, nil
	default:
		return false, err
	}
}

// attachClsact attaches prog as a direct-action cls_bpf filter on ifindex's
// ingress, adding a clsact qdisc when there is none, after removing the
// filters of sonde processes that are gone. The returned function removes
// the filter, and the qdisc when this process added it (or took it over)
// and no filter is left on it.
//
// It speaks rtnetlink itself rather than through a netlink library
// (vishvananda/netlink, florianl/go-tc), for reasons that hold only while
// it stays this small: it is the fallback for kernels before 6.6 (TCX
// links, through cilium/ebpf, are the path otherwise); it sends four kinds
// of message (new/delete qdisc, new/delete filter) and reads one (a filter
// dump), about 150 lines of encoding (tcRequest, tcAttrs, parseFilter);
// and what is sonde's own — owner tokens held by abstract sockets, stale
// filters of dead processes, a shared clsact removed only when no one's
// filter is left — a library would not do, it would only encode the same
// messages. It keeps package bpf on cilium/ebpf and x/sys alone. Should
// it need more of tc (other qdiscs, actions, egress chains), a library
// is the better choice.
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
	key, err := netnsKey(ifindex)
	if err != nil {
		return nil, err
	}
	created := true
	err = tcRequest(fd, unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifindex,
		tcHClsact&0xffff0000, tcHClsact, 0, tcAttrs("clsact", nil))
	if errors.Is(err, unix.EEXIST) {
		created, err = false, nil
	}
	if err != nil {
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	if !created {
		removed, err := removeStale(fd, ifindex)
		if err != nil {
			return nil, err
		}
		// Another sonde added the qdisc, running or crashed: take it over
		// when only sonde filters use it, so whichever detaches last
		// removes it.
		sonde, others, err := clsactUsers(fd, ifindex)
		if err != nil {
			return nil, err
		}
		created = others == 0 && removed+sonde > 0
	}
	if created {
		tcState.Lock()
		tcState.qdiscs[key] = true
		tcState.Unlock()
	}
	tok := rand.Uint64()
	life, err := holdToken(tok)
	if err != nil {
		return nil, errors.Join(err, releaseQdisc(fd, ifindex, key))
	}
	info := uint32(tcFilterPriority)<<16 | uint32(htons(unix.ETH_P_ALL))
	parent := uint32(tcHClsact&0xffff0000 | tcHMinIngress)
	var opts []byte
	opts = appendAttr(opts, tcaBPFFD, binary.NativeEndian.AppendUint32(nil, uint32(prog.FD())))
	opts = appendAttr(opts, tcaBPFName, []byte(filterName(tok)+"\x00"))
	opts = appendAttr(opts, tcaBPFFlags, binary.NativeEndian.AppendUint32(nil, tcaBPFActDirect))
	var handle uint32
	for try := 0; ; try++ {
		handle = max(rand.Uint32(), 1)
		err = tcRequest(fd, unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL, ifindex, handle, parent, info, tcAttrs("bpf", opts))
		if !errors.Is(err, unix.EEXIST) || try+1 == tcAttachTries {
			break // attached, failed, or every handle tried was taken
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("add bpf filter: %w", err), unix.Close(life), releaseQdisc(fd, ifindex, key))
	}
	return func() error {
		err := tcRequest(fd, unix.RTM_DELTFILTER, 0, ifindex, handle, parent, info, tcAttrs("bpf", nil))
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
			err = nil // the interface went away, and the filter with it
		}
		// After the filter: while it may be there, its token is held.
		return errors.Join(err, unix.Close(life), releaseQdisc(fd, ifindex, key), unix.Close(fd))
	}, nil
}

// releaseQdisc removes the clsact qdisc of key when this process is to
// remove it and no filter is left on it.
func releaseQdisc(fd, ifindex int, key qdiscKey) error {
	tcState.Lock()
	defer tcState.Unlock()
	if !tcState.qdiscs[key] {
		return nil
	}
	empty, err := clsactEmpty(fd, ifindex)
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) {
		delete(tcState.qdiscs, key) // the interface or the qdisc is gone
		return nil
	}
	if err != nil || !empty {
		return err
	}
	delete(tcState.qdiscs, key)
	return deleteClsact(fd, ifindex)
}

// removeStale deletes the sonde filters on ifindex's ingress that processes
// which are gone left behind (whose token nobody holds), and returns how
// many.
func removeStale(fd, ifindex int) (int, error) {
	fs, err := tcDumpFilters(fd, ifindex, tcHClsact&0xffff0000|tcHMinIngress)
	if err != nil {
		return 0, fmt.Errorf("list tc filters: %w", err)
	}
	n := 0
	for _, f := range fs {
		tok, ours := filterToken(f.name)
		if f.kind != "bpf" || !ours || f.info>>16 != tcFilterPriority {
			continue
		}
		gone, err := ownerGone(tok)
		if err != nil {
			return n, fmt.Errorf("owner of tc filter %#x: %w", f.handle, err)
		}
		if !gone {
			continue
		}
		err = tcRequest(fd, unix.RTM_DELTFILTER, 0, ifindex, f.handle, f.parent, f.info, tcAttrs("bpf", nil))
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return n, fmt.Errorf("remove stale bpf filter %#x: %w", f.handle, err)
		}
		n++
	}
	return n, nil
}

// clsactEmpty reports whether the clsact qdisc of ifindex holds no filter
// on ingress nor egress.
func clsactEmpty(fd, ifindex int) (bool, error) {
	sonde, others, err := clsactUsers(fd, ifindex)
	return sonde+others == 0, err
}

// clsactUsers counts the filters of the clsact qdisc of ifindex, on ingress
// and egress: sonde's (of any version) and the others.
func clsactUsers(fd, ifindex int) (sonde, others int, err error) {
	for _, parent := range []uint32{tcHClsact&0xffff0000 | tcHMinIngress, tcHClsact&0xffff0000 | tcHMinEgress} {
		fs, err := tcDumpFilters(fd, ifindex, parent)
		if err != nil {
			return 0, 0, err
		}
		for _, f := range fs {
			if _, ours := filterToken(f.name); f.kind == "bpf" && f.info>>16 == tcFilterPriority && (ours || f.name == tcFilterName) {
				sonde++
			} else {
				others++
			}
		}
	}
	return sonde, others, nil
}

// netnsKey names ifindex in the calling thread's network namespace.
func netnsKey(ifindex int) (qdiscKey, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return qdiscKey{}, fmt.Errorf("network namespace: %w", err)
	}
	return qdiscKey{netns: st.Ino, ifindex: ifindex}, nil
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

// tcFilter is one filter as a dump lists it.
type tcFilter struct {
	handle, parent, info uint32
	kind, name           string // TCA_KIND, and TCA_BPF_NAME for bpf filters
}

// tcDumpFilters lists the filters of ifindex under parent. The heads of
// the filter chains (handle 0) are left out.
func tcDumpFilters(fd, ifindex int, parent uint32) ([]tcFilter, error) {
	seq := nlSeq.Add(1)
	ne := binary.NativeEndian
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+tcmsgLen)
	msg = append(msg, unix.AF_UNSPEC, 0, 0, 0)
	msg = ne.AppendUint32(msg, uint32(int32(ifindex)))
	msg = ne.AppendUint32(msg, 0)
	msg = ne.AppendUint32(msg, parent)
	msg = ne.AppendUint32(msg, 0)
	ne.PutUint32(msg[0:4], uint32(len(msg)))
	ne.PutUint16(msg[4:6], unix.RTM_GETTFILTER)
	ne.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(msg[8:12], seq)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	var out []tcFilter
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(ne.Uint32(m.Data[0:4])); errno != 0 {
						return nil, unix.Errno(-errno)
					}
				}
				return out, nil
			case unix.RTM_NEWTFILTER:
				if f, ok := parseFilter(m.Data); ok && f.handle != 0 {
					out = append(out, f)
				}
			}
		}
	}
}

// parseFilter decodes a tcmsg and its attributes.
func parseFilter(b []byte) (tcFilter, bool) {
	if len(b) < tcmsgLen {
		return tcFilter{}, false
	}
	ne := binary.NativeEndian
	f := tcFilter{handle: ne.Uint32(b[8:12]), parent: ne.Uint32(b[12:16]), info: ne.Uint32(b[16:20])}
	eachAttr(b[tcmsgLen:], func(typ uint16, data []byte) {
		switch typ &^ unix.NLA_F_NESTED {
		case unix.TCA_KIND:
			f.kind = cString(data)
		case unix.TCA_OPTIONS:
			eachAttr(data, func(typ uint16, data []byte) {
				if typ&^unix.NLA_F_NESTED == tcaBPFName {
					f.name = cString(data)
				}
			})
		}
	})
	return f, true
}

// eachAttr calls fn for every netlink attribute in b.
func eachAttr(b []byte, fn func(typ uint16, data []byte)) {
	ne := binary.NativeEndian
	for len(b) >= 4 {
		l := int(ne.Uint16(b[0:2]))
		if l < 4 || l > len(b) {
			return
		}
		fn(ne.Uint16(b[2:4]), b[4:l])
		b = b[min((l+3)&^3, len(b)):]
	}
}

// cString returns the text of a NUL-terminated attribute.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
