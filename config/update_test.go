package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
)

// TestWithPoolTargets checks a pool's targets changed without a file: added
// and removed by address and port, deduplicated with the other pools (one
// target per address, port and check; one stream per probe class), the
// check's port for endpoints without one, and the original left alone.
func TestWithPoolTargets(t *testing.T) {
	c, err := Parse([]byte(`
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
  slow: {protocol: http, path: /, interval: 5s, timeout: 1s}
pools:
  - {name: disc, check: web, targets: ["192.0.2.1", "192.0.2.2"]}
  - {name: other, check: web, targets: ["192.0.2.3"]}
  - {name: third, check: slow, targets: ["192.0.2.4"]}
`), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ep := func(s string) Endpoint { return Endpoint{AddrPort: netip.MustParseAddrPort(s)} }
	n, err := c.WithPoolTargets("disc",
		[]Endpoint{ep("192.0.2.3:80"), ep("192.0.2.4:0"), ep("192.0.2.9:8080"), ep("192.0.2.1:80")},
		[]Endpoint{ep("192.0.2.2:80"), ep("192.0.2.77:80")})
	if err != nil {
		t.Fatal(err)
	}
	members := func(cfg *Config, pool string) []string {
		var out []string
		for _, p := range cfg.Pools {
			if p.Name == pool {
				for _, id := range p.Members {
					out = append(out, cfg.Targets[id].AddrPort().String())
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := members(n, "disc"), []string{"192.0.2.1:80", "192.0.2.3:80", "192.0.2.4:80", "192.0.2.9:8080"}; !slices.Equal(got, want) {
		t.Errorf("disc = %v, want %v", got, want)
	}
	if got, want := members(c, "disc"), []string{"192.0.2.1:80", "192.0.2.2:80"}; !slices.Equal(got, want) {
		t.Errorf("the original changed: disc = %v, want %v", got, want)
	}
	if len(n.Targets) != 5 {
		t.Errorf("%d targets, want 5: 192.0.2.3 is one target in disc and other", len(n.Targets))
	}
	var web4, slow4 int = -1, -1
	for id, tg := range n.Targets {
		if tg.AddrPort() == netip.MustParseAddrPort("192.0.2.4:80") {
			if n.Checks[tg.Check].Name == "web" {
				web4 = id
			} else {
				slow4 = id
			}
		}
	}
	if web4 < 0 || slow4 < 0 || n.Targets[web4].Leader != n.Targets[slow4].Leader {
		t.Errorf("192.0.2.4:80 of web (%d) and slow (%d) must share one stream", web4, slow4)
	}
	for _, tt := range []struct {
		pool string
		add  []Endpoint
		want string
	}{
		{"nope", nil, `pool "nope": no such pool`},
		{"disc", []Endpoint{{AddrPort: netip.AddrPortFrom(netip.MustParseAddr("fe80::1%eth0"), 80)}}, `pool "disc": target [fe80::1%eth0]:80: want an IP address without zone`},
	} {
		if _, err := c.WithPoolTargets(tt.pool, tt.add, nil); err == nil || err.Error() != tt.want {
			t.Errorf("WithPoolTargets(%s) = %v, want %q", tt.pool, err, tt.want)
		}
	}
}

// TestConfigFiles checks that a loaded configuration names the files it
// came from.
func TestConfigFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "targets.txt", "192.0.2.1:80\n")
	path := filepath.Join(dir, "sonde.yaml")
	writeFile(t, dir, "sonde.yaml", `
checks:
  web: {protocol: http, path: /, interval: 1s, timeout: 1s}
pools:
  - {name: p, check: web, targets_file: targets.txt}
`)
	c, err := Load(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{path, filepath.Join(dir, "targets.txt")}; !slices.Equal(c.Files, want) {
		t.Errorf("Files = %v, want %v", c.Files, want)
	}
}
