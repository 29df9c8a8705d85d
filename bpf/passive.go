//go:build linux

package bpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// PassiveOutcome says how an observed connection fared (event.outcome in
// passive.c).
type PassiveOutcome uint8

// The outcomes of observed connections.
const (
	// PassiveConnected: the handshake completed.
	PassiveConnected PassiveOutcome = 1
	// PassiveRefused: an RST (or ICMP port unreachable) answered the SYN.
	PassiveRefused PassiveOutcome = 2
	// PassiveTimedOut: the SYN went unanswered — the kernel gave up, or the
	// application closed the socket after the SYN had been retransmitted —
	// or an established connection timed out.
	PassiveTimedOut PassiveOutcome = 3
	// PassiveUnreachable: ICMP host or network unreachable.
	PassiveUnreachable PassiveOutcome = 4
	// PassiveAbandoned: the application closed the socket while connecting,
	// before any retransmission of its SYN: no evidence against the target.
	PassiveAbandoned PassiveOutcome = 5
	// PassiveReset: the peer reset an established connection. Counted, not
	// a failure.
	PassiveReset PassiveOutcome = 6
)

// String names the outcome as in metrics and events ("refused", "timed_out").
func (o PassiveOutcome) String() string {
	switch o {
	case PassiveConnected:
		return "connected"
	case PassiveRefused:
		return "refused"
	case PassiveTimedOut:
		return "timed_out"
	case PassiveUnreachable:
		return "unreachable"
	case PassiveAbandoned:
		return "abandoned"
	case PassiveReset:
		return "reset"
	default:
		return fmt.Sprintf("outcome(%d)", uint8(o))
	}
}

// Failure reports whether the outcome is evidence against the target:
// refused, timed out or unreachable.
func (o PassiveOutcome) Failure() bool {
	return o == PassiveRefused || o == PassiveTimedOut || o == PassiveUnreachable
}

// PassiveEvent is one record of the passive ring: a failure, or the first
// success after failures.
type PassiveEvent struct {
	// At is when the kernel saw it, in CLOCK_MONOTONIC nanoseconds.
	At int64
	// Slot is the target's slot, as given to [Passive.Watch].
	Slot uint32
	// Outcome is a failure, or PassiveConnected for the success that ended
	// a run of failures.
	Outcome PassiveOutcome
	// Run is the target's run of consecutive failures including this one;
	// for PassiveConnected, the length of the run it ended.
	Run uint32
	// Retransmits is the number of segments the connection retransmitted.
	Retransmits uint32
}

// PassiveEventSize is the size in bytes of a passive ring record.
const PassiveEventSize = 24

// ErrBadPassiveEvent is returned by [DecodePassiveEvent] for a record that is
// too short or has an unknown outcome.
var ErrBadPassiveEvent = errors.New("bad passive ring record")

// DecodePassiveEvent decodes a passive ring record into ev without
// allocating. Longer records are accepted (the kernel pads them to 8 bytes).
func DecodePassiveEvent(b []byte, ev *PassiveEvent) error {
	if len(b) < PassiveEventSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadPassiveEvent, len(b), PassiveEventSize)
	}
	ne := binary.NativeEndian
	o := PassiveOutcome(b[20])
	if o < PassiveConnected || o > PassiveReset {
		return fmt.Errorf("%w: outcome %d", ErrBadPassiveEvent, b[20])
	}
	*ev = PassiveEvent{
		At:          int64(ne.Uint64(b[0:8])),
		Slot:        ne.Uint32(b[8:12]),
		Run:         ne.Uint32(b[12:16]),
		Retransmits: ne.Uint32(b[16:20]),
		Outcome:     o,
	}
	return nil
}

// PassiveStats are one target's counters since its slot was given to it.
type PassiveStats struct {
	Connected   uint64 // handshakes completed
	Refused     uint64 // connects refused
	TimedOut    uint64 // connects (or established connections) timed out
	Unreachable uint64 // connects answered by ICMP unreachable
	Abandoned   uint64 // connects the application closed before any SYN retransmission
	Reset       uint64 // established connections reset by the peer
	Retransmits uint64 // segments retransmitted by connections to the target
	// Handshakes counts the completed handshakes with a round-trip sample
	// of the SYN (all but those whose SYN was retransmitted on a connection
	// without TCP timestamps), and HandshakeSum is the sum of their times.
	Handshakes   uint64
	HandshakeSum time.Duration
	// Run is the current run of consecutive failures (refused, timed out,
	// unreachable), ended by the next connection that completes.
	Run uint32
}

