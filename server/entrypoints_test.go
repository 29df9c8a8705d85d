package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/endpointtest"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

// TestEntryPointsProbe runs the shared table through /probe, up to the
// address a request's target is probed at: the first endpoint the daemon
// probes for the entry, or the same error (a failed probe for a lookup
// error, 400 for the others). It runs each case twice: with a name the
// configuration does not list, looked up with the daemon's resolver, and,
// where a config takes the entry, with the entry listed in the check's
// pool, whose address /probe then takes from the configuration.
func TestEntryPointsProbe(t *testing.T) {
	t.Parallel()
	for _, c := range endpointtest.Cases {
		for _, listed := range []bool{false, true} {
			if listed && c.Kind != endpointtest.NoError && c.Kind != endpointtest.LookupErr {
				continue // a config refuses it
			}
			t.Run(c.Name+map[bool]string{true: " listed"}[listed], func(t *testing.T) {
				check := "c: {protocol: http, probe_targets: any, ip_family: " + c.Family.String()
				if c.Source != "" {
					check += ", source_address: " + strconv.Quote(c.Source)
				}
				target := "198.18.250.1" // a target of the source's family that no case names
				if strings.Contains(c.Source, ":") {
					target = "2001:db8:ffff::1"
				}
				if listed {
					target = c.Entry
				}
				cfg, err := config.Parse([]byte("checks:\n  "+check+"}\npools:\n  - {name: p, check: c, targets: ["+strconv.Quote(target)+"]}\n"),
					"", config.LoadOptions{Resolver: endpointtest.Resolver})
				if err != nil {
					t.Fatal(err)
				}
				g := &generation{cfg: cfg}
				shot, err := g.newOneShot("c", c.Entry)
				var ee *endpoint.EntryError
				var se *endpoint.SourceError
				switch {
				case c.Entry == "":
					if err == nil || !strings.Contains(err.Error(), "target: empty") {
						t.Fatalf("newOneShot: %v, want the target missing", err)
					}
					return
				case c.Kind == endpointtest.EntryErr:
					if !errors.As(err, &ee) || ee.Error() != c.Err {
						t.Fatalf("newOneShot: %v, want the entry error %q", err, c.Err)
					}
					return
				case c.Kind == endpointtest.SourceErr:
					if !errors.As(err, &se) || se.Error() != c.Err {
						t.Fatalf("newOneShot: %v, want the source error %q", err, c.Err)
					}
					return
				case c.Kind == endpointtest.BlockRefused:
					if err == nil || !strings.Contains(err.Error(), "is a CIDR block") {
						t.Fatalf("newOneShot: %v, want a CIDR block refused", err)
					}
					return
				case err != nil:
					t.Fatalf("newOneShot: %v", err)
				}
				shot.log = slog.New(slog.DiscardHandler)
				addr, err := g.shotAddr(t.Context(), &shot, endpointtest.Resolver)
				if c.Kind == endpointtest.LookupErr {
					if err == nil || err.Error() != c.Err {
						t.Fatalf("shotAddr = %v, %v; want %q", addr, err, c.Err)
					}
					return
				}
				if got := netip.AddrPortFrom(addr, shot.target.Port).String(); err != nil || got != c.Want[0] {
					t.Fatalf("shotAddr = %s, %v; want %s", got, err, c.Want[0])
				}
			})
		}
	}
}

// TestProbeUsesDaemonResolver checks that /probe looks a target's name up
// with Options.Resolver, the daemon's, and not with a resolver of its own.
func TestProbeUsesDaemonResolver(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	port := b.addr()[strings.LastIndexByte(b.addr(), ':')+1:]
	var asked atomic.Int32
	res := endpoint.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if host != "backend.sonde.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		asked.Add(1)
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	td := startDaemonWith(t, `
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 2s, probe_targets: any}
pools:
  - {name: p, check: web, targets: ["127.0.0.1:`+port+`"]}
`, func(o *Options) { o.Resolver = res })
	code, text := td.scrape(t, "/probe?module=web&target=backend.sonde.test:"+port, nil)
	if s := samples(t, text); code != http.StatusOK || s["probe_success"] != 1 || asked.Load() != 1 {
		t.Fatalf("/probe: %d, probe_success %v, the daemon's resolver asked %d times; want 200, 1, once\n%s", code, s["probe_success"], asked.Load(), text)
	}
}
