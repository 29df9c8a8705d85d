package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe/endpoint"
)

func TestProbeUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string // stderr must contain it
	}{
		{"no URL", nil, "probe: no URL to probe"},
		{"unknown scheme", []string{"ftp://127.0.0.1:21"}, `probe: URL "ftp://127.0.0.1:21": scheme "ftp" is not one of tcp, connect, syn, http, https`},
		{"tcp without port", []string{"tcp://127.0.0.1"}, `probe: URL "tcp://127.0.0.1": missing port; want tcp://HOST:PORT`},
		{"tcp with path", []string{"tcp://127.0.0.1:80/x"}, "has no path or query"},
		{"port out of range", []string{"http://127.0.0.1:70000/"}, `probe: URL "http://127.0.0.1:70000/": "127.0.0.1:70000" has port 70000, out of range 1..65535`},
		{"no host", []string{"http:///x"}, "missing host"},
		{"bad -status", []string{"-status", "399-200", "http://127.0.0.1/"}, `probe: -status: "399-200": element "399-200" has its start after its end`},
		{"bad -preset", []string{"-preset", "aws", "http://127.0.0.1/"}, `probe: -preset: "aws" is not one of appservice, frontdoor, appgateway, globalaccelerator`},
		{"preset without tcp", []string{"-preset", "frontdoor", "tcp://127.0.0.1:80"}, `probe: URL "tcp://127.0.0.1:80" (protocol): "tcp" is not one of http, https for preset frontdoor`},
		{"bad -method", []string{"-method", "POST", "http://127.0.0.1/"}, `probe: -method: "POST" is not one of GET, HEAD`},
		{"body with HEAD", []string{"-preset", "frontdoor", "-body", "x", "http://127.0.0.1/"}, "probe: -body: cannot be used with method HEAD"},
		{"bad -timeout", []string{"-timeout", "0s", "tcp://127.0.0.1:1"}, "probe: -timeout: 0s is out of range 1ms..24h"},
		{"-timeout not a duration", []string{"-timeout", "5", "tcp://127.0.0.1:1"}, `probe: -timeout: "5" is not a duration (want a number with a unit, such as "5s" or "250ms")`},
		{"-timeout below a millisecond", []string{"-timeout", "1500us", "tcp://127.0.0.1:1"}, `probe: -timeout: "1500us" is not a whole number of milliseconds`},
		{"bad -insecure", []string{"-insecure=maybe", "https://127.0.0.1/"}, `probe: -insecure: "maybe": want true or false`},
		{"repeated -header", []string{"-header", "X-A: 1", "-header", "x-a: 2", "http://127.0.0.1/"}, `probe: -header: "x-a: 2": header X-A is given more than once`},
		{"bad header name", []string{"-header", "X A: 1", "http://127.0.0.1/"}, `probe: -header: "X A" is not a valid header name`},
		{"token -header", []string{"-header", "X-Ms-Auth-Internal-Token: t", "http://127.0.0.1/"}, "probe: -header X-Ms-Auth-Internal-Token: cannot be set here; set it with the auth token setting"},
		{"sni is an address", []string{"-sni", "10.0.0.1", "https://127.0.0.1/"}, `probe: -sni: "10.0.0.1" is not a host name`},
		{"path with authority", []string{"http://127.0.0.1//evil/x"}, `probe: URL "http://127.0.0.1//evil/x" (path): "//evil/x" is not a request path`},
		{"bad -ip-family", []string{"-ip-family", "ip5", "tcp://127.0.0.1:1"}, `probe: -ip-family: "ip5" is not one of any, ip4, ip6`},
		{"bad -source", []string{"-source", "nowhere", "tcp://127.0.0.1:1"}, `probe: -source: "nowhere" is not an IP address`},
		{"bad -header", []string{"-header", "novalue", "http://127.0.0.1/"}, `probe: -header: "novalue": want NAME:VALUE`},
		{"reserved -header", []string{"-header", "Host: x", "http://127.0.0.1/"}, "probe: -header Host: cannot be set here; set it with the host setting"},
		{"globalaccelerator path", []string{"-preset", "globalaccelerator", "http://127.0.0.1/" + strings.Repeat("a", 80)}, `/` + strings.Repeat("a", 80) + `" (path): `},
		{"http flag without http URL", []string{"-status", "200", "tcp://127.0.0.1:1"}, "probe: -status applies to http:// and https:// URLs, and none is given"},
		{"tls flag without https URL", []string{"-insecure", "http://127.0.0.1/"}, "probe: -insecure applies to https:// URLs, and none is given"},
		{"ca-file with insecure", []string{"-insecure", "-ca-file", "x.pem", "https://127.0.0.1/"}, "probe: -ca-file: has no effect with insecure_skip_verify"},
		{"missing ca-file", []string{"-ca-file", "/nonexistent/ca.pem", "https://127.0.0.1/"}, "probe: -ca-file:"},
		{"unknown flag", []string{"-bogus", "http://127.0.0.1/"}, "flag provided but not defined: -bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runProbeTest(t, nil, tc.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want 2; stdout %s stderr %s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.msg)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

// TestProbeURLHost checks that a URL's host is refused as config refuses a
// target, before any lookup or probe: the URLs are only parsed, and the
// runs of the command get a resolver that fails the test when asked, so
// nothing leaves the process.
func TestProbeURLHost(t *testing.T) {
	for _, tc := range []struct {
		url, entry string
		named      bool // the host is a name: without the check it would be looked up
	}{
		{"http://-bad-.example/", "-bad-.example", true},
		{"tcp://a..b:80", "a..b:80", true},
		{"https://a_b-.example:8443/x", "a_b-.example:8443", true},
		{"tcp://[fe80::1%25eth0]:80", "[fe80::1%eth0]:80", false},
		{"http://[fe80::1%25eth0]/", "[fe80::1%eth0]", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, want := config.ParseTargetEntry(tc.entry)
			if want == nil {
				t.Fatalf("config accepts %q", tc.entry)
			}
			wantMsg := fmt.Sprintf("probe: URL %q: %v", tc.url, want)
			if _, err := parseProbeURL(tc.url); err == nil || err.Error() != wantMsg {
				t.Fatalf("parseProbeURL(%q) = %v, want %q", tc.url, err, wantMsg)
			}
			if !tc.named {
				return // an address would be probed at once: parsing it is the test
			}
			res := endpoint.ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
				t.Errorf("%q looked up", host)
				return nil, errors.New("no lookups in this test")
			})
			var out, errOut bytes.Buffer
			err := runProbeWith(context.Background(), []string{tc.url}, &out, &errOut, res)
			if code := report(err, &errOut); code != exitUsage || errOut.String() != "sonde: "+wantMsg+"\n" {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), exitUsage, wantMsg)
			}
		})
	}
	for _, ok := range []string{"http://API-1.internal:/x", "tcp://[2001:db8::1]:80", "https://127.0.0.1/"} {
		if _, err := parseProbeURL(ok); err != nil {
			t.Errorf("parseProbeURL(%q): %v", ok, err)
		}
	}
}

// TestProbeConfigErrorWraps checks that a settings error still wraps the
// config's error.
func TestProbeConfigErrorWraps(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runProbe(context.Background(), []string{"-status", "abc", "http://127.0.0.1/"}, &out, &errOut)
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("error %v does not wrap config.ErrInvalid", err)
	}
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "checks.probe.healthy_status" {
		t.Errorf("error %v does not carry the config field error", err)
	}
}

// TestProbeHelp checks that -h prints the usage and exits 0.
func TestProbeHelp(t *testing.T) {
	r := runProbeTest(t, nil, "-h")
	if r.code != exitOK || !strings.Contains(r.stderr, "Usage: sonde probe") {
		t.Errorf("exit %d stderr %q, want 0 and the usage", r.code, r.stderr)
	}
}
