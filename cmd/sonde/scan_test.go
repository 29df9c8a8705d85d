package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/syn"
)

func TestParsePorts(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint16
		wantErr string
	}{
		{"80", []uint16{80}, ""},
		{"80,443", []uint16{80, 443}, ""},
		{"8000-8002, 1", []uint16{8000, 8001, 8002, 1}, ""},
		{"65535", []uint16{65535}, ""},
		{"65534-65535", []uint16{65534, 65535}, ""},
		{"", nil, ""},
		{"0", nil, "scan: -port: 0 is out of range 1..65535"},
		{"65536", nil, "scan: -port: 65536 is out of range 1..65535"},
		{"80,1-70000", nil, "scan: -port: 70000 is out of range 1..65535"},
		{"90-80", nil, `scan: -port: "90-80" has its start after its end`},
		{"http", nil, `scan: -port: "http" is not a port or a range FIRST-LAST`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePorts(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSourcePorts checks -source-ports: a range, worded as -port is.
func TestSourcePorts(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"61000-65535", ""},
		{"1-70000", "scan: -source-ports: 70000 is out of range 1..65535"},
		{"0-10", "scan: -source-ports: 0 is out of range 1..65535"},
		{"62000-61000", `scan: -source-ports: "62000-61000" has its start after its end`},
		{"61000", `scan: -source-ports: "61000" is not a range FIRST-LAST`},
		{"a-b", `scan: -source-ports: "a-b" is not a port or a range FIRST-LAST`},
	} {
		sf, _, err := parseScanFlags([]string{"-port", "80", "-source-ports", tc.in, "127.0.0.1"}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sf.sweepOptions(probe.NewTable(1))
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("-source-ports %s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestScanTable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "targets")
	if err := os.WriteFile(file, []byte("# fleet\n10.0.0.1\n\n192.0.2.0/31 # two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := scanTable([]string{"@" + file, "2001:db8::1", "::ffff:198.18.0.1", "198.18.0.2:8080", "::ffff:10.1.0.0/127"}, []uint16{80, 443})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id := range tab.Len() {
		got = append(got, tab.Endpoint(uint32(id)).String())
	}
	want := []string{
		"10.0.0.1:80", "10.0.0.1:443", "192.0.2.0:80", "192.0.2.0:443", "192.0.2.1:80", "192.0.2.1:443",
		"[2001:db8::1]:80", "[2001:db8::1]:443", "198.18.0.1:80", "198.18.0.1:443", "198.18.0.2:8080",
		"10.1.0.0:80", "10.1.0.0:443", "10.1.0.1:80", "10.1.0.1:443",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if tab, err := scanTable([]string{"198.18.0.1:22", "[2001:db8::1]:443"}, nil); err != nil || tab.Len() != 2 {
		t.Errorf("targets with their own ports and no -port: %v, %v", tab, err)
	}
	for _, tt := range []struct {
		targets []string
		ports   []uint16
		want    string
	}{
		{[]string{"example.com"}, []uint16{80}, `"example.com" is a host name: sonde scan takes IP addresses and CIDR blocks`},
		{[]string{"10.0.0.0/33"}, []uint16{80}, `"10.0.0.0/33" is not a valid CIDR block`},
		{[]string{"198.18.0.1/16"}, []uint16{80}, `"198.18.0.1/16" has host bits set; did you mean 198.18.0.0/16?`},
		{[]string{"2001:db8::/64"}, []uint16{80}, "block 2001:db8::/64 has 2^64 addresses, more than the limit of 16777216 probes"},
		{[]string{"10.0.0.0/7"}, []uint16{80}, "block 10.0.0.0/7 has 33554432 addresses, more than the limit of 16777216 probes"},
		{[]string{"10.0.0.0/8"}, []uint16{80, 443}, "block 10.0.0.0/8 brings the number of probes (addresses × ports) to 33554432, more than the limit of 16777216"},
		{[]string{"10.0.0.0/8", "10.1.0.0:22"}, []uint16{80}, "10.1.0.0 brings the number of probes (addresses × ports) to 16777217, more than the limit of 16777216"},
		{[]string{"10.0.0.1"}, nil, "10.0.0.1 has no port and -port is not set"},
		{[]string{"10.0.0.0/30"}, nil, "10.0.0.0/30 has no port and -port is not set"},
		{[]string{"@" + file + ".missing"}, []uint16{80}, fmt.Sprintf("%q: no such file or directory", file+".missing")},
		{[]string{"@" + file}, nil, file + ":2: 10.0.0.1 has no port and -port is not set"},
		{[]string{"@/dev/null"}, []uint16{80}, "no targets"},
	} {
		if _, err := scanTable(tt.targets, tt.ports); err == nil || err.Error() != tt.want {
			t.Errorf("scanTable(%q, %v) = %v, want %q", tt.targets, tt.ports, err, tt.want)
		}
	}
}

// TestScanTargetGrammar proves that `sonde scan` and config files share one
// target grammar: a bad target gets the same message, and exit code 2, on
// the command line as in a config's targets, and in a file given with @FILE
// as in a targets_file.
func TestScanTargetGrammar(t *testing.T) {
	t.Chdir(t.TempDir())
	// configError loads a config whose pool has the given targets settings
	// and returns the message of its error, without the field.
	configError := func(t *testing.T, targets string) string {
		t.Helper()
		yaml := "checks: {c: {protocol: tcp, port: 80}}\npools: [{name: p, check: c, " + targets + "}]\n"
		if err := os.WriteFile("sonde.yaml", []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load("sonde.yaml", config.LoadOptions{})
		var fe *config.FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("config with %s: %v, want a field error", targets, err)
		}
		return fe.Msg
	}
	// scanError runs sonde scan on target and returns what it printed,
	// expecting exit code 2.
	scanError := func(t *testing.T, target string) string {
		t.Helper()
		var stderr bytes.Buffer
		err := scanNoProber(t, []string{"-port", "80", target}, &stderr)
		if code := report(err, &stderr); code != exitUsage {
			t.Fatalf("scan %s: exit %d, want %d (%v)", target, code, exitUsage, err)
		}
		return stderr.String()
	}
	for _, text := range []string{
		"198.18.0.1/16", "10.0.0.0/33", "::ffff:10.0.0.0/64", "10.0.0.300", "fe80::1%eth0",
		"10.0.0.1:http", "10.0.0.1:65536", "[10.0.0.1]:80", "http://198.18.0.1", "@nested.txt",
	} {
		t.Run(text, func(t *testing.T) {
			if !strings.HasPrefix(text, "@") { // on the command line, @FILE names a file
				msg := configError(t, fmt.Sprintf("targets: [%q]", text))
				if got, want := scanError(t, text), "sonde: scan: "+msg+"\n"; got != want {
					t.Errorf("sonde scan %s printed\n%s\nconfig gets\n%s", text, got, want)
				}
			}
			if err := os.WriteFile("targets.txt", []byte("# fleet\n198.18.0.0/24\n"+text+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			msg := configError(t, "targets_file: targets.txt")
			if !strings.HasPrefix(msg, "targets.txt:3: ") {
				t.Errorf("config error %q does not name targets.txt:3", msg)
			}
			if got, want := scanError(t, "@targets.txt"), "sonde: scan: "+msg+"\n"; got != want {
				t.Errorf("sonde scan @targets.txt printed\n%s\nconfig gets\n%s", got, want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		msg := configError(t, "targets_file: missing.txt")
		if got, want := scanError(t, "@missing.txt"), "sonde: scan: "+msg+"\n"; got != want {
			t.Errorf("sonde scan @missing.txt printed\n%s\nconfig gets\n%s", got, want)
		}
	})
}

// scanNoProber runs sonde scan with args in the process, with a sweep
// constructor that fails the test and opens nothing: input the command
// refuses never reaches a raw socket, and input it accepts by mistake fails
// the test instead of sending SYNs to the addresses of the test.
func scanNoProber(t *testing.T, args []string, stderr *bytes.Buffer) error {
	t.Helper()
	refuse := func(syn.SweepOptions) (*syn.Sweep, error) {
		t.Errorf("sonde scan %q was accepted and reached the prober", args)
		return nil, errors.New("no prober in this test")
	}
	return runScanWith(context.Background(), args, &bytes.Buffer{}, stderr, refuse)
}

// TestScanNoProber checks the guard of the tests of refused input: a valid
// scan reaches the sweep's constructor, which scanNoProber gives them.
func TestScanNoProber(t *testing.T) {
	var reached []syn.SweepOptions
	open := func(o syn.SweepOptions) (*syn.Sweep, error) {
		reached = append(reached, o)
		return nil, errors.New("no prober in this test")
	}
	err := runScanWith(context.Background(), []string{"-port", "80", "10.0.0.1"}, &bytes.Buffer{}, &bytes.Buffer{}, open)
	if len(reached) != 1 || reached[0].Prober.Table.Len() != 1 || err == nil {
		t.Errorf("valid scan: %d constructor calls, error %v; want 1 and an error", len(reached), err)
	}
}

func TestScanUsage(t *testing.T) {
	for _, args := range [][]string{
		{"10.0.0.1"},               // no port
		{"-port", "80"},            // no target
		{"-port", "0", "10.0.0.1"}, // bad port
		{"-port", "80", "-rate", "-1", "10.0.0.1"},
		{"-port", "80", "-timeout", "0s", "10.0.0.1"},
		{"-port", "80", "-path", "connect", "10.0.0.1"},
		{"-port", "80", "not-an-address"},
		{"-bogus"},
	} {
		var stderr bytes.Buffer
		err := scanNoProber(t, args, &stderr)
		if code := report(err, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%v)", args, code, exitUsage, err)
		}
	}
}

func TestWriteScanResults(t *testing.T) {
	tab := probe.NewTable(3)
	tab.Add(netip.MustParseAddrPort("198.18.0.1:80"))
	tab.Add(netip.MustParseAddrPort("[2001:db8::1]:443"))
	tab.Add(netip.MustParseAddrPort("198.18.0.2:80"))
	result := func(id uint32) (probe.Outcome, time.Duration, bool) {
		if id == 0 {
			return probe.Success, 1500 * time.Microsecond, true
		}
		return probe.Timeout, 0, false
	}
	var out bytes.Buffer
	if err := writeScanResults(&out, tab, 3, result, true); err != nil {
		t.Fatal(err)
	}
	type line struct {
		Addr    string   `json:"addr"`
		Port    uint16   `json:"port"`
		Outcome string   `json:"outcome"`
		RTT     *float64 `json:"rtt_seconds"`
	}
	var got []line
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, l)
	}
	rtt := 0.0015
	want := []line{{"198.18.0.1", 80, "success", &rtt}, {"2001:db8::1", 443, "timeout", nil}, {"198.18.0.2", 80, "timeout", nil}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	out.Reset()
	if err := writeScanResults(&out, tab, 3, result, false); err != nil {
		t.Fatal(err)
	}
	if want := "198.18.0.1:80\tsuccess\t1.5ms\n[2001:db8::1]:443\ttimeout\t-\n198.18.0.2:80\ttimeout\t-\n"; out.String() != want {
		t.Errorf("text output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestScanNoPrivileges runs the scan without CAP_NET_RAW and expects a clear
// error naming the capability (exit 1). setpriv takes away the inheritable
// and ambient capabilities the scan could otherwise be given and, as root,
// changes to nobody first; without root the test's own user is the one
// without the capability.
func TestScanNoPrivileges(t *testing.T) {
	args := []string{testenv.Tool(t, "setpriv", "util-linux")}
	if os.Geteuid() == 0 {
		args = append(args, "--reuid=65534", "--regid=65534", "--clear-groups")
	}
	args = append(args, "--inh-caps=-all", "--ambient-caps=-all", testenv.Sonde(t), "scan", "-port", "1", "127.0.0.1")
	cmd := exec.Command(args[0], args[1:]...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Fatalf("exit: %v, want %d\n%s", err, exitFailure, out)
	}
	if !strings.Contains(string(out), "CAP_NET_RAW") {
		t.Errorf("error does not name CAP_NET_RAW:\n%s", out)
	}
}
