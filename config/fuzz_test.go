package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the loader: it must never panic, every
// error must be a configuration error (ErrInvalid), and every config it
// accepts must hold the dedup invariants. The seed corpus is every YAML file
// in testdata.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opt := testOptions()
		opt.MaxTargets = 1 << 12 // keep fuzzed CIDR blocks small
		cfg, err := Parse(data, "testdata", opt)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, p := range cfg.Pools {
			if len(p.Members) == 0 && len(p.Unresolved) == 0 && len(p.Discovery.Sources) == 0 {
				t.Fatalf("pool %s has no members, unresolved names or discovery", p.Name)
			}
			for _, id := range p.Members {
				if int(id) >= len(cfg.Targets) {
					t.Fatalf("pool %s member %d out of range", p.Name, id)
				}
			}
		}
		for _, c := range cfg.Checks {
			if err := c.Timing.Validate(); err != nil {
				t.Fatalf("check %s: %v", c.Name, err)
			}
		}
		checkInvariants(t, cfg)
		_ = cfg.Streams()
		_ = cfg.ProbeRates()
	})
}
