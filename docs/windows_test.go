package docs

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
)

// presetWindowRow is a row of semantics.md's table of the presets' windows:
// the preset, then W1, W2 and W3, each starting with its seconds.
var presetWindowRow = regexp.MustCompile("(?m)^\\| `([a-z]+)`[^|]* \\| ([0-9]+) s[^|]*\\| ([0-9]+) s[^|]*\\| ([0-9]+) s[^|]*\\|$")

// TestPresetWindows checks the windows semantics.md gives for each preset's
// defaults against those the scheduler computes for a check of that preset.
func TestPresetWindows(t *testing.T) {
	b, err := os.ReadFile("semantics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := presetWindowRow.FindAllStringSubmatch(string(b), -1)
	if len(rows) != 4 {
		t.Fatalf("semantics.md: found %d rows of preset windows, want one per preset", len(rows))
	}
	for _, row := range rows {
		preset := row[1]
		t.Run(preset, func(t *testing.T) {
			check := fmt.Sprintf("{preset: %s, path: /health, port: 8080}", preset)
			if preset == config.PresetGlobalAccelerator {
				check = fmt.Sprintf("{preset: %s, port: 8080}", preset) // TCP, its default protocol
			}
			cfg, err := config.Parse([]byte("checks:\n  c: "+check+"\npools:\n  - {name: p, check: c, targets: [127.0.0.1]}\n"), t.TempDir(), config.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Checks[0]
			got := []time.Duration{c.FailureWindow(), c.SuccessWindow(c.Timeout), c.FailureWindowFromOnset()}
			for i, name := range []string{"W1", "W2", "W3"} {
				secs, _ := strconv.Atoi(row[2+i])
				if want := time.Duration(secs) * time.Second; got[i] != want {
					t.Errorf("%s: semantics.md says %s, the scheduler computes %s", name, want, got[i])
				}
			}
		})
	}
}

// readmeConfig returns the first YAML block of the README: its minimal
// configuration.
func readmeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("README.md has no YAML block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: the YAML block does not end")
	}
	return block
}

// TestReadmeConfig loads the README's minimal configuration and checks
// the windows the README promises for it.
func TestReadmeConfig(t *testing.T) {
	cfg, err := config.Parse([]byte(readmeConfig(t)), t.TempDir(), config.LoadOptions{})
	if err != nil {
		t.Fatalf("README.md's configuration: %v", err)
	}
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Checks[0]
	for _, claim := range []string{
		fmt.Sprintf("%.0f s after the first failing probe is sent (W1)", c.FailureWindow().Seconds()),
		fmt.Sprintf("%.0f s after the failure began (W3)", c.FailureWindowFromOnset().Seconds()),
	} {
		if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), claim) {
			t.Errorf("README.md does not say %q, which the scheduler computes for its configuration", claim)
		}
	}
}
