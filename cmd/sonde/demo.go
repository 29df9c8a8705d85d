package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Timing of the demo. The checks probe every demoInterval with a
// demoTimeout; the slow backend answers after demoSlowDelay, longer than the
// timeout; the flapping backend changes between healthy and failing every
// demoFlapPeriod, several intervals, so its state changes visibly and often.
const (
	demoInterval   = 2 * time.Second
	demoTimeout    = time.Second
	demoSlowDelay  = 3 * time.Second
	demoFlapPeriod = 10 * time.Second
)

// demoShutdownTimeout bounds how long Close waits for requests in progress.
const demoShutdownTimeout = 2 * time.Second

// demoBackend describes one backend of the demo, for the startup banner.
type demoBackend struct {
	Name string         // short name, as used in the banner
	Addr netip.AddrPort // where it listens (or refuses)
	Does string         // what it answers
}

// demo is the set of loopback backends of "sonde run -demo" and a config
// that probes them. [startDemo] starts it; [demo.Close] stops it. Its fields
// are read-only after startDemo returns; Close is safe to call more than
// once and from any goroutine.
type demo struct {
	// Config is a complete sonde config (YAML) with one check per preset,
	// probing the backends at their actual ports.
	Config []byte
	// Backends are the running backends, in banner order.
	Backends []demoBackend

	stop    chan struct{}  // closed by Close: handlers return at once
	wg      sync.WaitGroup // serve and accept loops
	closers []func() error // in start order; Close runs them in reverse

	closeOnce sync.Once
	closeErr  error
}

// demoTiming are the demo's clock and periods; tests shorten or fake them.
type demoTiming struct {
	slowDelay  time.Duration
	flapPeriod time.Duration
	now        func() time.Time
}

// demoCheck is one check of the demo config.
type demoCheck struct {
	name, preset string
	about        string // comment in the config and banner
	settings     string // YAML lines below the preset, indented by 4
}

// demoPool is one pool of the demo config.
type demoPool struct {
	name, check string
	members     []string // backend names
	expect      string   // what a newcomer should see
	// zones, when set, gives each member a zone label: the pool lists its
	// members in static_configs, a group per zone, with the pool's team
	// label, as a pool discovering its targets would, and exports the
	// zone on its per-target series.
	zones map[string]string
	team  string
}

// demoChecks and demoPools define the demo config. Intervals and timeouts
// are far below the presets' so that states change within a minute; every
// value stays within its preset's documented range.
var (
	demoChecks = []demoCheck{
		{name: "app", preset: "appservice", about: "Azure App Service: GET, 200-299, out after 2 failures",
			settings: "    path: /health\n    fall: 2\n"},
		{name: "edge", preset: "frontdoor", about: "Azure Front Door: HEAD, only 200, healthy when 2 of the last 4 succeed",
			settings: ""},
		{name: "gateway", preset: "appgateway", about: "Azure Application Gateway: GET, 200-399, starts unhealthy, in again after 1 success",
			settings: ""},
		{name: "fleet", preset: "globalaccelerator", about: "Alibaba Cloud Global Accelerator: TCP handshake (connect(), no privileges needed)",
			settings: "    protocol: tcp\n    tcp_mode: connect\n    rise: 2\n    fall: 2\n"},
	}
	demoPools = []demoPool{
		{name: "app", check: "app", members: []string{"healthy", "failing", "redirecting", "flapping"},
			expect: "3 of 4 unhealthy while flapping fails, but at most 50 % leave rotation (P1); labelled by zone",
			zones:  map[string]string{"healthy": "eu-1", "failing": "eu-1", "redirecting": "eu-2", "flapping": "eu-2"}, team: "web"},
		{name: "edge", check: "edge", members: []string{"failing", "slow", "refusing"},
			expect: "all unhealthy (500, timeout, refused): fail open keeps all in rotation (P2)"},
		{name: "gateway", check: "gateway", members: []string{"healthy", "redirecting", "flapping"},
			expect: "the 302 passes under 200-399 (H5); flapping goes out and back in"},
		{name: "fleet", check: "fleet", members: []string{"tcp", "refusing"},
			expect: "handshake succeeds on tcp, RST from refusing (T1)"},
	}
)

// startDemo starts the demo backends on 127.0.0.1 and returns the demo with
// its config. ctx bounds the start and is the parent of the backends'
// request contexts; the backends run until [demo.Close].
func startDemo(ctx context.Context) (*demo, error) {
	return startDemoWith(ctx, demoTiming{slowDelay: demoSlowDelay, flapPeriod: demoFlapPeriod, now: time.Now})
}

// startDemoWith is startDemo with the given timing.
func startDemoWith(ctx context.Context, tm demoTiming) (d *demo, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d = &demo{stop: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = d.Close() // the start error says what went wrong
		}
	}()
	flap := &flapper{start: tm.now(), period: tm.flapPeriod, now: tm.now}
	for _, b := range []struct {
		name, does string
		h          http.Handler
	}{
		{"healthy", `200 "Healthy"`, http.HandlerFunc(serveHealthy)},
		{"failing", "500 to every request", http.HandlerFunc(serveFailing)},
		{"slow", fmt.Sprintf("200 after %s, longer than the %s timeout", tm.slowDelay, demoTimeout), d.slowHandler(tm.slowDelay)},
		{"redirecting", "302 to /elsewhere", http.HandlerFunc(serveRedirect)},
		{"flapping", fmt.Sprintf("200 and 500 in turn, %s each", tm.flapPeriod), flap},
	} {
		addr, err := d.serveHTTP(ctx, b.h)
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", b.name, err)
		}
		d.Backends = append(d.Backends, demoBackend{Name: b.name, Addr: addr, Does: b.does})
	}
	addr, err := d.refuse()
	if err != nil {
		return nil, fmt.Errorf("backend refusing: %w", err)
	}
	d.Backends = append(d.Backends, demoBackend{Name: "refusing", Addr: addr, Does: "a bound port nobody listens on: RST"})
	if addr, err = d.serveTCP(ctx); err != nil {
		return nil, fmt.Errorf("backend tcp: %w", err)
	}
	d.Backends = append(d.Backends, demoBackend{Name: "tcp", Addr: addr, Does: "accepts TCP connections and closes them"})
	d.Config = d.config()
	return d, nil
}

