package config

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRemediationCommandRelative: a program given with a directory is the
// file of that name in the configuration's directory, also when the
// configuration is named by a relative path: "./remedy.sh" next to
// "sonde.yaml" used to become "remedy.sh", which exec looks up in PATH, so
// another program ran. A bare name is still looked up in PATH.
func TestRemediationCommandRelative(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "sonde.yaml", `
checks: {web: {protocol: http}}
pools: [{name: p, check: web, targets: [127.0.0.1]}]
remediation:
  - {name: dot, pools: [p], command: ["./remedy.sh", "--now"]}
  - {name: sub, pools: [p], command: ["bin/remedy"]}
  - {name: bare, pools: [p], command: ["remedy"]}
  - {name: abs, pools: [p], command: ["/usr/local/bin/remedy"]}
`)
	t.Chdir(dir)
	cfg, err := Load("sonde.yaml", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, r := range cfg.Remediations {
		got = append(got, r.Command)
	}
	want := [][]string{{filepath.Join(dir, "remedy.sh"), "--now"}, {filepath.Join(dir, "bin/remedy")}, {"remedy"}, {"/usr/local/bin/remedy"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}