// WatchEntry is a target to watch: connections to Addr count in Slot.
type WatchEntry struct {
	// Addr is the target's address and port. An IPv4-mapped IPv6 address
	// is its IPv4 address (the kernel's connects to either are one target);
	// a zone is ignored: the watch holds on every interface.
	Addr netip.AddrPort
	// Slot is the index of the target's counters, below
	// PassiveOptions.MaxTargets, and unique in a watched set.
	Slot uint32
	// Threshold is the number of consecutive failures that makes a trigger,
	// 1 to 255: every failure up to it is sent through [Passive.Read], then
	// at most about four per 100 ms.
	Threshold int
}

// PassiveOptions configures [OpenPassive]. The zero value is usable.
type PassiveOptions struct {
	// MaxTargets bounds the watched targets (per address family) and the
	// slots (0 to MaxTargets-1); default 65536, at most 1<<24.
	MaxTargets int
	// RingBytes is the ring buffer's size: a power of two of at least a
	// page; default 256 KiB (about 8,000 records).
	RingBytes int
	// MaxSockets bounds this process's own connects to watched targets
	// followed at once (to leave them out of the evidence), oldest evicted
	// first; default 65536.
	MaxSockets int
	// IncludeSelf counts this process's own connects too. By default they
	// are ignored: sonde's probes are not evidence about its targets.
	IncludeSelf bool
}

// Defaults and limits of [PassiveOptions].
const (
	defaultPassiveTargets = 1 << 16
	maxPassiveTargets     = 1 << 24
	defaultPassiveRing    = 256 << 10
	defaultPassiveSockets = 1 << 16
	maxPassiveThreshold   = 255
)

func (o *PassiveOptions) setDefaults() error {
	if o.MaxTargets == 0 {
		o.MaxTargets = defaultPassiveTargets
	}
	if o.MaxTargets < 1 || o.MaxTargets > maxPassiveTargets {
		return fmt.Errorf("passive max targets %d: want 1 to %d", o.MaxTargets, maxPassiveTargets)
	}
	if o.RingBytes == 0 {
		o.RingBytes = defaultPassiveRing
	}
	if o.RingBytes < os.Getpagesize() || o.RingBytes&(o.RingBytes-1) != 0 {
		return fmt.Errorf("passive ring size %d: want a power of two of at least %d", o.RingBytes, os.Getpagesize())
	}
	if o.MaxSockets == 0 {
		o.MaxSockets = defaultPassiveSockets
	}
	if o.MaxSockets < 1 || o.MaxSockets > maxPassiveTargets {
		return fmt.Errorf("passive max sockets %d: want 1 to %d", o.MaxSockets, maxPassiveTargets)
	}
	return nil
}

// Passive owns the loaded passive-observation programs, their raw
// tracepoint links, maps and ring reader. All methods are safe for
// concurrent use; [Passive.Read] runs in one goroutine at a time.
type Passive struct {
	opt    PassiveOptions
	objs   passiveObjs
	links  []link.Link
	reader *ringbuf.Reader

	// life guards the objects against Close: every method but Close holds
	// it for reading.
	life   sync.RWMutex
	closed bool

	// watchMu serializes Watch and guards what follows: cur4 and cur6
	// are the watched set as the published tables hold it, tab4 and tab6
	// the tables (nil while a family has none), tmpl4 and tmpl6 their
	// templates, seed the source of their seeds.
	watchMu      sync.Mutex
	ports        *portSet            // the ports watch_ports lets through
	cur4         map[uint64]watchVal // by key4Of
	cur6         map[watchKey6]watchVal
	tab4, tab6   *ebpf.Map
	tmpl4, tmpl6 *ebpf.MapSpec
	seed         func() uint64

	reading atomic.Bool
}

