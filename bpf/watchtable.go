package bpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The watch tables are open-addressing hash tables with linear probing, laid
// out as passive.c reads them: cell 0 is a header (the seed and the mask),
// cells 1 to mask+1 hold the targets, each at most watchProbes cells after
// its home cell 1 + (hash & mask). A table is built whole, in memory no
// program sees yet, and published by one map update; it is never written
// after that. A table has a power of two of at least 2n cells for n
// targets (load factor at most 1/2), so a lookup of a target not watched
// ends at an empty cell after 2.5 cells on average.

// watchProbes is WATCH_PROBES in passive.c: the most cells a lookup reads.
const watchProbes = 32

// Table sizes, in cells without the header.
const (
	minTableCells = 16
	maxTableCells = 1 << 26
)

// watchVal is where a watched target's evidence goes.
type watchVal struct {
	Slot      uint32 // index into the stats array
	Threshold uint16 // failures that make a trigger, 1 to 255
}

// watchKey6 is an IPv6 target as a cell6 holds it.
type watchKey6 struct {
	Hi, Lo uint64 // address bytes 0 to 7 and 8 to 15, read natively
	Port   uint16 // network order, read natively
}

// key4Of returns the key of an IPv4 target as a cell4 holds it: the address
// and the port in network order, read natively, as address << 16 | port.
func key4Of(ap netip.AddrPort) uint64 {
	a := ap.Addr().As4()
	return uint64(binary.NativeEndian.Uint32(a[:]))<<16 | uint64(netOrder(ap.Port()))
}

// key6Of returns the key of an IPv6 target as a cell6 holds it.
func key6Of(ap netip.AddrPort) watchKey6 {
	a := ap.Addr().As16()
	ne := binary.NativeEndian
	return watchKey6{Hi: ne.Uint64(a[:8]), Lo: ne.Uint64(a[8:]), Port: netOrder(ap.Port())}
}

// netOrder returns port as it lies in memory in network order, read
// natively; it is its own inverse.
func netOrder(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return binary.NativeEndian.Uint16(b[:])
}

// mix is MurmurHash3's 64-bit finalizer, as in passive.c.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// tableLayout describes the cells of one family's table (struct cell4 or
// struct cell6 in passive.c).
type tableLayout[K comparable] struct {
	size int                                       // bytes per cell (the array's element size)
	home func(seed uint64, k K) uint64             // the hash; the home cell is 1 + (hash & mask)
	head func(c []byte, seed uint64, mask uint32)  // writes the header
	seed func(c []byte) (seed uint64, mask uint32) // reads the header
	put  func(c []byte, k K, v watchVal)           // fills an empty cell
	get  func(c []byte) (K, watchVal, bool)        // false for an empty cell
}

// Offsets in struct cell4: key u64, slot u32, threshold u16, flags u16.
var layout4 = &tableLayout[uint64]{
	size: 16,
	home: func(seed, k uint64) uint64 { return mix(k ^ seed) },
	head: func(c []byte, seed uint64, mask uint32) {
		binary.NativeEndian.PutUint64(c[0:], seed)
		binary.NativeEndian.PutUint32(c[8:], mask)
	},
	seed: func(c []byte) (uint64, uint32) {
		return binary.NativeEndian.Uint64(c[0:]), binary.NativeEndian.Uint32(c[8:])
	},
	put: func(c []byte, k uint64, v watchVal) {
		binary.NativeEndian.PutUint32(c[8:], v.Slot)
		binary.NativeEndian.PutUint16(c[12:], v.Threshold)
		binary.NativeEndian.PutUint64(c[0:], k)
	},
	get: func(c []byte) (uint64, watchVal, bool) {
		ne := binary.NativeEndian
		k := ne.Uint64(c[0:])
		return k, watchVal{Slot: ne.Uint32(c[8:]), Threshold: ne.Uint16(c[12:])}, k != 0
	},
}

