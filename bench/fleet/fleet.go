package fleet

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sondeprobe/sonde/internal/netns"
	"github.com/sondeprobe/sonde/probe"
)

// ErrNotRoot is returned by [New] when the process lacks the privileges to
// create network namespaces.
var ErrNotRoot = errors.New("building a test fleet needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")

// Default addresses of a fleet. The fleet prefix is from 198.18.0.0/15, the
// range reserved for benchmarking (RFC 2544); the veth link uses TEST-NET-1 and
// the IPv6 documentation prefix, so no address can be mistaken for a real one.
var (
	DefaultPrefix   = netip.MustParsePrefix("198.18.0.0/16")
	DefaultPrefix6  = netip.MustParsePrefix("2001:db8:5eed::/112")
	proberLinkAddr  = netip.MustParsePrefix("192.0.2.1/30")
	fleetLinkAddr   = netip.MustParsePrefix("192.0.2.2/30")
	proberLinkAddr6 = netip.MustParsePrefix("2001:db8:ffff::1/64")
	fleetLinkAddr6  = netip.MustParsePrefix("2001:db8:ffff::2/64")
)

// Config describes a fleet. The zero value is a fleet answering for
// [DefaultPrefix] with no listener (every probe is refused by the kernel).
type Config struct {
	// Prefix is the IPv4 prefix the fleet answers for; default DefaultPrefix.
	// It must not contain 192.0.2.0/30, the veth link's addresses.
	Prefix netip.Prefix
	// Prefix6 is an optional IPv6 prefix the fleet also answers for, for
	// example DefaultPrefix6. The zero value means no IPv6 fleet.
	Prefix6 netip.Prefix
	// Listen are TCP ports with a listener on every fleet address, which
	// accepts connections and closes them at once.
	Listen []uint16
	// HTTP are TCP ports with an HTTP server on every fleet address that
	// answers every request with 200 and "ok\n" and closes the connection
	// (no keep-alive).
	HTTP []uint16
	// HTTPS are TCP ports with the same HTTP server behind TLS (Go's
	// defaults, a self-signed ECDSA P-256 certificate made when the fleet is
	// built: clients skip verification). Only the kernel's fleet serves
	// them; the XDP responder answers their SYNs as it does HTTP's.
	HTTPS []uint16
	// Drop are addresses (or prefixes) whose packets the fleet silently drops.
	Drop []netip.Prefix
	// Reject are addresses answered with a TCP RST by a firewall rule, on every
	// port including the listening ones.
	Reject []netip.Prefix
	// Unreachable are addresses answered with ICMP host-unreachable. ICMP rate
	// limits are lifted inside the fleet namespace so every probe gets one.
	Unreachable []netip.Prefix
	// KeepOffloads leaves TSO/GSO/GRO on on the prober's veth. By default they
	// are turned off, because capture through AF_PACKET loses replies with
	// generic segmentation offloads on a veth.
	KeepOffloads bool
	// Impair puts an impairment stage between the prober and the fleet: a
	// third namespace that both veths end in, which forwards every frame
	// and can lose, duplicate and delay TCP packets on the way (see
	// [Fleet.Impair]). It needs the kernel's fleet (XDP off).
	Impair bool
	// XDP makes the XDP responder answer every IPv4 SYN to Prefix, following
	// Listen, HTTP, Drop, Reject and Unreachable, instead of listeners and
	// firewall rules (which are then not set up). It needs IPv4 only
	// (Prefix6 must be empty).
	XDP XDPMode
}