// Close stops every backend and waits for their goroutines to end. It
// returns the errors of closing them; later calls return the same.
func (d *demo) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		var errs []error
		for i := len(d.closers) - 1; i >= 0; i-- {
			if err := d.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
		d.wg.Wait()
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// backend returns the address of the backend called name.
func (d *demo) backend(name string) netip.AddrPort {
	for _, b := range d.Backends {
		if b.Name == name {
			return b.Addr
		}
	}
	panic("demo: no backend " + name) // demoPools names only backends startDemo starts
}

// config writes the demo's config text.
func (d *demo) config() []byte {
	var b strings.Builder
	b.WriteString("# sonde demo config, written by \"sonde run -demo\": every target is a\n")
	b.WriteString("# backend on 127.0.0.1 started by sonde itself. Intervals and timeouts are\n")
	b.WriteString("# much shorter than the presets' so that states change within a minute.\n")
	b.WriteString("checks:\n")
	for _, c := range demoChecks {
		fmt.Fprintf(&b, "  # %s\n  %s:\n    preset: %s\n    interval: %s\n    timeout: %s\n%s",
			c.about, c.name, c.preset, demoInterval, demoTimeout, c.settings)
	}
	b.WriteString("pools:\n")
	for _, p := range demoPools {
		fmt.Fprintf(&b, "  # %s: %s\n  - name: %s\n    check: %s\n", strings.Join(p.members, ", "), p.expect, p.name, p.check)
		if p.zones == nil {
			fmt.Fprintf(&b, "    targets: [%s]\n", d.targetList(p.members))
			continue
		}
		// A group per zone, in the order of their first member.
		var zones []string
		byZone := map[string][]string{}
		for _, m := range p.members {
			z := p.zones[m]
			if byZone[z] == nil {
				zones = append(zones, z)
			}
			byZone[z] = append(byZone[z], m)
		}
		fmt.Fprintf(&b, "    labels: {team: %s}\n    metric_labels: [zone]\n    static_configs:\n", p.team)
		for _, z := range zones {
			fmt.Fprintf(&b, "      - {targets: [%s], labels: {zone: %s}}\n", d.targetList(byZone[z]), z)
		}
	}
	b.WriteString("metrics:\n  per_target: true\n")
	return []byte(b.String())
}

// targetList is the addresses of the backends called names, as a YAML
// flow list's items.
func (d *demo) targetList(names []string) string {
	out := make([]string, len(names))
	for i, m := range names {
		out[i] = fmt.Sprintf("%q", d.backend(m).String())
	}
	return strings.Join(out, ", ")
}

// Banner prints what runs where and the URLs to look at, for a server
// listening on listen (host:port, as given to -listen) under the route
// prefix prefix ("" for none). It is one Write: the daemon logs on the
// same terminal from the moment it serves, and a log line must not land
// inside a row of the banner.
func (d *demo) Banner(out io.Writer, listen, prefix string) {
	var w bytes.Buffer
	defer func() { _, _ = out.Write(w.Bytes()) }()
	tw := tabwriter.NewWriter(&w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "sonde demo: backends on loopback, probed by one check per preset")
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "  BACKEND\tADDRESS\tANSWERS")
	for _, b := range d.Backends {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", b.Name, b.Addr, b.Does)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "  POOL\tCHECK\tMEMBERS\tWATCH FOR")
	for _, p := range demoPools {
		preset := ""
		for _, c := range demoChecks {
			if c.name == p.check {
				preset = c.preset
			}
		}
		fmt.Fprintf(tw, "  %s\t%s (%s)\t%s\t%s\n", p.name, p.check, preset, strings.Join(p.members, ", "), p.expect)
	}
	_ = tw.Flush()
	base := "http://" + browseAddr(listen) + strings.TrimSuffix(prefix, "/")
	fmt.Fprintf(&w, "\nEvery check probes every %s with a %s timeout. Look at:\n", demoInterval, demoTimeout)
	for _, p := range []struct{ path, what string }{
		{"/", "the status page: pools, targets, timelines, live events"},
		{"/metrics", "Prometheus metrics"},
		{"/api/v1/pools", "pools: targets by state, routable count"},
		{"/api/v1/targets", "every target's state, last outcome and latency"},
		{"/api/v1/events", "state and route changes (curl -N -H 'Accept: text/event-stream' follows them)"},
		{"/probe?module=gateway&target=" + d.backend("healthy").String(), "one probe, answered like blackbox_exporter"},
	} {
		fmt.Fprintf(&w, "  %-40s %s\n", base+p.path, p.what)
	}
}

// browseAddr turns a listen address into one a browser on this machine can
// open: an empty or unspecified host becomes 127.0.0.1.
func browseAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