// Offsets in struct cell6: hi u64, lo u64, port u16, threshold u16, slot u32.
var layout6 = &tableLayout[watchKey6]{
	size: 24,
	home: func(seed uint64, k watchKey6) uint64 { return mix(mix(mix(k.Hi^seed)^k.Lo) ^ uint64(k.Port)) },
	head: func(c []byte, seed uint64, mask uint32) {
		binary.NativeEndian.PutUint64(c[0:], seed)
		binary.NativeEndian.PutUint32(c[20:], mask)
	},
	seed: func(c []byte) (uint64, uint32) {
		return binary.NativeEndian.Uint64(c[0:]), binary.NativeEndian.Uint32(c[20:])
	},
	put: func(c []byte, k watchKey6, v watchVal) {
		ne := binary.NativeEndian
		ne.PutUint64(c[0:], k.Hi)
		ne.PutUint64(c[8:], k.Lo)
		ne.PutUint16(c[18:], v.Threshold)
		ne.PutUint32(c[20:], v.Slot)
		ne.PutUint16(c[16:], k.Port)
	},
	get: func(c []byte) (watchKey6, watchVal, bool) {
		ne := binary.NativeEndian
		k := watchKey6{Hi: ne.Uint64(c[0:]), Lo: ne.Uint64(c[8:]), Port: ne.Uint16(c[16:])}
		return k, watchVal{Slot: ne.Uint32(c[20:]), Threshold: ne.Uint16(c[18:])}, k.Port != 0
	},
}

// tableCells returns the cells of a table for n targets: a power of two of
// at least 2n, and at least minTableCells.
func tableCells(n int) int {
	c := minTableCells
	for c < 2*n {
		c *= 2
	}
	return c
}

// tableBytes returns the size of a table of cells cells and its header.
func (l *tableLayout[K]) tableBytes(cells int) int { return (cells + 1) * l.size }

// fill writes a table of entries into buf, which holds the header and a
// power of two of cells, all zero, seeded with seed. It reports false, with
// buf partly written, when some entry would lie watchProbes or more cells
// after its home: the caller tries another seed or a bigger table.
//
// It inserts in the Robin Hood way: a target that has come further from
// its home than the one in a cell takes the cell, and the one it displaced
// goes on. The targets are where linear probing finds them (each between
// its home and the next empty cell), but the furthest lies much nearer its
// home: at a load factor of 1/2 and a million targets, about 10 cells
// instead of about 40.
func (l *tableLayout[K]) fill(buf []byte, seed uint64, entries map[K]watchVal) bool {
	cells := len(buf)/l.size - 1
	if cells < 1 || cells&(cells-1) != 0 || len(entries) > cells {
		panic(fmt.Sprintf("watch table of %d bytes for %d entries", len(buf), len(entries)))
	}
	mask := uint32(cells - 1)
	l.head(buf[:l.size], seed, mask)
	dist := make([]uint8, cells) // how far each used cell's target is from its home
	for k, v := range entries {
		idx := uint32(l.home(seed, k)) & mask
		for d := 0; ; d++ {
			if d >= watchProbes {
				return false
			}
			c := buf[(1+int(idx))*l.size:][:l.size]
			ck, cv, used := l.get(c)
			if !used {
				l.put(c, k, v)
				dist[idx] = uint8(d)
				break
			}
			if int(dist[idx]) < d {
				clear(c)
				l.put(c, k, v)
				k, v, d, dist[idx] = ck, cv, int(dist[idx]), uint8(d)
			}
			idx = (idx + 1) & mask
		}
	}
	return true
}

// lookup finds k in a filled table the way passive.c does.
func (l *tableLayout[K]) lookup(buf []byte, k K) (watchVal, bool) {
	seed, mask := l.seed(buf[:l.size])
	pos := l.home(seed, k)
	for i := range uint64(watchProbes) {
		off := (1 + int(uint32(pos+i)&mask)) * l.size
		ck, v, used := l.get(buf[off : off+l.size])
		if !used {
			return watchVal{}, false
		}
		if ck == k {
			return v, true
		}
	}
	return watchVal{}, false
}