// Outcome returns the outcome a SYN or connect() probe of address a on port
// must have on a fleet built from cfg, before any [Fleet.SetDrop]: the
// fleet's ground truth. Its rules apply in the fleet's order: Timeout for
// addresses outside the fleet's prefixes and for Drop, Refused for Reject,
// Unreachable for Unreachable, then Success on a Listen or HTTP port and
// Refused on any other port (no listener).
func (cfg Config) Outcome(a netip.Addr, port uint16) probe.Outcome {
	prefix := cfg.Prefix
	if !prefix.IsValid() {
		prefix = DefaultPrefix
	}
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	switch {
	case !prefix.Contains(a) && !cfg.Prefix6.Contains(a), in(cfg.Drop):
		return probe.Timeout
	case in(cfg.Reject):
		return probe.Refused
	case in(cfg.Unreachable):
		return probe.Unreachable
	case slices.Contains(cfg.Listen, port), slices.Contains(cfg.HTTP, port), slices.Contains(cfg.HTTPS, port):
		return probe.Success
	}
	return probe.Refused
}

// Fleet is a running test fleet. Its fields are read-only. Close removes it.
type Fleet struct {
	ProberNS   string     // network namespace of the prober side
	FleetNS    string     // network namespace answering for the fleet
	ImpairNS   string     // namespace of the impairment stage between them, when Config.Impair
	ProberLink string     // veth interface name in ProberNS
	FleetLink  string     // veth interface name in FleetNS
	ProberAddr netip.Addr // the prober's IPv4 source address
	// ProberAddr6 is the prober's IPv6 source address, valid when the fleet
	// has an IPv6 prefix.
	ProberAddr6 netip.Addr
	Prefix      netip.Prefix // IPv4 prefix answered by the fleet
	Prefix6     netip.Prefix // IPv6 prefix answered by the fleet, if any
	// GatewayMAC is the MAC address of the fleet side of the veth: the next
	// hop of every fleet address, for senders that write Ethernet frames.
	GatewayMAC net.HardwareAddr
	// XDP says who answers: the kernel (XDPOff) or the XDP responder.
	XDP XDPMode

	resp      *responder // the XDP responder, when XDP is on
	stage     *impairStage
	mu        sync.Mutex
	listeners []net.Listener
	servers   []*http.Server
	wg        sync.WaitGroup
	closed    bool
}

// New creates a fleet. On error everything created so far is removed.
func New(cfg Config) (*Fleet, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("fleet needs the %s command: %w", tool, err)
		}
	}
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = DefaultPrefix
	}
	if !cfg.Prefix.Addr().Is4() {
		return nil, fmt.Errorf("fleet prefix %s is not IPv4", cfg.Prefix)
	}
	if cfg.Prefix.Overlaps(proberLinkAddr.Masked()) {
		return nil, fmt.Errorf("fleet prefix %s overlaps the link network %s", cfg.Prefix, proberLinkAddr.Masked())
	}
	if cfg.Prefix6.IsValid() && (cfg.Prefix6.Addr().Is4() || cfg.Prefix6.Overlaps(proberLinkAddr6.Masked())) {
		return nil, fmt.Errorf("fleet prefix6 %s must be IPv6 outside %s", cfg.Prefix6, proberLinkAddr6.Masked())
	}
	if cfg.XDP != XDPOff && cfg.Prefix6.IsValid() {
		return nil, fmt.Errorf("fleet prefix6 %s: the XDP responder answers IPv4 only", cfg.Prefix6)
	}
	if cfg.XDP != XDPOff && cfg.Impair {
		return nil, errors.New("fleet: the impairment stage needs the kernel's fleet, not the XDP responder")
	}
	id := uniqueID()
	f := &Fleet{
		XDP:        cfg.XDP,
		ProberNS:   "sonde-" + id + "-p",
		FleetNS:    "sonde-" + id + "-f",
		ProberLink: "sp" + id,
		FleetLink:  "sf" + id,
		ProberAddr: proberLinkAddr.Addr(),
		Prefix:     cfg.Prefix.Masked(),
	}
	if cfg.Impair {
		f.ImpairNS = "sonde-" + id + "-i"
	}
	if cfg.Prefix6.IsValid() {
		f.Prefix6 = cfg.Prefix6.Masked()
		f.ProberAddr6 = proberLinkAddr6.Addr()
	}
	if err := f.build(cfg); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// uniqueID returns 8 random hex digits; namespace and link names use it so that
