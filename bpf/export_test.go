//go:build linux

package bpf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// PassiveMapMemory returns the memory the kernel charges to each of p's
// maps (memlock in the map descriptor's fdinfo), by map name; watch4 and
// watch6 count the published table with its array of maps.
func PassiveMapMemory(p *Passive) (map[string]uint64, error) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	out := map[string]uint64{}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{
		{"watch4", p.objs.Watch4}, {"watch4", p.tab4}, {"watch6", p.objs.Watch6}, {"watch6", p.tab6},
		{"stats", p.objs.Stats}, {"own", p.objs.Own}, {"events", p.objs.Events},
	} {
		if m.m == nil {
			continue
		}
		n, err := memlock(m.m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		out[m.name] += n
	}
	return out, nil
}

func memlock(m *ebpf.Map) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("memlock %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, errors.New("no memlock in fdinfo")
}

// PassiveTableCells returns the cells of p's published IPv4 and IPv6
// tables, 0 for none.
func PassiveTableCells(p *Passive) (cells4, cells6 int) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	if p.tab4 != nil {
		cells4 = int(p.tab4.MaxEntries()) - 1
	}
	if p.tab6 != nil {
		cells6 = int(p.tab6.MaxEntries()) - 1
	}
	return cells4, cells6
}

// SetPassiveSeeds makes p's tables take their seeds from seed.
func SetPassiveSeeds(p *Passive, seed func() uint64) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	p.seed = seed
}

// PassiveLookup runs passive.c's lookup of the watched targets in the
// kernel, through its test program passive_lookup.
type PassiveLookup struct {
	prog *ebpf.Program
	in   []byte
}

// NewPassiveLookup loads passive_lookup on p's watch maps.
func NewPassiveLookup(p *Passive) (*PassiveLookup, error) {
	spec, err := loadPassive()
	if err != nil {
		return nil, err
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"passive_lookup"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		passiveMapWatch4: p.objs.Watch4, passiveMapWatch6: p.objs.Watch6,
	}}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("load passive_lookup: %w", err)
	}
	return &PassiveLookup{prog: objs.Prog, in: make([]byte, 14+24)}, nil
}

// Lookup returns the slot and threshold of peer ap as the program finds
// them when a connection of family (unix.AF_INET or AF_INET6) goes to it;
// for AF_INET, ap's address must be IPv4.
func (l *PassiveLookup) Lookup(family uint16, ap netip.AddrPort) (slot uint32, threshold int, ok bool, err error) {
	// struct peer after an Ethernet header: family u16, port u16 (host
	// order), addr4 [4], addr6 [16].
	b := l.in[14:]
	clear(b)
	ne := binary.NativeEndian
	ne.PutUint16(b[0:], family)
	ne.PutUint16(b[2:], ap.Port())
	if ap.Addr().Is4() {
		a := ap.Addr().As4()
		copy(b[4:], a[:])
	} else {
		a := ap.Addr().As16()
		copy(b[8:], a[:])
	}
	ret, err := l.prog.Run(&ebpf.RunOptions{Data: l.in})
	if err != nil {
		return 0, 0, false, fmt.Errorf("run passive_lookup: %w", err)
	}
	if ret == 0 {
		return 0, 0, false, nil
	}
	return ret & 0xffffff, int(ret >> 24), true, nil
}

// Close unloads the program.
func (l *PassiveLookup) Close() error { return l.prog.Close() }

// PassiveHome4 returns the hash of IPv4 target ap in a table seeded with
// seed; its home cell is 1 + (hash & mask).
func PassiveHome4(seed uint64, ap netip.AddrPort) uint64 { return layout4.home(seed, key4Of(ap)) }

// PassiveProbes is the most cells a lookup reads.
const PassiveProbes = watchProbes

// PassiveStateRuns returns how often the kernel ran p's program on the raw
// tracepoint inet_sock_set_state and for how long in all, while run-time
// statistics are enabled (ebpf.EnableStats).
func PassiveStateRuns(p *Passive) (runs uint64, total time.Duration, err error) {
	st, err := p.objs.PassiveState.Stats()
	if err != nil {
		return 0, 0, err
	}
	return st.RunCount, st.Runtime, nil
}

// PassiveWatchedPorts returns the ports the program's filter watch_ports
// lets through, as the kernel holds them.
func PassiveWatchedPorts(p *Passive) ([]uint16, error) {
	var s portSet
	if err := p.objs.WatchPorts.Get(s[:]); err != nil {
		return nil, err
	}
	var ports []uint16
	for i, w := range s {
		for b := range 64 {
			if w&(1<<b) != 0 {
				ports = append(ports, uint16(i*64+b))
			}
		}
	}
	return ports, nil
}
