package endpoint

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// TestDNSResolver resolves names against a DNS server on loopback, with
// resolv.conf's search domains, and reads the answers' TTL.
func TestDNSResolver(t *testing.T) {
	srv := testenv.NewDNSServer(t, "127.0.0.1:0",
		"api.corp.test. 30 IN A 192.0.2.20",
		"api.corp.test. 30 IN A 192.0.2.10",
		"api.corp.test. 120 IN AAAA 2001:db8::10",
		"only6.test. 60 IN AAAA 2001:db8::6",
	)
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 192.0.2.53\nsearch corp.test\noptions ndots:1 timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.9 local.test alias.test # comment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &DNSResolver{ResolvConf: conf, Hosts: hosts, Servers: []string{srv.Addr}}
	ctx := context.Background()

	res := Lookup(ctx, r, "api", Any, 5*time.Second)
	if res.Err != nil || !slices.Equal(res.Addrs, addrs("192.0.2.10", "2001:db8::10")) || res.TTL != 30*time.Second {
		t.Errorf("api (search corp.test): %+v, want the lowest of each family with TTL 30s", res)
	}
	if res := Lookup(ctx, r, "api.corp.test.", IP6, 5*time.Second); res.Err != nil || !slices.Equal(res.Addrs, addrs("2001:db8::10")) || res.TTL != 120*time.Second {
		t.Errorf("api.corp.test. over IPv6: %+v", res)
	}
	if res := Lookup(ctx, r, "only6.test", IP4, 5*time.Second); res.Err == nil || !strings.Contains(res.Err.Error(), "no IPv4 address") {
		t.Errorf("only6.test over IPv4: %+v, want no IPv4 address", res)
	}
	if res := Lookup(ctx, r, "nowhere.test", Any, 5*time.Second); res.Err == nil || res.Err.Error() != `cannot resolve "nowhere.test": no such host` {
		t.Errorf("nowhere.test: %+v, want no such host", res)
	}
	if res := Lookup(ctx, r, "alias.test", Any, 5*time.Second); res.Err != nil || !slices.Equal(res.Addrs, addrs("127.0.0.9")) || res.TTL != HostsTTL {
		t.Errorf("alias.test from the hosts file: %+v", res)
	}
	if n := srv.Asked("alias.test."); n != 0 {
		t.Errorf("a name in the hosts file was asked of DNS %d times", n)
	}

	// A server that does not answer: a timeout, not "no such host".
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	r = &DNSResolver{ResolvConf: conf, Hosts: "-", Servers: []string{dead.LocalAddr().String()}}
	if res := Lookup(ctx, r, "api.corp.test", Any, 3*time.Second); res.Err == nil || !strings.Contains(res.Err.Error(), "timed out") {
		t.Errorf("silent server: %+v, want a timeout", res)
	}
}
