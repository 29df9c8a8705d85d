package bpf

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// keysAtHome returns n distinct IPv4 keys whose home cell, with seed and
// mask, is home.
func keysAtHome(t *testing.T, seed uint64, mask uint32, home uint32, n int) []uint64 {
	t.Helper()
	var keys []uint64
	for i := uint32(1); len(keys) < n; i++ {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], 0x0a000000+i)
		k := key4Of(netip.AddrPortFrom(netip.AddrFrom4(a), 443))
		if uint32(layout4.home(seed, k))&mask == home {
			keys = append(keys, k)
		}
		if i > 1<<24 {
			t.Fatalf("found %d keys at home %d, want %d", len(keys), home, n)
		}
	}
	return keys
}

func table4(cells int) []byte { return make([]byte, layout4.tableBytes(cells)) }

// TestWatchTableCollisions fills a table with targets that share one home
// cell, the last of them at the end of the table: each lies in the next
// free cell, wrapping around, and every one is found; a target not
// watched with the same home is not.
func TestWatchTableCollisions(t *testing.T) {
	const seed, cells, home = 7, 64, 60
	keys := keysAtHome(t, seed, cells-1, home, 11)
	entries := map[uint64]watchVal{}
	for i, k := range keys[:10] {
		entries[k] = watchVal{Slot: uint32(i), Threshold: uint16(i + 1)}
	}
	buf := table4(cells)
	if !layout4.fill(buf, seed, entries) {
		t.Fatal("fill failed")
	}
	used := 0
	for i := 1; i <= cells; i++ {
		if _, _, ok := layout4.get(buf[i*16 : i*16+16]); ok {
			used++
			// Cells 61 to 64, then 1 to 6 (wrapped).
			if !(i > home || i <= 10-(cells-home)) {
				t.Errorf("cell %d used, outside the run from the home cell %d", i, home+1)
			}
		}
	}
	if used != 10 {
		t.Errorf("%d cells used, want 10", used)
	}
	for k, want := range entries {
		if got, ok := layout4.lookup(buf, k); !ok || got != want {
			t.Errorf("lookup %#x: %+v %v, want %+v", k, got, ok, want)
		}
	}
	if got, ok := layout4.lookup(buf, keys[10]); ok {
		t.Errorf("lookup of a target not watched, same home: %+v", got)
	}
}

// TestWatchTableProbeBound fills a table with watchProbes targets of one
// home (they fit, the last at the bound) and with one more (fill reports
// that the seed does not do).
func TestWatchTableProbeBound(t *testing.T) {
	const seed, cells = 3, 128
	keys := keysAtHome(t, seed, cells-1, 5, watchProbes+1)
	entries := map[uint64]watchVal{}
	for i, k := range keys[:watchProbes] {
		entries[k] = watchVal{Slot: uint32(i), Threshold: 1}
	}
	buf := table4(cells)
	if !layout4.fill(buf, seed, entries) {
		t.Fatalf("fill of %d targets of one home failed", watchProbes)
	}
	for k, want := range entries {
		if got, ok := layout4.lookup(buf, k); !ok || got != want {
			t.Errorf("lookup %#x: %+v %v, want %+v", k, got, ok, want)
		}
	}
	entries[keys[watchProbes]] = watchVal{Slot: watchProbes, Threshold: 1}
	if layout4.fill(table4(cells), seed, entries) {
		t.Errorf("fill of %d targets of one home succeeded, want false", watchProbes+1)
	}
	// With another seed they spread.
	if !layout4.fill(table4(cells), seed+1, entries) {
		t.Errorf("fill with another seed failed")
	}
}

// TestWatchTableProperty builds tables of random IPv4 and IPv6 sets, at
// the load factor Watch uses, and compares every lookup, of members and of
// others, with a Go map.
func TestWatchTableProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		n := 1 + rng.IntN(3000)
		want4 := map[uint64]watchVal{}
		want6 := map[watchKey6]watchVal{}
		var probes []netip.AddrPort
		for i := range n {
			ap := randomAddrPort(rng)
			probes = append(probes, ap, randomAddrPort(rng))
			v := watchVal{Slot: uint32(i), Threshold: uint16(1 + rng.IntN(255))}
			if ap.Addr().Is4() {
				want4[key4Of(ap)] = v
			} else {
				want6[key6Of(ap)] = v
			}
		}
		buf4 := make([]byte, layout4.tableBytes(tableCells(len(want4))))
		buf6 := make([]byte, layout6.tableBytes(tableCells(len(want6))))
		if !layout4.fill(buf4, rng.Uint64(), want4) || !layout6.fill(buf6, rng.Uint64(), want6) {
			t.Fatalf("round %d: fill of %d and %d targets failed", round, len(want4), len(want6))
		}
		for _, ap := range probes {
			var got, want watchVal
			var ok, wok bool
			if ap.Addr().Is4() {
				got, ok = layout4.lookup(buf4, key4Of(ap))
				want, wok = want4[key4Of(ap)]
			} else {
				got, ok = layout6.lookup(buf6, key6Of(ap))
				want, wok = want6[key6Of(ap)]
			}
			if got != want || ok != wok {
				t.Fatalf("round %d: lookup %s: %+v %v, want %+v %v", round, ap, got, ok, want, wok)
			}
		}
	}
}

// randomAddrPort returns an IPv4 or IPv6 target from a small space, so
// that some repeat.
func randomAddrPort(rng *rand.Rand) netip.AddrPort {
	port := uint16(1 + rng.IntN(4))
	if rng.IntN(2) == 0 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(8)), byte(rng.IntN(256))}), port)
	}
	var a [16]byte
	a[0], a[1], a[15] = 0x20, 0x01, byte(rng.IntN(256))
	a[7] = byte(rng.IntN(8))
	return netip.AddrPortFrom(netip.AddrFrom16(a), port)
}

func TestTableCells(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 16}, {1, 16}, {8, 16}, {9, 32}, {1000, 2048}, {1 << 20, 1 << 21}, {1_000_000, 1 << 21}} {
		if got := tableCells(c.n); got != c.want {
			t.Errorf("tableCells(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