// passiveObjs are the objects OpenPassive loads: all of passive.c but the
// test program passive_lookup.
type passiveObjs struct {
	passiveMaps
	passiveVariables
	PassiveState      *ebpf.Program `ebpf:"passive_state"`
	PassiveRetransmit *ebpf.Program `ebpf:"passive_retransmit"`
}

func (o *passiveObjs) Close() error {
	return errors.Join(o.PassiveRetransmit.Close(), o.PassiveState.Close(), o.passiveMaps.Close())
}

// ErrPassiveReading is returned by [Passive.Read] while another Read runs.
var ErrPassiveReading = errors.New("passive: Read already running")

// PassiveAvailable reports whether this process can observe connections
// passively: it checks the kernel's BTF, then loads the programs and attaches
// them to their tracepoints (needs CAP_BPF and CAP_PERFMON, or
// CAP_SYS_ADMIN; not tracefs), and detaches them at once. The error says
// what is missing.
func PassiveAvailable() error {
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("kernel BTF (/sys/kernel/btf/vmlinux) unavailable: %w", err)
	}
	p, err := OpenPassive(PassiveOptions{MaxTargets: 1, MaxSockets: 1, RingBytes: os.Getpagesize()})
	if err != nil {
		return err
	}
	return p.Close()
}

// OpenPassive loads the passive-observation programs with opt and attaches
// them to the BTF tracepoints inet_sock_set_state and tcp_retransmit_skb,
// through the bpf system call alone: tracefs need not be mounted (it is not
// under ip netns exec, nor in many containers). Nothing is watched until
// [Passive.Watch]. Minimum kernel 5.12 (BPF atomics with fetch), with BTF.
func OpenPassive(opt PassiveOptions) (_ *Passive, err error) {
	if err := opt.setDefaults(); err != nil {
		return nil, err
	}
	memlockErr := rlimit.RemoveMemlock() // kernels before 5.11; see NewCapture
	spec, err := loadPassive()
	if err != nil {
		return nil, err
	}
	spec.Maps[passiveMapStats].MaxEntries = uint32(opt.MaxTargets)
	spec.Maps[passiveMapOwn].MaxEntries = uint32(opt.MaxSockets)
	spec.Maps[passiveMapEvents].MaxEntries = uint32(opt.RingBytes)
	if err := configurePassive(spec, opt); err != nil {
		return nil, err
	}
	p := &Passive{
		opt:   opt,
		ports: &portSet{},
		cur4:  map[uint64]watchVal{},
		cur6:  map[watchKey6]watchVal{},
		tmpl4: spec.Maps[passiveMapWatch4].InnerMap,
		tmpl6: spec.Maps[passiveMapWatch6].InnerMap,
		seed:  rand.Uint64,
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		if memlockErr != nil {
			err = fmt.Errorf("%w (and lifting the memlock limit failed: %w)", err, memlockErr)
		}
		return nil, fmt.Errorf("load passive program (needs CAP_BPF and CAP_PERFMON): %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	if err := p.attach(); err != nil {
		return nil, err
	}
	if p.reader, err = ringbuf.NewReader(p.objs.Events); err != nil {
		return nil, fmt.Errorf("open passive ring buffer: %w", err)
	}
	return p, nil
}

// configurePassive writes the identity of this process into the program's
// constants: the device and inode of its pid namespace and its process id
// there, which bpf_get_ns_current_pid_tgid compares.
func configurePassive(spec *ebpf.CollectionSpec, opt PassiveOptions) error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return fmt.Errorf("stat own pid namespace: %w", err)
	}
	// The helper compares the kernel's dev_t (major << 20 | minor), not
	// stat's encoding.
	dev := uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev))
	vars := []struct {
		name  string
		value any
	}{
		{passiveVarCfgExcludeSelf, boolByte(!opt.IncludeSelf)},
		{passiveVarCfgSelfDev, dev},
		{passiveVarCfgSelfIno, st.Ino},
		{passiveVarCfgSelfTgid, uint32(os.Getpid())},
	}
	for _, v := range vars {
		if err := spec.Variables[v.name].Set(v.value); err != nil {
			return fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	return nil
}

// errPassiveClosed is returned by the methods of a closed Passive.
var errPassiveClosed = fmt.Errorf("passive: %w", os.ErrClosed)

// passiveBatch bounds the elements per batch system call.
const passiveBatch = 1 << 14

// Watch makes entries the whole watched set: entries not watched yet are
// added, changed ones updated, and those missing from entries removed. A
// target kept at the same address and slot keeps its counters; a slot that
// gets a new target starts from zero. Connections in flight to a removed
// target, or to one whose slot changed, stop counting. The set is checked
// before anything changes; an error names the entry. Each family's targets
// change at once (a new table replaces the old one); should the kernel
// refuse a change midway, the watched set is the old one with part of the
// changes applied, and a later Watch completes it.
func (p *Passive) Watch(entries []WatchEntry) error {
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return errPassiveClosed
	}
	p.watchMu.Lock()
	defer p.watchMu.Unlock()

	next4, next6, err := p.checkWatch(entries)
	if err != nil {
		return err
	}
	// The ports filter lets the new set's ports through before its tables
	// are published, and drops the old set's after.
	ports := portsOf(entries)
	if err := p.setPorts(orPorts(p.ports, ports)); err != nil {
		return err
	}
	fresh := appendFresh(appendFresh(nil, p.cur4, next4), p.cur6, next6)
	if len(fresh) > 0 {
		// A slot that gets a new target may still be the slot of an old
		// one in the published tables: take those targets out before the
		// counters are zeroed, so that nothing of theirs is counted for the
		// new one.
		isFresh := make([]bool, p.opt.MaxTargets)
		for _, s := range fresh {
			isFresh[s] = true
		}
		if err := p.publish4(without(p.cur4, isFresh)); err != nil {
			return err
		}
		if err := p.publish6(without(p.cur6, isFresh)); err != nil {
			return err
		}
		if err := p.zeroStats(fresh); err != nil {
			return err
		}
	}
	if err := p.publish4(next4); err != nil {
		return err
	}
	if err := p.publish6(next6); err != nil {
		return err
	}
	return p.setPorts(ports)
}

