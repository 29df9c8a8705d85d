package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/sondeprobe/sonde/internal/netns"
)

// XDPMode says whether and how a fleet answers SYN probes in XDP.
type XDPMode uint8

// The XDP modes of a fleet.
const (
	// XDPOff: the fleet namespace's TCP stack answers, behind listeners and
	// nftables rules.
	XDPOff XDPMode = iota
	// XDPGeneric: the XDP responder in generic (skb) mode on the fleet's veth.
	XDPGeneric
	// XDPNative: the XDP responder in the veth driver's native mode; the
	// prober's veth then carries an XDP program that passes everything (XDP_TX
	// reaches a veth peer only when it has one) and both ends have a queue
	// per CPU.
	XDPNative
)

// String names the mode as the bench report shows it.
func (m XDPMode) String() string {
	switch m {
	case XDPGeneric:
		return "xdp-generic"
	case XDPNative:
		return "xdp-native"
	default:
		return "kernel"
	}
}

// ParseXDPMode parses "generic" or "native".
func ParseXDPMode(s string) (XDPMode, error) {
	switch s {
	case "generic":
		return XDPGeneric, nil
	case "native":
		return XDPNative, nil
	}
	return XDPOff, fmt.Errorf("XDP mode %q: want generic or native", s)
}

// ResponderCounters are the XDP responder's counters, summed over CPUs.
type ResponderCounters struct {
	SynAck      uint64 // SYN-ACKs sent (open ports)
	RST         uint64 // RSTs sent (rejected addresses, closed ports)
	Unreachable uint64 // ICMP host unreachable sent
	Dropped     uint64 // SYNs dropped by the ground truth
	HostDropped uint64 // other TCP packets to the fleet dropped: the prober's RSTs
	Passed      uint64 // packets left to the fleet's kernel (ARP, other addresses)
}

// responder is the loaded XDP responder and its attachments. Its maps
// hold the fleet's ground truth.
type responder struct {
	objs  responderObjects
	links []link.Link
}

// newResponder loads the responder for cfg's prefix and ground truth and
// attaches it to the fleet's veth (and, in native mode, the pass program to
// the prober's).
func newResponder(f *Fleet, cfg Config) (_ *responder, err error) {
	r, err := loadResponderFor(f.Prefix, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	flags := link.XDPGenericMode
	if f.XDP == XDPNative {
		flags = link.XDPDriverMode
		if err := r.attach(f.ProberNS, f.ProberLink, r.objs.PassAll, flags); err != nil {
			return nil, err
		}
	}
	if err := r.attach(f.FleetNS, f.FleetLink, r.objs.AnswerSyns, flags); err != nil {
		return nil, err
	}
	return r, nil
}

// loadResponderFor loads the responder's program and fills its maps with
// the ground truth of cfg for prefix, without attaching it.
func loadResponderFor(prefix netip.Prefix, cfg Config) (_ *responder, err error) {
	if !prefix.Addr().Is4() {
		return nil, fmt.Errorf("XDP responder: prefix %s is not IPv4", prefix)
	}
	spec, err := loadResponder()
	if err != nil {
		return nil, fmt.Errorf("load responder spec: %w", err)
	}
	mask := net.CIDRMask(prefix.Bits(), 32)
	addr := prefix.Masked().Addr().As4()
	for name, v := range map[string]uint32{
		responderVarCfgPrefix: binary.NativeEndian.Uint32(addr[:]), // network order in memory
		responderVarCfgMask:   binary.NativeEndian.Uint32(mask),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	r := &responder{}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("load XDP responder (needs CAP_BPF and CAP_NET_ADMIN): %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	for _, s := range []struct {
		m        *ebpf.Map
		prefixes []netip.Prefix
	}{{r.objs.Drop, cfg.Drop}, {r.objs.Reject, cfg.Reject}, {r.objs.Unreach, cfg.Unreachable}} {
		if err := fillSet(s.m, s.prefixes); err != nil {
			return nil, err
		}
	}
	var ports [1024]uint64
	for _, p := range slices.Concat(cfg.Listen, cfg.HTTP, cfg.HTTPS) {
		ports[p>>6] |= 1 << (p & 63)
	}
	for i, w := range ports {
		if w == 0 {
			continue
		}
		if err := r.objs.OpenPorts.Put(uint32(i), w); err != nil {
			return nil, fmt.Errorf("open ports: %w", err)
		}
	}
	return r, nil
}

// attach attaches prog to interface ifname of namespace ns.
func (r *responder) attach(ns, ifname string, prog *ebpf.Program, flags link.XDPAttachFlags) error {
	return netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("xdp interface: %w", err)
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: flags})
		if err != nil {
			return fmt.Errorf("attach xdp to %s: %w", ifname, err)
		}
		r.links = append(r.links, l)
		return nil
	})
}

// fillSet puts IPv4 prefixes into an LPM trie of the responder.
func fillSet(m *ebpf.Map, prefixes []netip.Prefix) error {
	for _, p := range prefixes {
		if !p.Addr().Is4() {
			return fmt.Errorf("XDP responder: %s is not IPv4", p)
		}
		if err := m.Put(lpmKey(p), uint8(1)); err != nil {
			return fmt.Errorf("XDP responder set %s: %w", p, err)
		}
	}
	return nil
}

func lpmKey(p netip.Prefix) responderKey4 {
	a := p.Masked().Addr().As4()
	return responderKey4{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}
}

// setDynDrop replaces the prefixes of the dynamic drop set.
func (r *responder) setDynDrop(prefixes []netip.Prefix) error {
	var keys []responderKey4
	var k responderKey4
	var v uint8
	it := r.objs.DynDrop.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read dynamic drops: %w", err)
	}
	for _, k := range keys {
		if err := r.objs.DynDrop.Delete(k); err != nil {
			return fmt.Errorf("clear dynamic drops: %w", err)
		}
	}
	return fillSet(r.objs.DynDrop, prefixes)
}

// counters sums the responder's per-CPU counters.
func (r *responder) counters() (ResponderCounters, error) {
	var sums [6]uint64
	var vals []uint64
	for i := range sums {
		if err := r.objs.Counters.Lookup(uint32(i), &vals); err != nil {
			return ResponderCounters{}, fmt.Errorf("read responder counter %d: %w", i, err)
		}
		for _, v := range vals {
			sums[i] += v
		}
	}
	return ResponderCounters{SynAck: sums[0], RST: sums[1], Unreachable: sums[2], Dropped: sums[3], HostDropped: sums[4], Passed: sums[5]}, nil
}

// close detaches the programs and frees the objects.
func (r *responder) close() error {
	var errs []error
	for i := len(r.links) - 1; i >= 0; i-- {
		errs = append(errs, r.links[i].Close())
	}
	r.links = nil
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}