// parallel fleets never collide.
func uniqueID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (f *Fleet) build(cfg Config) error {
	veth := []string{"ip", "-n", f.ProberNS, "link", "add", f.ProberLink, "type", "veth", "peer", "name", f.FleetLink, "netns", f.FleetNS}
	if cfg.XDP == XDPNative {
		// Native XDP on a veth sends XDP_TX through the peer's queue of the
		// current CPU: one queue per CPU on both ends.
		q := strconv.Itoa(runtime.NumCPU())
		veth = []string{"ip", "-n", f.ProberNS, "link", "add", f.ProberLink, "numtxqueues", q, "numrxqueues", q,
			"type", "veth", "peer", "name", f.FleetLink, "numtxqueues", q, "numrxqueues", q, "netns", f.FleetNS}
	}
	steps := [][]string{
		{"ip", "netns", "add", f.ProberNS},
		{"ip", "netns", "add", f.FleetNS},
	}
	if cfg.Impair {
		steps = append(steps, f.impairSteps()...)
	} else {
		steps = append(steps, veth)
	}
	steps = append(steps, [][]string{
		{"ip", "-n", f.ProberNS, "link", "set", "lo", "up"},
		{"ip", "-n", f.FleetNS, "link", "set", "lo", "up"},
		{"ip", "-n", f.ProberNS, "addr", "add", proberLinkAddr.String(), "dev", f.ProberLink},
		{"ip", "-n", f.FleetNS, "addr", "add", fleetLinkAddr.String(), "dev", f.FleetLink},
		{"ip", "-n", f.ProberNS, "link", "set", f.ProberLink, "up"},
		{"ip", "-n", f.FleetNS, "link", "set", f.FleetLink, "up"},
		{"ip", "-n", f.ProberNS, "route", "add", f.Prefix.String(), "via", fleetLinkAddr.Addr().String(), "dev", f.ProberLink},
		{"ip", "-n", f.FleetNS, "route", "add", "local", f.Prefix.String(), "dev", "lo"},
	}...)
	if f.Prefix6.IsValid() {
		steps = append(steps,
			[]string{"ip", "-n", f.ProberNS, "-6", "addr", "add", proberLinkAddr6.String(), "dev", f.ProberLink, "nodad"},
			[]string{"ip", "-n", f.FleetNS, "-6", "addr", "add", fleetLinkAddr6.String(), "dev", f.FleetLink, "nodad"},
			[]string{"ip", "-n", f.ProberNS, "-6", "route", "add", f.Prefix6.String(), "via", fleetLinkAddr6.Addr().String(), "dev", f.ProberLink},
			[]string{"ip", "-n", f.FleetNS, "-6", "route", "add", "local", f.Prefix6.String(), "dev", "lo"},
		)
	}
	for _, s := range steps {
		if err := run(nil, s...); err != nil {
			return err
		}
	}
	// A fleet answers floods of SYNs: deep accept and SYN queues, and no ICMP
	// rate limit, so that every probe gets its answer. These are per-namespace.
	if err := f.Run(f.FleetNS, "sysctl", "-q", "-w",
		"net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535",
		"net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_msgs_per_sec=100000000",
		"net.ipv4.icmp_msgs_burst=100000000", "net.ipv6.icmp.ratelimit=0"); err != nil {
		return err
	}
	if !cfg.KeepOffloads {
		if _, err := exec.LookPath("ethtool"); err != nil {
			return fmt.Errorf("fleet needs the ethtool command to turn offloads off: %w", err)
		}
		if err := f.Run(f.ProberNS, "ethtool", "-K", f.ProberLink, "tso", "off", "gso", "off", "gro", "off"); err != nil {
			return err
		}
	}
	if err := f.answer(cfg); err != nil {
		return err
	}
	if cfg.Impair {
		if err := f.startStage(); err != nil {
			return err
		}
	}
	return netns.Do(f.FleetNS, func() error {
		ifc, err := net.InterfaceByName(f.FleetLink)
		if err != nil {
			return fmt.Errorf("fleet link: %w", err)
		}
		f.GatewayMAC = ifc.HardwareAddr
		return nil
	})
}

