package prober

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/config"
)

func TestParseProbeTarget(t *testing.T) {
	addr := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	tests := []struct {
		in      string
		want    ProbeTarget
		wantErr string
	}{
		{in: "127.0.0.1", want: ProbeTarget{TargetEntry: config.TargetEntry{Addr: addr("127.0.0.1")}}},
		{in: "127.0.0.1:8080", want: ProbeTarget{TargetEntry: config.TargetEntry{Addr: addr("127.0.0.1"), Port: 8080}}},
		{in: "[::1]:443", want: ProbeTarget{TargetEntry: config.TargetEntry{Addr: addr("::1"), Port: 443}}},
		{in: "API.example:9000", want: ProbeTarget{TargetEntry: config.TargetEntry{Host: "api.example", Port: 9000}}},
		{in: "http://127.0.0.1:8080", want: ProbeTarget{TargetEntry: config.TargetEntry{Addr: addr("127.0.0.1"), Port: 8080}, Scheme: "http"}},
		{in: "https://api.example/health?deep=1", want: ProbeTarget{TargetEntry: config.TargetEntry{Host: "api.example"}, Scheme: "https", Path: "/health?deep=1"}},
		{in: "http://[::1]:8080/", want: ProbeTarget{TargetEntry: config.TargetEntry{Addr: addr("::1"), Port: 8080}, Scheme: "http", Path: "/"}},
		{in: "http://h.example?x=1", want: ProbeTarget{TargetEntry: config.TargetEntry{Host: "h.example"}, Scheme: "http", Path: "/?x=1"}},
		{in: "", wantErr: "empty; want host[:port], address[:port] or an http(s) URL"},
		{in: "10.0.0.0/8", wantErr: `"10.0.0.0/8" is a CIDR block; probe one address at a time`},
		{in: "10.0.0.300", wantErr: `"10.0.0.300" is not an IP address, CIDR block or host name`},
		{in: "ftp://h.example/", wantErr: `"ftp://h.example/" has scheme "ftp"; want http or https`},
		{in: "file:///etc/passwd", wantErr: `"file:///etc/passwd" has scheme "file"; want http or https`},
		{in: "http://u:p@h.example/", wantErr: `"http://u:p@h.example/" carries user information, which probes do not send`},
		{in: "http://h.example/#x", wantErr: `"http://h.example/#x" has a fragment, which probes do not send`},
		{in: "http:///path", wantErr: `"http:///path" has no host`},
		{in: "http://h.example:0/", wantErr: `"http://h.example:0/": host "h.example:0" is not an IP address or host name with an optional port`},
		{in: "http://bad_host!/", wantErr: `"http://bad_host!/": host "bad_host!" is not an IP address or host name with an optional port`},
		{in: "http://h.example/%zz", wantErr: `"http://h.example/%zz" is not a URL`},
		{in: "http://h.example//evil", wantErr: `"http://h.example//evil": path "//evil" is not a request path`},
		{in: "h.example:99999", wantErr: `"h.example:99999" has port 99999, out of range 1..65535`},
		{in: "http://" + strings.Repeat("a", 2050), wantErr: "2057 bytes, more than 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseProbeTarget(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseProbeTarget(%q) = %+v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ParseProbeTarget(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzParseProbeTarget holds ParseProbeTarget to its contract on any text:
// no panic, and a target it accepts has exactly one of an address or a host,
// no block, and a valid path when it has one.
func FuzzParseProbeTarget(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "https://h.example/x?y", "[::1]:1", "http://[::1", "h:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pt, err := ParseProbeTarget(s)
		if err != nil {
			return
		}
		if pt.Addr.IsValid() == (pt.Host != "") || pt.Block.IsValid() {
			t.Fatalf("%q: %+v", s, pt)
		}
		if pt.Path != "" && (!strings.HasPrefix(pt.Path, "/") || strings.HasPrefix(pt.Path, "//")) {
			t.Fatalf("%q: path %q", s, pt.Path)
		}
	})
}
