package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakeResolver answers host-name lookups from a table; it never touches the
// network. Names not in the table fail like NXDOMAIN.
type fakeResolver map[string][]string

func (r fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	addrs, ok := r[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	var out []netip.Addr
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		if network == "ip4" && !a.Unmap().Is4() || network == "ip6" && a.Unmap().Is4() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// testResolver knows a few names used by the tests.
var testResolver = fakeResolver{
	"api-1.internal": {"2001:db8::10", "198.18.1.10", "198.18.1.11"},
	"api-2.internal": {"198.18.1.20"},
	"alias.internal": {"198.18.1.20"},
	"v4only.test":    {"192.0.2.1"},
	"v6only.test":    {"2001:db8::6"},
}

// testEnv is the environment the tests see.
func testEnv(key string) (string, bool) {
	if key == "SONDE_TEST_TOKEN" {
		return "s3cret", true
	}
	if key == "SONDE_TEST_EMPTY" {
		return "", true
	}
	return "", false
}

// testOptions never reach the network or the real environment.
func testOptions() LoadOptions {
	return LoadOptions{Resolver: testResolver, LookupEnv: testEnv}
}

// mustParse parses a config from a string for tests.
func mustParse(t interface {
	Helper()
	Fatalf(string, ...any)
}, yaml, dir string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yaml), dir, testOptions())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// writeFile writes a test file into dir.
func writeFile(t interface {
	Helper()
	Fatal(...any)
}, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeCertFiles writes a self-signed certificate and its key as PEM files
// in dir, under the names given, for configs that name TLS files.
func writeCertFiles(t *testing.T, dir, certName, keyName string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sonde test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{certName: {Type: "CERTIFICATE", Bytes: der}, keyName: {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
