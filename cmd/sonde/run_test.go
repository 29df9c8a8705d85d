package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunBadConfig checks that a config that cannot be loaded at start ends
// "sonde run" with exit 2, as "sonde config check" does, and its error
// printed once, without a word about a previous configuration.
func TestRunBadConfig(t *testing.T) {
	invalid := writeConfig(t, "checks:\n  edge: {preset: globalaccelerator, port: 80, fall: 11}\npools: [{name: p, check: edge, targets: [127.0.0.1]}]\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tc := range []struct {
		name, file, msg string
	}{
		{"invalid", invalid, invalid + ": checks.edge.fall: 11 is out of range 2..10 for preset globalaccelerator"},
		{"missing", missing, missing + ": read config: open " + missing + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"run", "-config", tc.file, "-listen", "127.0.0.1:0", "-syn=false"}, &out, &errOut)
			if code := report(err, &errOut); code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut.String())
			}
			if n := strings.Count(errOut.String(), tc.msg); n != 1 {
				t.Errorf("stderr has the error %d times, want once:\n%s", n, errOut.String())
			}
			if strings.Contains(errOut.String(), "previous") {
				t.Errorf("stderr speaks of a previous configuration at start:\n%s", errOut.String())
			}
		})
	}
}

// TestRunAndCheckAgree checks that "sonde run" and "sonde config check"
// refuse the same configurations, with the same exit code and error: a
// missing file, and a CA file the HTTP prober cannot use.
func TestRunAndCheckAgree(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := filepath.Join(dir, "sonde.yaml")
	if err := os.WriteFile(badCA, []byte("checks:\n  web: {protocol: https, tls: {ca_file: ca.pem}}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, msg string }{
		{"missing file", filepath.Join(dir, "missing.yaml"), "no such file or directory"},
		{"CA file without a certificate", badCA, `checks.web.tls.ca_file: "ca.pem": no PEM certificate found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codes := map[string]int{}
			for _, args := range [][]string{
				{"run", "-config", tc.file, "-listen", "127.0.0.1:0", "-syn=false"},
				{"config", "check", tc.file},
			} {
				var out, errOut bytes.Buffer
				err := run(context.Background(), args, &out, &errOut)
				codes[args[0]] = report(err, &errOut)
				if !strings.Contains(errOut.String(), tc.msg) {
					t.Errorf("%s: stderr lacks %q:\n%s", args[0], tc.msg, errOut.String())
				}
			}
			if codes["run"] != exitUsage || codes["config"] != exitUsage {
				t.Errorf("exit codes run %d, config check %d; want %d for both", codes["run"], codes["config"], exitUsage)
			}
		})
	}
}
