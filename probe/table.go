package probe

import (
	"fmt"
	"net/netip"
	"sync/atomic"
)

// Table maps target ids to their endpoints (address and port) in a compact
// form: 18 bytes a target and no pointers, so a million-target table is 18 MB
// that the garbage collector never scans. IPv4 addresses are stored in their
// IPv4-mapped IPv6 form and come back as IPv4.
//
// A Table grows and changes while probers read it: reads are safe for
// concurrent use with one writer ([Table.Add], [Table.Put]) at a time. The
// endpoints live in blocks; an id's endpoint is written before the id counts
// ([Table.Len]), and a changed endpoint goes into a copy of its block, so a
// reader never sees an entry change under it.
type Table struct {
	n   atomic.Uint32
	dir atomic.Pointer[[]*tableBlock]
}

const (
	tableShift = 12 // 4096 endpoints, 72 KiB, a block
	tableMask  = 1<<tableShift - 1
)

type tableBlock struct {
	ip   [1 << tableShift][16]byte
	port [1 << tableShift]uint16
}

// NewTable returns an empty table with room for n targets before it grows.
func NewTable(n int) *Table {
	mem := make([]tableBlock, (n+tableMask)>>tableShift) // one allocation for the first n
	blocks := make([]*tableBlock, len(mem))
	for i := range mem {
		blocks[i] = &mem[i]
	}
	t := &Table{}
	t.dir.Store(&blocks)
	return t
}

// Add appends an endpoint and returns its id.
func (t *Table) Add(ap netip.AddrPort) uint32 {
	id := t.n.Load()
	d := t.grow(id)
	b := d[id>>tableShift]
	b.ip[id&tableMask], b.port[id&tableMask] = ap.Addr().As16(), ap.Port()
	t.n.Store(id + 1)
	return id
}

// TableEntry is one id's endpoint, for [Table.Put].
type TableEntry struct {
	ID       uint32
	Endpoint netip.AddrPort
}

// Put sets the endpoints of the entries' ids: ids below Len change, the
// others are added (ids skipped over read as the zero endpoint). The
// changes are published together when Put returns.
func (t *Table) Put(entries []TableEntry) {
	n := t.n.Load()
	top := n
	for _, e := range entries {
		top = max(top, e.ID+1)
	}
	d := t.grow(top - 1)
	copied := map[uint32]bool{}
	for _, e := range entries {
		bi := e.ID >> tableShift
		if e.ID < n && !copied[bi] {
			if len(copied) == 0 {
				d = append([]*tableBlock(nil), d...)
			}
			nb := *d[bi]
			d[bi] = &nb
			copied[bi] = true
		}
		b := d[bi]
		b.ip[e.ID&tableMask], b.port[e.ID&tableMask] = e.Endpoint.Addr().As16(), e.Endpoint.Port()
	}
	if len(copied) > 0 {
		t.dir.Store(&d)
	}
	t.n.Store(top)
}

// grow makes sure a block holds id and returns the directory.
func (t *Table) grow(id uint32) []*tableBlock {
	d := *t.dir.Load()
	if int(id>>tableShift) < len(d) {
		return d
	}
	grown := append([]*tableBlock(nil), d...)
	for len(grown) <= int(id>>tableShift) {
		grown = append(grown, new(tableBlock))
	}
	t.dir.Store(&grown)
	return grown
}

// Len returns the number of ids: every id below it has an endpoint.
func (t *Table) Len() int { return int(t.n.Load()) }

// Endpoint returns the endpoint of id. It panics when id is out of range, like
// a slice index.
func (t *Table) Endpoint(id uint32) netip.AddrPort {
	b := t.block(id)
	return netip.AddrPortFrom(netip.AddrFrom16(b.ip[id&tableMask]).Unmap(), b.port[id&tableMask])
}

// Endpoint16 returns id's address in 16-byte form (IPv4 as IPv4-mapped
// IPv6), for packet builders that patch headers without building a
// netip.Addr, and its port; nil for an id out of range. The array it points
// to never changes: the table as [Endpoints].
func (t *Table) Endpoint16(id uint32) (*[16]byte, uint16) {
	if id >= t.n.Load() {
		return nil, 0
	}
	b := (*t.dir.Load())[id>>tableShift]
	return &b.ip[id&tableMask], b.port[id&tableMask]
}

var _ Endpoints = (*Table)(nil)

// Endpoints gives a prober the endpoint of each target id: a [Table], or
// a daemon's own targets. It is safe for concurrent use.
type Endpoints interface {
	// Len is how many ids there are: those below it may have an endpoint.
	Len() int
	// Endpoint16 returns id's address in 16-byte form (IPv4 as IPv4-mapped
	// IPv6) and its port, or nil when id has no endpoint (out of range, or a
	// free id). The array it points to does not change.
	Endpoint16(id uint32) (*[16]byte, uint16)
}

// Lookup returns the endpoint of id, or false when id is not in the table.
func (t *Table) Lookup(id uint32) (netip.AddrPort, bool) {
	if id >= t.n.Load() {
		return netip.AddrPort{}, false
	}
	return t.Endpoint(id), true
}

// block returns the block of id, panicking like a slice index when id is out
// of range.
func (t *Table) block(id uint32) *tableBlock {
	if id >= t.n.Load() {
		panic(fmt.Sprintf("probe.Table: id %d out of range [0:%d]", id, t.n.Load()))
	}
	return (*t.dir.Load())[id>>tableShift]
}

// String describes the table for debugging.
func (t *Table) String() string { return fmt.Sprintf("probe.Table(%d endpoints)", t.Len()) }