// portSet is the bitmap of watch_ports: bit p%64 of word p/64 for port p.
type portSet [1024]uint64

// portsOf returns the ports of entries.
func portsOf(entries []WatchEntry) *portSet {
	var s portSet
	for _, e := range entries {
		port := e.Addr.Port()
		s[port>>6] |= 1 << (port & 63)
	}
	return &s
}

// orPorts returns the union of a and b.
func orPorts(a, b *portSet) *portSet {
	var s portSet
	for i := range s {
		s[i] = a[i] | b[i]
	}
	return &s
}

// setPorts writes s to the program's watch_ports, when it differs.
func (p *Passive) setPorts(s *portSet) error {
	if *s == *p.ports {
		return nil
	}
	if err := p.objs.WatchPorts.Set(s[:]); err != nil {
		return fmt.Errorf("set watched ports: %w", err)
	}
	p.ports = s
	return nil
}

// appendFresh appends to fresh the slots of next that get a new target:
// targets not in cur, or in cur with another slot.
func appendFresh[K comparable](fresh []uint32, cur, next map[K]watchVal) []uint32 {
	for k, v := range next {
		if old, ok := cur[k]; !ok || old.Slot != v.Slot {
			fresh = append(fresh, v.Slot)
		}
	}
	return fresh
}

// without returns cur without the targets whose slot is marked in drop, or
// cur itself when it has none.
func without[K comparable](cur map[K]watchVal, drop []bool) map[K]watchVal {
	n := 0
	for _, v := range cur {
		if drop[v.Slot] {
			n++
		}
	}
	if n == 0 {
		return cur
	}
	out := make(map[K]watchVal, len(cur)-n)
	for k, v := range cur {
		if !drop[v.Slot] {
			out[k] = v
		}
	}
	return out
}

// publish4 and publish6 make next the family's watched set, when it is
// not already.
func (p *Passive) publish4(next map[uint64]watchVal) error {
	if maps.Equal(p.cur4, next) {
		return nil
	}
	if err := publish(p, p.objs.Watch4, p.tmpl4, layout4, &p.tab4, next); err != nil {
		return fmt.Errorf("publish IPv4 watch table of %d targets: %w", len(next), err)
	}
	p.cur4 = next
	return nil
}

