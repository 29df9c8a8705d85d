package syn

import (
	"fmt"
	"net"
	"net/netip"
)

// resolveInterface fills in the default source addresses and finds the
// capture interface.
func resolveInterface(cfg *Config) (*net.Interface, error) {
	var first4, first6 netip.Addr
	see := func(a netip.Addr) {
		if a.Is4() && !first4.IsValid() {
			first4 = a
		} else if a.Is6() && !first6.IsValid() {
			first6 = a
		}
	}
	for _, a := range cfg.Destinations {
		see(a.Unmap())
	}
	for id := 0; id < cfg.Table.Len() && !(first4.IsValid() && first6.IsValid()); id++ {
		if ip, _ := cfg.Table.Endpoint16(uint32(id)); ip != nil {
			see(netip.AddrFrom16(*ip).Unmap())
		}
	}
	for _, f := range []struct {
		src   *netip.Addr
		first netip.Addr
	}{{&cfg.Source4, first4}, {&cfg.Source6, first6}} {
		if f.src.IsValid() || !f.first.IsValid() {
			continue
		}
		src, err := routeSource(f.first)
		if err != nil {
			return nil, err
		}
		*f.src = src
	}
	if cfg.Source4.IsValid() && !cfg.Source4.Unmap().Is4() || cfg.Source6.IsValid() && !cfg.Source6.Is6() {
		return nil, fmt.Errorf("source addresses %v, %v are not of their family", cfg.Source4, cfg.Source6)
	}
	if cfg.Interface != "" {
		iface, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("capture interface: %w", err)
		}
		return iface, nil
	}
	src := cfg.Source4
	if !src.IsValid() {
		src = cfg.Source6
	}
	return interfaceOf(src)
}

// routeSource asks the kernel which source address it would use towards dst,
// by connecting a UDP socket (which sends nothing).
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// interfaceOf returns the interface that has address a.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifaces {
		addrs, err := ifaces[i].Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == a {
					return &ifaces[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no interface has source address %v: set the interface", a)
}
