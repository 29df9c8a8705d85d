package server

import (
	"net/netip"
	"sync"

	"github.com/sondeprobe/sonde/config/discovery"
)

// testFound holds, per daemon, the targets tests made discovery find.
var testFound sync.Map // *Daemon → map[string]discovery.Found

// discover makes addrs ("addr:port") the targets discovery found for pool,
// the other pools' found targets as the last call left them, and applies
// them as the daemon applies a discovery runner's changes.
func discover(d *Daemon, pool string, addrs ...string) error {
	d.updateMu.Lock()
	defer d.updateMu.Unlock()
	v, _ := testFound.LoadOrStore(d, map[string]discovery.Found{})
	found := v.(map[string]discovery.Found)
	var f discovery.Found
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		f.Targets = append(f.Targets, discovery.Target{Addr: ap.Addr(), Port: ap.Port()})
	}
	found[pool] = f
	static := d.static
	if static == nil { // a configuration without discovery: the daemon keeps none
		cfg, err := d.opt.Load()
		if err != nil {
			return err
		}
		static = cfg.Static()
	}
	eff, err := static.WithFound(found)
	if err != nil {
		return err
	}
	_, _, _, err = d.apply(eff)
	return err
}