func (p *Passive) publish6(next map[watchKey6]watchVal) error {
	if maps.Equal(p.cur6, next) {
		return nil
	}
	if err := publish(p, p.objs.Watch6, p.tmpl6, layout6, &p.tab6, next); err != nil {
		return fmt.Errorf("publish IPv6 watch table of %d targets: %w", len(next), err)
	}
	p.cur6 = next
	return nil
}

// tableSeeds is how many seeds a table size is tried with before a bigger
// one: with at most half the cells used, a seed that leaves a target more
// than watchProbes cells from its home is rare.
const tableSeeds = 4

// publish builds the table of entries and puts it into outer in place of
// *tab, which it then closes; with no entries, outer is emptied. The table
// is created from tmpl, filled through mmap, unmapped and frozen before it
// is published: the program never sees it change.
func publish[K comparable](p *Passive, outer *ebpf.Map, tmpl *ebpf.MapSpec, l *tableLayout[K], tab **ebpf.Map, entries map[K]watchVal) error {
	if len(entries) == 0 {
		if err := outer.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove table: %w", err)
		}
		err := (*tab).Close()
		*tab = nil
		return err
	}
	for cells := tableCells(len(entries)); cells <= maxTableCells; cells *= 2 {
		m, ok, err := buildTable(tmpl, l, cells, entries, p.seed)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := outer.Put(uint32(0), m); err != nil {
			return errors.Join(fmt.Errorf("publish table: %w", err), m.Close())
		}
		old := *tab
		*tab = m
		return old.Close()
	}
	return fmt.Errorf("no table of up to %d cells holds every target within %d cells of its home", maxTableCells, watchProbes)
}

// buildTable creates a table of cells cells from tmpl and fills it with
// entries; ok is false (and no table returned) when no seed tried places
// every target within watchProbes cells of its home.
func buildTable[K comparable](tmpl *ebpf.MapSpec, l *tableLayout[K], cells int, entries map[K]watchVal, seed func() uint64) (_ *ebpf.Map, ok bool, err error) {
	spec := tmpl.Copy()
	spec.MaxEntries = uint32(cells + 1)
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, false, fmt.Errorf("create table of %d cells: %w", cells, err)
	}
	defer func() {
		if !ok {
			err = errors.Join(err, m.Close())
			m = nil
		}
	}()
	size := l.tableBytes(cells)
	pg := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+pg-1)/pg*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false, fmt.Errorf("map table of %d cells: %w", cells, err)
	}
	buf := mem[:size]
	for try := range tableSeeds {
		if try > 0 {
			clear(buf)
		}
		if ok = l.fill(buf, seed(), entries); ok {
			break
		}
	}
	if err := unix.Munmap(mem); err != nil {
		ok = false
		return nil, false, fmt.Errorf("unmap table: %w", err)
	}
	if !ok {
		return nil, false, nil
	}
	if err := m.Freeze(); err != nil {
		ok = false
		return nil, false, fmt.Errorf("freeze table: %w", err)
	}
	return m, true, nil
}

