package fleet

import "net/netip"

// Target is one unique (address, port, check). It holds no pointer, slice or
// string (24 bytes), so ten million of them stay compact and the garbage
// collector never scans them.
type Target struct {
	ip    [16]byte // the address, IPv4 as IPv4-mapped IPv6; see Addr
	Port  uint16
	Check uint16 // index of the check (config.Config.Checks)
	// lead holds the leader's id (see Leader) in its low bits, and the
	// target's flags in the top two: 24 bytes a target, not 28.
	lead uint32
}

const (
	leadMask     = 1<<30 - 1
	leadDisabled = 1 << 30 // see Disabled
	leadValid    = 1 << 31 // ip holds an address (a placeholder's does not)
)

// MaxTargetID is the largest target id: Target keeps ids in 30 bits.
const MaxTargetID = leadMask

// Leader is the id of the target that leads this target's probe stream:
// its own id when it leads. Only leaders are probed; the engine probes a
// leader at the highest rate any member of its stream wants and feeds each
// result to every member.
func (t Target) Leader() uint32 { return t.lead & leadMask }

// SetLeader sets the target's Leader.
func (t *Target) SetLeader(id uint32) { t.lead = t.lead&^leadMask | id&leadMask }

// Disabled is true when no pool probes the target: every pool that lists
// it disables it (E6) or has its health checks off. Then no pool needs its
// health and it is not probed.
func (t Target) Disabled() bool { return t.lead&leadDisabled != 0 }

// SetDisabled sets whether the target is Disabled.
func (t *Target) SetDisabled(off bool) {
	t.lead &^= leadDisabled
	if off {
		t.lead |= leadDisabled
	}
}

// Placeholder returns the target that stands at a free id: no address,
// disabled, leading itself.
func Placeholder(id uint32) Target { return Target{lead: id&leadMask | leadDisabled} }

// NewTarget returns a target at a, port, of check index check, leading
// its own stream (Leader is the caller's to set).
func NewTarget(a netip.Addr, port, check uint16) Target {
	t := Target{ip: a.As16(), Port: port, Check: check}
	if a.IsValid() {
		t.lead = leadValid
	}
	return t
}

// Valid reports whether the target has an address: false for a
// placeholder (a free id). It costs what Addr().IsValid() would, without
// building the address.
func (t *Target) Valid() bool { return t.lead&leadValid != 0 }

// Addr returns the target's address; the zero Addr for a placeholder.
func (t Target) Addr() netip.Addr {
	if t.lead&leadValid == 0 {
		return netip.Addr{}
	}
	return netip.AddrFrom16(t.ip).Unmap()
}

// IP16 returns the target's address as 16 bytes (IPv4 as IPv4-mapped
// IPv6), for packet builders; nil for a placeholder.
func (t *Target) IP16() *[16]byte {
	if t.lead&leadValid == 0 {
		return nil
	}
	return &t.ip
}

// AddrPort returns the target's endpoint.
func (t Target) AddrPort() netip.AddrPort { return netip.AddrPortFrom(t.Addr(), t.Port) }
