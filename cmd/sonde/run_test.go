package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
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
// missing file, a CA file the HTTP prober cannot use, secret files the
// daemon cannot use.
func TestRunAndCheckAgree(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := filepath.Join(dir, "sonde.yaml")
	if err := os.WriteFile(badCA, []byte("checks:\n  web: {protocol: https, tls: {ca_file: ca.pem}}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Secret files the daemon cannot use: one of 2 GiB (sparse), one that
	// holds only white space. Those of webhooks used to pass the check and
	// stop the run's start with exit 1.
	big, err := os.Create(filepath.Join(dir, "big.secret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	big.Close()
	if err := os.WriteFile(filepath.Join(dir, "empty.secret"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hookSecret := func(name string) string {
		p := filepath.Join(dir, name+".yaml")
		y := "checks:\n  web: {protocol: http}\npools: [{name: p, check: web, targets: [127.0.0.1]}]\nwebhooks: [{url: \"http://127.0.0.1:1/\", secret_file: " + name + ".secret}]\n"
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, file, msg string }{
		{"missing file", filepath.Join(dir, "missing.yaml"), "no such file or directory"},
		{"CA file without a certificate", badCA, `checks.web.tls.ca_file: "ca.pem": no PEM certificate found`},
		{"secret file too large", hookSecret("big"), `webhooks[0].secret_file: "big.secret": file too large: 2147483648 bytes, at most 65536 allowed`},
		{"secret file empty", hookSecret("empty"), `webhooks[0].secret_file: "empty.secret": secret file is empty`},
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

// TestSourceFlag checks that -source has one grammar and one message in
// every command that takes it, that of a check's source_address: sonde run
// and sonde probe refuse it before they load or probe anything, and scan's
// sweep settings are made without opening a prober.
func TestSourceFlag(t *testing.T) {
	for _, bad := range []string{"bogus", "fe80::1%eth0"} {
		t.Run(bad, func(t *testing.T) {
			_, cerr := config.ParseSourceAddress(bad)
			if cerr == nil {
				t.Fatalf("config accepts source address %q", bad)
			}
			missing := filepath.Join(t.TempDir(), "missing.yaml") // never read: -source fails first
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"run", "-config", missing, "-listen", "127.0.0.1:0", "-source", bad}, &out, &errOut)
			if code := report(err, &errOut); code != exitUsage || errOut.String() != "sonde: run: -source: "+cerr.Error()+"\n" {
				t.Errorf("sonde run -source %q: exit %d, stderr %q", bad, code, errOut.String())
			}
			r := runProbeTest(t, nil, "-source", bad, "tcp://127.0.0.1:1")
			if want := "sonde: probe: -source: " + cerr.Error() + "\n"; r.code != exitUsage || r.stderr != want {
				t.Errorf("sonde probe -source %q: exit %d, stderr %q, want %q", bad, r.code, r.stderr, want)
			}
			sf, _, err := parseScanFlags([]string{"-port", "80", "-source", bad, "127.0.0.1"}, &errOut)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sf.sweepOptions(probe.NewTable(1)); err == nil || err.Error() != "scan: -source: "+cerr.Error() {
				t.Errorf("sonde scan -source %q: %v", bad, err)
			}
		})
	}
}

// TestRunStateFileRefused: "sonde run -state-file" naming a file that is
// not a state file (here the configuration itself), or one another sonde
// holds, ends at the start with exit 2 and says why; the first used to be
// overwritten with states, the second shared by two daemons.
func TestRunStateFileRefused(t *testing.T) {
	const yaml = "checks:\n  web: {protocol: http, interval: 1h}\npools: [{name: p, check: web, targets: [\"127.0.0.1:1\"]}]\n"
	held := filepath.Join(t.TempDir(), "state")
	lock, err := os.OpenFile(held+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		state func(cfg string) string
		msg   string // after the state file's name
	}{
		{"not a state file", func(cfg string) string { return cfg }, " is not a sonde state file"},
		{"held by another sonde", func(string) string { return held }, " is in use by another sonde"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, yaml)
			state := tc.state(cfg)
			before, _ := os.ReadFile(state)
			// Bounded: a daemon that starts runs until this ends.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			err := run(ctx, []string{"run", "-config", cfg, "-state-file", state, "-state-interval", "10ms", "-listen", "127.0.0.1:0", "-syn=false"}, &out, &errOut)
			if code := report(err, &errOut); code != exitUsage || !strings.Contains(errOut.String(), state+tc.msg) {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, exitUsage, errOut.String(), state+tc.msg)
			}
			if after, _ := os.ReadFile(state); !bytes.Equal(after, before) {
				t.Errorf("%s was written", state)
			}
		})
	}
}