// checkWatch validates entries and returns them as the tables' keys and
// values.
func (p *Passive) checkWatch(entries []WatchEntry) (map[uint64]watchVal, map[watchKey6]watchVal, error) {
	n4 := 0
	for _, e := range entries {
		if e.Addr.Addr().Unmap().Is4() {
			n4++
		}
	}
	next4 := make(map[uint64]watchVal, n4)
	next6 := make(map[watchKey6]watchVal, len(entries)-n4)
	used := make([]uint64, (p.opt.MaxTargets+63)/64) // slots taken so far
	for i, e := range entries {
		addr := e.Addr.Addr().Unmap().WithZone("")
		name := func() string { return fmt.Sprintf("watch entry %d (%s)", i, e.Addr) }
		switch {
		case !addr.IsValid():
			return nil, nil, fmt.Errorf("%s: no address", name())
		case e.Addr.Port() == 0:
			return nil, nil, fmt.Errorf("%s: port 0", name())
		case int64(e.Slot) >= int64(p.opt.MaxTargets):
			return nil, nil, fmt.Errorf("%s: slot %d outside 0 to %d", name(), e.Slot, p.opt.MaxTargets-1)
		case e.Threshold < 1 || e.Threshold > maxPassiveThreshold:
			return nil, nil, fmt.Errorf("%s: threshold %d outside 1 to %d", name(), e.Threshold, maxPassiveThreshold)
		}
		if used[e.Slot/64]&(1<<(e.Slot%64)) != 0 {
			return nil, nil, fmt.Errorf("%s: slot %d already taken by entry %d", name(), e.Slot, slotOwner(entries[:i], e.Slot))
		}
		used[e.Slot/64] |= 1 << (e.Slot % 64)
		v := watchVal{Slot: e.Slot, Threshold: uint16(e.Threshold)}
		ap := netip.AddrPortFrom(addr, e.Addr.Port())
		dup := false
		if addr.Is4() {
			k := key4Of(ap)
			_, dup = next4[k]
			next4[k] = v
		} else {
			k := key6Of(ap)
			_, dup = next6[k]
			next6[k] = v
		}
		if dup {
			return nil, nil, fmt.Errorf("%s: %s watched twice", name(), ap)
		}
	}
	return next4, next6, nil
}

// slotOwner returns the index of the entry with slot.
func slotOwner(entries []WatchEntry, slot uint32) int {
	for i, e := range entries {
		if e.Slot == slot {
			return i
		}
	}
	return -1
}

// zeroStats resets the counters of slots.
func (p *Passive) zeroStats(slots []uint32) error {
	zeros := make([]passiveStats, min(len(slots), passiveBatch))
	for lo := 0; lo < len(slots); lo += passiveBatch {
		hi := min(lo+passiveBatch, len(slots))
		n, err := p.objs.Stats.BatchUpdate(slots[lo:hi], zeros[:hi-lo], nil)
		if err != nil {
			return fmt.Errorf("reset counters of slot %d: %w", slots[min(lo+n, len(slots)-1)], err)
		}
	}
	return nil
}

// Stats returns the counters of slot.
func (p *Passive) Stats(slot uint32) (PassiveStats, error) {
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return PassiveStats{}, errPassiveClosed
	}
	if int64(slot) >= int64(p.opt.MaxTargets) {
		return PassiveStats{}, fmt.Errorf("passive slot %d outside 0 to %d", slot, p.opt.MaxTargets-1)
	}
	var s passiveStats
	if err := p.objs.Stats.Lookup(slot, &s); err != nil {
		return PassiveStats{}, fmt.Errorf("read passive counters of slot %d: %w", slot, err)
	}
	return PassiveStats{
		Connected: s.Connected, Refused: s.Refused, TimedOut: s.TimedOut, Unreachable: s.Unreachable,
		Abandoned: s.Abandoned, Reset: s.Reset, Retransmits: s.Retransmits,
		Handshakes: s.Handshakes, HandshakeSum: time.Duration(s.HandshakeNs), Run: s.Run,
	}, nil
}

// Read delivers the ring's records to fn, in the order the kernel wrote them,
// until ctx is done (it returns ctx.Err()) or the Passive is closed (an
// error matching [os.ErrClosed]). fn runs in Read's goroutine and should
// return quickly: while it runs, records wait in the ring and, when it is
// full, are lost (counted in [Passive.Drops]). A second Read while one runs
// returns [ErrPassiveReading].
func (p *Passive) Read(ctx context.Context, fn func(PassiveEvent)) error {
	if !p.reading.CompareAndSwap(false, true) {
		return ErrPassiveReading
	}
	defer p.reading.Store(false)
	p.life.RLock()
	closed := p.closed
	p.life.RUnlock()
	if closed {
		return errPassiveClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Flush wakes the blocked read, which returns ErrFlushed once the
	// records before it are read; Close wakes it with ErrClosed.
	stop := context.AfterFunc(ctx, func() { _ = p.reader.Flush() })
	defer stop()
	var rec ringbuf.Record
	var ev PassiveEvent
	for {
		err := p.reader.ReadInto(&rec)
		switch {
		case err == nil:
			if DecodePassiveEvent(rec.RawSample, &ev) == nil {
				fn(ev)
			}
		case errors.Is(err, ringbuf.ErrFlushed):
			if err := ctx.Err(); err != nil {
				return err
			}
		case errors.Is(err, os.ErrClosed):
			return errPassiveClosed
		default:
			return fmt.Errorf("read passive ring: %w", err)
		}
	}
}

// Drops returns the failure records not sent since load: those the per-
// target rate bound left out (past the threshold) and those lost to a full
// ring. Counters are exact either way ([Passive.Stats]).
func (p *Passive) Drops() (rateLimited, ringFull uint64) {
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return 0, 0
	}
	// Memory-mapped global data: no system call, and it cannot fail but
	// for a size mismatch, which the generated bindings rule out.
	_ = p.objs.DroppedRate.Get(&rateLimited)
	_ = p.objs.DroppedRing.Get(&ringFull)
	return rateLimited, ringFull
}