// answer sets up what answers the probes: the XDP responder, or the
// firewall rules, listeners and HTTP servers.
func (f *Fleet) answer(cfg Config) error {
	if cfg.XDP != XDPOff {
		r, err := newResponder(f, cfg)
		if err != nil {
			return err
		}
		f.resp = r
		return f.dropRedirected()
	}
	if err := f.firewall(cfg); err != nil {
		return err
	}
	for _, port := range cfg.Listen {
		if err := f.listen(port); err != nil {
			return err
		}
	}
	for _, port := range cfg.HTTP {
		if err := f.serveHTTP(port, nil); err != nil {
			return err
		}
	}
	if len(cfg.HTTPS) == 0 {
		return nil
	}
	cert, err := selfSigned()
	if err != nil {
		return err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}}
	for _, port := range cfg.HTTPS {
		if err := f.serveHTTP(port, tc); err != nil {
			return err
		}
	}
	return nil
}

// selfSigned returns a self-signed ECDSA P-256 server certificate valid
// for a day.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("fleet certificate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sonde bench fleet"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("fleet certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// dropRedirected drops, at the XDP fleet's ingress, the TCP packets that
// the responder does not see: those a TC program on the prober side sent
// with bpf_redirect (sonde's own RSTs, see bpf/capture.c), which generic
// XDP skips as reinjected. Without it they would climb the fleet's TCP stack
// for nothing, inside the prober's send calls, and count against it; the
// kernel's RSTs the responder drops itself.
func (f *Fleet) dropRedirected() error {
	rules := fmt.Sprintf("table netdev sonde_fleet {\n  chain in {\n    type filter hook ingress device %s priority -500; policy accept;\n"+
		"    meta l4proto tcp counter drop\n  }\n}\n", f.FleetLink)
	return f.nft(rules)
}

