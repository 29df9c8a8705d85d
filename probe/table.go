package probe

import (
	"fmt"
	"net/netip"
)

// Table maps target ids to their endpoints (address and port) in a compact
// form: 18 bytes a target and no pointers, so a million-target table is 18 MB
// that the garbage collector never scans. IPv4 addresses are stored in their
// IPv4-mapped IPv6 form and come back as IPv4. A Table is not safe for
// concurrent writes; once filled it is read-only and safe for concurrent reads.
type Table struct {
	ip   [][16]byte
	port []uint16
}

// NewTable returns an empty table with room for n targets.
func NewTable(n int) *Table {
	return &Table{ip: make([][16]byte, 0, n), port: make([]uint16, 0, n)}
}

// Add appends an endpoint and returns its id.
func (t *Table) Add(ap netip.AddrPort) uint32 {
	id := uint32(len(t.ip))
	t.ip = append(t.ip, ap.Addr().As16())
	t.port = append(t.port, ap.Port())
	return id
}

// Len returns the number of endpoints.
func (t *Table) Len() int { return len(t.ip) }

// Endpoint returns the endpoint of id. It panics when id is out of range, like
// a slice index.
func (t *Table) Endpoint(id uint32) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(t.ip[id]).Unmap(), t.port[id])
}

// IP16 returns id's address in 16-byte form (IPv4 as IPv4-mapped IPv6), for
// packet builders that patch headers without building a netip.Addr.
func (t *Table) IP16(id uint32) *[16]byte { return &t.ip[id] }

// Port returns id's port.
func (t *Table) Port(id uint32) uint16 { return t.port[id] }

// Lookup returns the endpoint of id, or false when id is not in the table.
func (t *Table) Lookup(id uint32) (netip.AddrPort, bool) {
	if int(id) >= len(t.ip) {
		return netip.AddrPort{}, false
	}
	return t.Endpoint(id), true
}

// String describes the table for debugging.
func (t *Table) String() string { return fmt.Sprintf("probe.Table(%d endpoints)", len(t.ip)) }