// Dropped returns the records not sent since load, both kinds of
// [Passive.Drops] together; 0 after Close.
func (p *Passive) Dropped() uint64 {
	r, f := p.Drops()
	return r + f
}

// Missed returns the times since load that the kernel did not run one of
// the observer's programs because a BPF program was already running on
// that CPU (a softirq, a timer's SYN timeout say, interrupting one): each
// is a state change or a retransmission of some socket that went unseen,
// so an outcome may be missing from the counters. Linux 5.12 and later;
// 0 after Close.
func (p *Passive) Missed() uint64 {
	p.life.RLock()
	defer p.life.RUnlock()
	if p.closed {
		return 0
	}
	var n uint64
	for _, prog := range []*ebpf.Program{p.objs.PassiveState, p.objs.PassiveRetransmit} {
		if st, err := prog.Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}

// attach attaches each program to its tracepoint once more, both or
// neither; p.life is held for writing or p is not yet shared.
func (p *Passive) attach() error {
	var ls []link.Link
	for _, prog := range []*ebpf.Program{p.objs.PassiveState, p.objs.PassiveRetransmit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			errs := []error{fmt.Errorf("attach BTF tracepoint program %s (needs CAP_BPF and CAP_PERFMON): %w", prog, err)}
			for _, l := range ls {
				errs = append(errs, l.Close())
			}
			return errors.Join(errs...)
		}
		ls = append(ls, l)
	}
	p.links = append(p.links, ls...)
	return nil
}

// maxAttachments bounds [Passive.SetAttachments].
const maxAttachments = 64

// SetAttachments attaches each program n times to its tracepoint; 0
// detaches them. An observer starts attached once. Detached, the kernel
// runs nothing of the observer on TCP state changes: connections go
// uncounted and uncharged, while the watched set, the counters and the ring
// stay as they are. With n above 1 every state change runs the programs n
// times and is counted n times: only benchmarks want that, to lift the
// programs' cost n-fold above the noise of the machine.
func (p *Passive) SetAttachments(n int) error {
	if n < 0 || n > maxAttachments {
		return fmt.Errorf("passive attachments %d: want 0 to %d", n, maxAttachments)
	}
	p.life.Lock()
	defer p.life.Unlock()
	if p.closed {
		return errPassiveClosed
	}
	for len(p.links) < 2*n {
		if err := p.attach(); err != nil {
			return err
		}
	}
	var errs []error
	for len(p.links) > 2*n {
		last := len(p.links) - 1
		errs = append(errs, p.links[last].Close())
		p.links = p.links[:last]
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detach passive programs: %w", err)
	}
	return nil
}

// Close stops a blocked Read, detaches the programs and frees their maps, in
// the reverse order of their creation. It returns every failure joined;
// later calls return nil.
func (p *Passive) Close() error {
	var errs []error
	if p.reader != nil {
		// Before taking the lock: a blocked Read holds none, and this wakes
		// it. Closing a closed reader returns nil.
		errs = append(errs, p.reader.Close())
	}
	p.life.Lock()
	defer p.life.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for i := len(p.links) - 1; i >= 0; i-- {
		errs = append(errs, p.links[i].Close())
	}
	errs = append(errs, p.tab6.Close(), p.tab4.Close(), p.objs.Close())
	return errors.Join(errs...)
}