// nft applies the nftables rules text in the fleet's namespace.
func (f *Fleet) nft(rules string) error {
	cmd := netns.Command(f.FleetNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	return runCmd(cmd)
}

// ResponderCounters returns the XDP responder's counters; false when the
// fleet's kernel answers.
func (f *Fleet) ResponderCounters() (ResponderCounters, bool, error) {
	if f.resp == nil {
		return ResponderCounters{}, false, nil
	}
	c, err := f.resp.counters()
	return c, true, err
}

// firewall loads the nftables rules that drop and reject the configured subsets.
func (f *Fleet) firewall(cfg Config) error {
	if len(cfg.Drop)+len(cfg.Reject)+len(cfg.Unreachable) == 0 {
		return nil
	}
	var b strings.Builder
	var rules []string
	b.WriteString("table inet sonde_fleet {\n")
	sets := []struct {
		name     string
		prefixes []netip.Prefix
		verdict  string
	}{
		{"drop", cfg.Drop, "drop"},
		{"reject", cfg.Reject, "reject with tcp reset"},
		{"unreach", cfg.Unreachable, "reject with icmpx type host-unreachable"},
	}
	for _, s := range sets {
		// Single addresses go to hash sets (one lookup a packet), prefixes
		// to interval sets.
		elems := map[string][]string{}
		for _, p := range s.prefixes {
			fam, kind := "4", "h"
			if !p.Addr().Is4() {
				fam = "6"
			}
			elem := p.Masked().String()
			if p.IsSingleIP() {
				elem = p.Addr().String()
			} else {
				kind = "i"
			}
			elems[kind+fam] = append(elems[kind+fam], elem)
		}
		for _, set := range []struct{ key, typ, match string }{
			{"h4", "ipv4_addr", "ip"}, {"i4", "ipv4_addr", "ip"}, {"h6", "ipv6_addr", "ip6"}, {"i6", "ipv6_addr", "ip6"},
		} {
			if len(elems[set.key]) == 0 {
				continue // no set, no rule: nothing to look up per packet
			}
			writeSet(&b, s.name+set.key, set.typ, set.key[0] == 'i', elems[set.key])
			proto := ""
			if s.name == "reject" {
				proto = "meta l4proto tcp "
			}
			rules = append(rules, fmt.Sprintf("    %s%s daddr @%s%s %s\n", proto, set.match, s.name, set.key, s.verdict))
		}
	}
	b.WriteString("  chain input {\n    type filter hook input priority 0; policy accept;\n")
	for _, r := range rules {
		b.WriteString(r)
	}
	b.WriteString("  }\n}\n")
	return f.nft(b.String())
}

func writeSet(b *strings.Builder, name, typ string, interval bool, elems []string) {
	flags := ""
	if interval {
		flags = " flags interval;"
	}
	fmt.Fprintf(b, "  set %s {\n    type %s;%s\n", name, typ, flags)
	fmt.Fprintf(b, "    elements = { %s }\n  }\n", strings.Join(elems, ", "))
}

// listenFleet opens a TCP listener on port for every fleet address (IPv4
// and IPv6) inside the fleet namespace.
func (f *Fleet) listenFleet(port uint16) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do(f.FleetNS, func() error {
		var err error
		network := "tcp4"
		if f.Prefix6.IsValid() {
			network = "tcp" // dual stack
		}
		ln, err = net.Listen(network, fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on fleet port %d: %w", port, err)
	}
	return ln, nil
}

// listen opens a TCP listener on port for every fleet address and accepts
// and closes connections until Close, on one goroutine per CPU so that a
// flood of connect() probes never fills the accept queue.
func (f *Fleet) listen(port uint16) error {
	ln, err := f.listenFleet(port)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.listeners = append(f.listeners, ln)
	f.mu.Unlock()
	for range runtime.GOMAXPROCS(0) {
		f.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil {
					time.Sleep(5 * time.Millisecond) // out of descriptors for a moment
					continue
				}
				c.Close()
			}
		})
	}
	return nil
}

// serveHTTP starts an HTTP server on port for every fleet address, behind
// TLS with tc when it is not nil; Close
// stops it.
func (f *Fleet) serveHTTP(port uint16, tc *tls.Config) error {
	ln, err := f.listenFleet(port)
	if err != nil {
		return err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // a probe that hangs up early is no news
	}
	srv.SetKeepAlivesEnabled(false)
	f.mu.Lock()
	f.servers = append(f.servers, srv)
	f.mu.Unlock()
	f.wg.Go(func() { _ = srv.Serve(ln) }) // returns ErrServerClosed after Close
	return nil
}

// SetDrop makes the fleet silently drop every packet to and from prefixes
// from now on, as dead hosts would (nothing comes in, nothing goes out: not
// even a retransmission of an answer sent before), on top of
// [Config.Drop], replacing the prefixes of the previous call;
// SetDrop(nil) ends it. On a kernel fleet the change is one nftables
// transaction: it applies to all prefixes at once. On an XDP fleet the
// prefixes (IPv4 only) change one by one.
func (f *Fleet) SetDrop(prefixes []netip.Prefix) error {
	if f.resp != nil {
		if err := f.resp.setDynDrop(prefixes); err != nil {
			return fmt.Errorf("set dropped prefixes: %w", err)
		}
		return nil
	}
	var b strings.Builder
	// Declaring the table, then deleting it, makes the delete succeed
	// whether or not an earlier call created it.
	b.WriteString("table inet sonde_fleet_dyn\ndelete table inet sonde_fleet_dyn\n")
	v4, v6 := nftElements(prefixes)
	if len(v4)+len(v6) > 0 {
		b.WriteString("table inet sonde_fleet_dyn {\n")
		var in, out []string
		if len(v4) > 0 {
			writeSet(&b, "drop4", "ipv4_addr", true, v4)
			in, out = append(in, "    ip daddr @drop4 drop\n"), append(out, "    ip saddr @drop4 drop\n")
		}
		if len(v6) > 0 {
			writeSet(&b, "drop6", "ipv6_addr", true, v6)
			in, out = append(in, "    ip6 daddr @drop6 drop\n"), append(out, "    ip6 saddr @drop6 drop\n")
		}
		for _, c := range []struct {
			hook  string
			rules []string
		}{{"input", in}, {"output", out}} {
			fmt.Fprintf(&b, "  chain %s {\n    type filter hook %s priority -10; policy accept;\n", c.hook, c.hook)
			for _, r := range c.rules {
				b.WriteString(r)
			}
			b.WriteString("  }\n")
		}
		b.WriteString("}\n")
	}
	if err := f.nft(b.String()); err != nil {
		return fmt.Errorf("set dropped prefixes: %w", err)
	}
	return nil
}

