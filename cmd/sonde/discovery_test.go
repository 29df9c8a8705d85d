package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// dnsTestAddr is where the test's DNS server listens: a loopback address of
// its own, on the standard port (resolv.conf has no port).
const dnsTestAddr = "127.0.0.153:53"

// TestRunDNSDiscovery runs sonde with a resolv.conf of its own (bound over
// /etc/resolv.conf in a private mount namespace) that names a DNS server on
// loopback: a pool fed by dns_sd_configs follows the SRV records as they
// change, and a static host name is looked up there too. No query leaves
// the machine.
func TestRunDNSDiscovery(t *testing.T) {
	testenv.RequirePrivileged(t, "a private mount namespace for resolv.conf, and port 53 on loopback")
	unshare := testenv.Tool(t, "unshare", "util-linux")
	var ports []string
	for range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }))
		t.Cleanup(srv.Close)
		ports = append(ports, srv.URL[strings.LastIndexByte(srv.URL, ':')+1:])
	}
	srv := func(ports ...string) []string {
		rrs := []string{"a.svc.test. 60 IN A 127.0.0.1", "static.svc.test. 60 IN A 127.0.0.1"}
		for _, p := range ports {
			rrs = append(rrs, fmt.Sprintf("_web._tcp.svc.test. 60 IN SRV 0 0 %s a.svc.test.", p))
		}
		return rrs
	}
	dns := testenv.NewDNSServer(t, dnsTestAddr, srv(ports[0], ports[1])...)
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.153\noptions timeout:1 attempts:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 200ms, timeout: 1s, rise: 1, fall: 2}
pools:
  - name: srv
    check: web
    dns_sd_configs: [{names: [_web._tcp.svc.test], type: SRV, refresh_interval: 1s}]
  - {name: static, check: web, targets: ["static.svc.test:%s"]}
`, ports[2]))
	wrap := []string{unshare, "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv}
	p := startSondeIn(t, wrap, cfg)

	type target struct {
		Target, Host, State string
	}
	healthy := func(pool string) []string {
		var page struct{ Targets []target }
		p.get(t, "/api/v1/targets?pool="+pool, &page)
		var out []string
		for _, x := range page.Targets {
			if x.State == "healthy" {
				out = append(out, x.Host+"="+x.Target)
			}
		}
		slices.Sort(out)
		return out
	}
	wait := func(pool string, want ...string) {
		t.Helper()
		slices.Sort(want)
		testenv.Eventually(t, fmt.Sprintf("pool %s healthy with %v", pool, want), func() ([]string, bool) {
			got := healthy(pool)
			return got, slices.Equal(got, want)
		})
	}
	wait("srv", "a.svc.test=127.0.0.1:"+ports[0], "a.svc.test=127.0.0.1:"+ports[1])
	wait("static", "static.svc.test=127.0.0.1:"+ports[2])

	// The SRV records change: one port goes, another comes.
	dns.Set(t, srv(ports[1], ports[2])...)
	wait("srv", "a.svc.test=127.0.0.1:"+ports[1], "a.svc.test=127.0.0.1:"+ports[2])
	if dns.Asked("_web._tcp.svc.test.") < 2 {
		t.Errorf("the SRV name was asked %d times", dns.Asked("_web._tcp.svc.test."))
	}
	if out, err := exec.Command("grep", "-c", "127.0.0.153", "/etc/resolv.conf").CombinedOutput(); err == nil {
		t.Errorf("the host's resolv.conf was changed: %s", out)
	}
}
