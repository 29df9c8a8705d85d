package server

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe/endpoint"
	"github.com/sondeprobe/sonde/server/prober"
)

// The trust model of /probe. A check's probe_targets (config.ProbeAccess)
// says where /probe may send it:
//
//   - pools (the default): only to a target of the check's pools, so /probe
//     reaches nothing the scheduled probes do not;
//   - any: anywhere, as blackbox_exporter does, but the check's credentials
//     (extra headers, auth token, client certificate) only to targets of
//     its pools: others are probed without them;
//   - any_with_credentials: anywhere, credentials included.
//
// A target of the check's pools is an endpoint the running configuration
// probes with the check: the address and port of one of its targets
// (listed, read from a targets file or discovered; with -shard, of this
// shard), with the check's own protocol (a URL that turns an https check
// into http is another probe). The endpoint is what the probe connects to,
// whatever name the client gave: a host name that the configuration lists
// with the check and port takes the address the configuration resolved it
// to, without a lookup; any other name is looked up, and the address it
// resolves to decides. The probe then connects to that very address, so a
// name that resolves to something else a moment later changes nothing.
//
// Whatever probe_targets says, an address in a restricted block
// (link-local, cloud metadata: config.RestrictedBlock) is probed only when
// the check's probe_allow_addresses lists it.

// probeRefusal is why /probe does not send a check's probe where a client
// asked: the answer is 403 with its text.
type probeRefusal struct{ msg string }

func (e *probeRefusal) Error() string { return e.msg }

func refuse(format string, args ...any) error { return &probeRefusal{fmt.Sprintf(format, args...)} }

// checkIndex returns the index of the check named name in the generation's
// configuration, which has it.
func (g *generation) checkIndex(name string) uint16 {
	i, _ := slices.BinarySearchFunc(g.cfg.Checks, name, func(c *config.Check, n string) int { return strings.Compare(c.Name, n) })
	return uint16(i)
}

// shotAddr returns the address shot goes to: that of a host name the
// configuration lists with the check and port, else the address the name
// resolves to with r under the check's ip_family and source_address
// (prober.Address, as `sonde probe` resolves it), or the address the client
// gave.
func (g *generation) shotAddr(ctx context.Context, shot *oneShot, r endpoint.Resolver) (netip.Addr, error) {
	t := shot.target
	if t.Host == "" {
		return t.Addr, nil
	}
	if a, ok := g.configuredAddr(g.checkIndex(shot.check.Name), t.Host, t.Port); ok {
		shot.log.Info("target address from the configuration", "host", t.Host, "addr", a)
		return a, nil
	}
	shot.log.Info("resolving target address", "host", t.Host, "ip_family", shot.check.IPFamily)
	a, err := prober.Address(ctx, r, &shot.check, t.TargetEntry, 0)
	if err != nil {
		return netip.Addr{}, err
	}
	shot.log.Info("resolved target address", "addr", a)
	return a, nil
}

// configuredAddr returns the address of a target of check ci listed (or
// discovered) as host with port, as the configuration last resolved it,
// picked by endpoint.Pick as a lookup for /probe picks it: the IPv4 one
// where the name has both. Like checkProbes it walks, one walk at a time.
func (g *generation) configuredAddr(ci uint16, host string, port uint16) (netip.Addr, bool) {
	g.oneShots.walk.Lock()
	defer g.oneShots.walk.Unlock()
	var found []netip.Addr
	for id, name := range g.cfg.Hostnames {
		if name != host || int(id) >= len(g.cfg.Targets) {
			continue
		}
		t := &g.cfg.Targets[id]
		if t.Check != ci || t.Port != port || !t.Valid() {
			continue
		}
		found = append(found, t.Addr())
	}
	if picked := endpoint.Pick(found, endpoint.Any); len(picked) > 0 {
		return picked[0], true
	}
	return netip.Addr{}, false
}

// checkProbes reports whether check ci probes ap for one of its pools. It
// walks the targets (13 ms for ten million on a slow core), one walk at a
// time: however many /probe requests arrive, their walks take at most one
// CPU.
func (g *generation) checkProbes(ci uint16, ap netip.AddrPort) bool {
	g.oneShots.walk.Lock()
	defer g.oneShots.walk.Unlock()
	ip := ap.Addr().As16() // as a Target keeps it: IPv4 mapped
	port := ap.Port()
	for i := range g.cfg.Targets {
		t := &g.cfg.Targets[i]
		if t.Port == port && t.Check == ci && t.Valid() && *t.IP16() == ip {
			return true
		}
	}
	return false
}

// authorize decides whether shot may go to addr under its check's
// probe_targets and probe_allow_addresses. It returns a probeRefusal, or
// nil; with probe_targets any and a target outside the check's pools, it
// takes the check's credentials out of shot first.
func (g *generation) authorize(shot *oneShot, addr netip.Addr) error {
	ci := g.checkIndex(shot.check.Name)
	c := g.cfg.Checks[ci]
	ap := netip.AddrPortFrom(addr, shot.target.Port)
	if !c.ProbeAccess.Allows(addr) {
		blk, _ := config.RestrictedBlock(addr)
		return refuse("target %s is in %s, a link-local or metadata block: check %s may probe it only where its probe_allow_addresses lists it",
			ap, blk, c.Name)
	}
	if shot.check.Protocol == c.Protocol && g.checkProbes(ci, ap) {
		return nil
	}
	switch c.ProbeAccess.Targets {
	case config.ProbeTargetsPools:
		what := ap.String()
		if shot.check.Protocol != c.Protocol {
			what = shot.check.Protocol.String() + " to " + what
		}
		return refuse("%s is not a target of the pools of check %s (probe_targets: pools); /probe probes other targets only with a check that sets probe_targets: any",
			what, c.Name)
	case config.ProbeTargetsAny:
		if shot.check.HasCredentials() {
			shot.check.Probe = shot.check.Probe.WithoutCredentials()
			shot.withheld = true
			shot.log.Warn("probing without the check's headers, auth token and client certificate: the target is not one of its pools' (probe_targets: any)",
				"target", ap)
		}
	}
	return nil
}
