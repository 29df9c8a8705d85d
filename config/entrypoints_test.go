package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/internal/endpointtest"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

// entryConfig is a config whose pool p has the case's entry listed in
// targets or, with discovered, given by a static discovery group.
func entryConfig(c *endpointtest.Case, discovered bool) string {
	check := "c: {protocol: http, ip_family: " + c.Family.String()
	if c.Source != "" {
		check += ", source_address: " + strconv.Quote(c.Source)
	}
	pool := "{name: p, check: c, targets: [" + strconv.Quote(c.Entry) + "]}"
	if discovered {
		pool = "{name: p, check: c, static_configs: [{targets: [" + strconv.Quote(c.Entry) + "]}]}"
	}
	return "checks:\n  " + check + "}\npools:\n  - " + pool + "\n"
}

// addrPorts returns the endpoints of pool 0 of cfg, sorted.
func addrPorts(cfg *Config) []string {
	var out []string
	for _, id := range cfg.Pools[0].Members {
		out = append(out, cfg.Targets[id].AddrPort().String())
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestEntryPointsConfig runs the shared table through a config's targets:
// the daemon's endpoints, or the error a load gives (an unresolved name is
// no load error: the pool lists it with why).
func TestEntryPointsConfig(t *testing.T) {
	t.Parallel()
	for _, c := range endpointtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg, err := Parse([]byte(entryConfig(&c, false)), "", LoadOptions{Resolver: endpointtest.Resolver})
			checkLoad(t, &c, cfg, err)
		})
	}
}

// checkLoad checks a load of the case's entry as a listed target.
func checkLoad(t *testing.T, c *endpointtest.Case, cfg *Config, err error) {
	t.Helper()
	var ee *endpoint.EntryError
	var se *endpoint.SourceError
	switch c.Kind {
	case endpointtest.EntryErr:
		if !errors.As(err, &ee) || ee.Error() != c.Err {
			t.Fatalf("load: %v, want it to wrap the entry error %q", err, c.Err)
		}
		return
	case endpointtest.SourceErr:
		if !errors.As(err, &se) || se.Error() != c.Err {
			t.Fatalf("load: %v, want it to wrap the source error %q", err, c.Err)
		}
		return
	}
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if c.Kind == endpointtest.LookupErr {
		if u := cfg.Pools[0].Unresolved; len(u) != 1 || u[0].Err != c.Err || len(cfg.Pools[0].Members) != 0 {
			t.Fatalf("unresolved %+v, members %v; want only %q", u, addrPorts(cfg), c.Err)
		}
		return
	}
	if got := addrPorts(cfg); !slices.Equal(got, sorted(c.Want)) || len(cfg.Pools[0].Unresolved) != 0 {
		t.Fatalf("endpoints %v (unresolved %+v), want %v", got, cfg.Pools[0].Unresolved, c.Want)
	}
}

// TestEntryPointsDiscovery runs the shared table through discovery as the
// daemon runs it: a static group's __address__, followed by a
// discovery.Runner with the config's pool (its family from ip_family and
// source_address), merged into the config by WithFound. A discovered entry
// that a listed one would make a load fail for is dropped instead: a bad
// __address__ is counted by its source, an address the source address
// cannot reach is listed as unresolved with the message a listed one gets.
func TestEntryPointsDiscovery(t *testing.T) {
	t.Parallel()
	for _, c := range endpointtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg, err := Parse([]byte(entryConfig(&c, true)), "", LoadOptions{Resolver: endpointtest.Resolver})
			if err != nil {
				t.Fatal(err)
			}
			run := discovery.NewRunner(discovery.Options{Resolver: endpointtest.Resolver, Debounce: time.Millisecond})
			t.Cleanup(func() { _ = run.Close() })
			run.Update(cfg.DiscoveryPools())
			found := waitDiscovered(t, run)
			n, err := cfg.WithFound(found)
			if err != nil {
				t.Fatal(err)
			}
			p := n.Pools[0]
			switch c.Kind {
			case endpointtest.EntryErr, endpointtest.BlockRefused:
				if st := run.Status()[0].Sources[0]; st.Dropped["bad __address__"] != 1 || len(p.Members) != 0 {
					t.Fatalf("status %+v, members %v; want the target dropped as a bad __address__", st, addrPorts(n))
				}
				return
			case endpointtest.SourceErr:
				_, lerr := Parse([]byte(entryConfig(&c, false)), "", LoadOptions{Resolver: endpointtest.Resolver})
				var fe *FieldError
				if !errors.As(lerr, &fe) || len(p.Unresolved) != 1 || p.Unresolved[0].Err != fe.Msg {
					t.Fatalf("unresolved %+v, want the listed target's error %v", p.Unresolved, lerr)
				}
				return
			case endpointtest.LookupErr:
				if len(p.Unresolved) != 1 || p.Unresolved[0].Err != c.Err || len(p.Members) != 0 {
					t.Fatalf("unresolved %+v, members %v; want only %q", p.Unresolved, addrPorts(n), c.Err)
				}
				return
			}
			if got := addrPorts(n); !slices.Equal(got, sorted(c.Want)) || len(p.Unresolved) != 0 {
				t.Fatalf("endpoints %v (unresolved %+v), want %v", got, p.Unresolved, c.Want)
			}
		})
	}
}

// waitDiscovered waits until pool p's source has given its target (or
// dropped it) and every name it found was looked up, and returns what was
// found.
func waitDiscovered(t *testing.T, run *discovery.Runner) map[string]discovery.Found {
	t.Helper()
	type seen struct {
		Found  map[string]discovery.Found
		Status []discovery.PoolStatus
	}
	return testenv.Eventually(t, "discovery to settle", func() (seen, bool) {
		found, _ := run.Found()
		st := run.Status()
		f := found["p"]
		settled := len(st) == 1 && len(st[0].Sources) == 1 && st[0].Sources[0].Updates > 0 &&
			(f.Len()+len(f.Unresolved) > 0 || st[0].Sources[0].Dropped["bad __address__"] > 0)
		for _, u := range f.Unresolved {
			settled = settled && u.Err != "not looked up yet"
		}
		return seen{found, st}, settled
	}).Found
}

// TestSourceAddressFamily checks that a check's source_address must be of
// a family its ip_family allows.
func TestSourceAddressFamily(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ family, source, wantErr string }{
		{"ip4", "::1", `checks.c.source_address: ::1 does not match ip_family ip4`},
		{"ip6", "127.0.0.1", `checks.c.source_address: 127.0.0.1 does not match ip_family ip6`},
		{"ip6", "::ffff:127.0.0.1", `checks.c.source_address: 127.0.0.1 does not match ip_family ip6`},
		{"ip4", "127.0.0.1", ""},
		{"any", "::1", ""},
	} {
		_, err := Parse([]byte("checks: {c: {protocol: http, ip_family: "+c.family+", source_address: \""+c.source+"\"}}\npools: [{name: p, check: c, targets: [v4.test]}]\n"), "", testOptions())
		if got := fmt.Sprint(err); c.wantErr == "" && err != nil || c.wantErr != "" && got != c.wantErr {
			t.Errorf("ip_family %s, source_address %s: %v, want %q", c.family, c.source, err, c.wantErr)
		}
	}
}