// nftElements returns prefixes as nftables set elements, IPv4 and IPv6
// apart.
func nftElements(prefixes []netip.Prefix) (v4, v6 []string) {
	for _, p := range prefixes {
		if p.Addr().Is4() {
			v4 = append(v4, p.Masked().String())
		} else {
			v6 = append(v6, p.Masked().String())
		}
	}
	return v4, v6
}

// SetReject makes the fleet answer every TCP connection to prefixes with an
// RST from now on, as a host whose service stopped listening does, on top
// of [Config.Reject], replacing the prefixes of the previous call;
// SetReject(nil) ends it. The change is one nftables transaction. It needs
// the kernel's fleet: the XDP responder has no such rule.
func (f *Fleet) SetReject(prefixes []netip.Prefix) error {
	if f.resp != nil {
		return errors.New("set rejected prefixes: the XDP fleet cannot reject at run time")
	}
	var b strings.Builder
	b.WriteString("table inet sonde_fleet_rej\ndelete table inet sonde_fleet_rej\n")
	v4, v6 := nftElements(prefixes)
	if len(v4)+len(v6) > 0 {
		b.WriteString("table inet sonde_fleet_rej {\n")
		var rules []string
		if len(v4) > 0 {
			writeSet(&b, "rej4", "ipv4_addr", true, v4)
			rules = append(rules, "    meta l4proto tcp ip daddr @rej4 reject with tcp reset\n")
		}
		if len(v6) > 0 {
			writeSet(&b, "rej6", "ipv6_addr", true, v6)
			rules = append(rules, "    meta l4proto tcp ip6 daddr @rej6 reject with tcp reset\n")
		}
		b.WriteString("  chain input {\n    type filter hook input priority -10; policy accept;\n")
		for _, r := range rules {
			b.WriteString(r)
		}
		b.WriteString("  }\n}\n")
	}
	if err := f.nft(b.String()); err != nil {
		return fmt.Errorf("set rejected prefixes: %w", err)
	}
	return nil
}

// Run runs a command inside namespace ns (`ip netns exec`) and returns an
// error with its output when it fails.
func (f *Fleet) Run(ns string, name string, args ...string) error {
	return runCmd(netns.Command(ns, name, args...))
}

// Close closes the listeners and HTTP servers and deletes both namespaces (which removes the
// veth pair, routes and firewall rules with them). It is safe to call more
// than once.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	lns, srvs := f.listeners, f.servers
	f.listeners, f.servers = nil, nil
	f.mu.Unlock()
	var errs []error
	for _, ln := range lns {
		if err := ln.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, srv := range srvs {
		if err := srv.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	f.wg.Wait()
	if f.resp != nil {
		errs = append(errs, f.resp.close())
		f.resp = nil
	}
	if f.stage != nil {
		errs = append(errs, f.stage.close())
		f.stage = nil
	}
	for _, ns := range []string{f.ProberNS, f.FleetNS, f.ImpairNS} {
		if ns == "" {
			continue
		}
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue // never created
		}
		if err := run(nil, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func run(stdin []byte, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return runCmd(cmd)
}

func runCmd(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
