package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	httpprobe "github.com/sondeprobe/sonde/probe/http"
)

// seen is what a recorder saw of one request.
type seen struct {
	auth, token string
	certs       int // client certificates presented
}

// recorder is a loopback HTTP(S) server that answers 200 and records the
// credentials each request carried.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

// newRecorder starts a recorder; with tlsOn it serves HTTPS and asks for
// (without requiring) a client certificate.
func newRecorder(t *testing.T, tlsOn bool) *recorder {
	rc := &recorder{}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{auth: r.Header.Get("Authorization"), token: r.Header.Get(httpprobe.TokenHeader)}
		if r.TLS != nil {
			s.certs = len(r.TLS.PeerCertificates)
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, s)
		rc.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	if tlsOn {
		rc.srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
		rc.srv.StartTLS()
	} else {
		rc.srv.Start()
	}
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *recorder) addr() string { return rc.srv.Listener.Addr().String() }

// requests returns what the recorder saw so far.
func (rc *recorder) requests() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]seen(nil), rc.reqs...)
}

// since returns what the recorder saw after its first n requests.
func (rc *recorder) since(n int) []seen { return rc.requests()[n:] }

// clientCert writes a self-signed client certificate and its key into dir.
func clientCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sonde probe"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// credentialsDaemon runs a daemon with one check per probe_targets choice,
// each with an Authorization header, an auth token from a file and (for
// the https ones) a client certificate, and pools of the pool recorders.
type credentialsDaemon struct {
	td                *testDaemon
	pool, outsider    *recorder // plain HTTP: in the pools, and not
	tlsPool, tlsOther *recorder // HTTPS
	secret            string    // the token's secret
}

const bearer = "Bearer s3cret-value"

func startCredentialsDaemon(t *testing.T, set func(*Options)) *credentialsDaemon {
	cd := &credentialsDaemon{pool: newRecorder(t, false), outsider: newRecorder(t, false),
		tlsPool: newRecorder(t, true), tlsOther: newRecorder(t, true), secret: "token-secret-for-the-test"}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "token")
	if err := os.WriteFile(secretFile, []byte(cd.secret), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := clientCert(t, dir)
	creds := fmt.Sprintf(`headers: {Authorization: %q}, auth_token: {secret_file: %q}`, bearer, secretFile)
	tlsCreds := fmt.Sprintf(`tls: {insecure_skip_verify: true, cert_file: %q, key_file: %q}`, cert, key)
	cd.td = startDaemonWith(t, fmt.Sprintf(`
checks:
  secret: {protocol: http, path: /, interval: 1h, timeout: 5s, %[1]s}
  open: {protocol: http, path: /, interval: 1h, timeout: 5s, probe_targets: any, %[1]s}
  trusted: {protocol: http, path: /, interval: 1h, timeout: 5s, probe_targets: any_with_credentials, %[1]s}
  secret_tls: {protocol: https, path: /, interval: 1h, timeout: 5s, %[1]s, %[2]s}
  open_tls: {protocol: https, path: /, interval: 1h, timeout: 5s, probe_targets: any, %[1]s, %[2]s}
pools: # never probed by the schedule: the recorders see /probe's requests only
  - {name: a, check: secret, targets: [%[3]q], health_checks: false}
  - {name: b, check: open, targets: [%[3]q], health_checks: false}
  - {name: c, check: trusted, targets: [%[3]q], health_checks: false}
  - {name: d, check: secret_tls, targets: [%[4]q], health_checks: false}
  - {name: e, check: open_tls, targets: [%[4]q], health_checks: false}
`, creds, tlsCreds, cd.pool.addr(), cd.tlsPool.addr()), set)
	return cd
}

// probe asks /probe for module and target with extra headers, and returns
// the status and body.
func (cd *credentialsDaemon) probe(t *testing.T, module, target string, header http.Header) (int, string) {
	t.Helper()
	return cd.td.scrape(t, "/probe?"+url.Values{"module": {module}, "target": {target}}.Encode(), header)
}

// TestProbeCredentialsStayInPools is the regression test of /probe handing
// out a check's credentials: a check with an Authorization header, an auth
// token and a client certificate, probed through /probe at an address
// outside its pools, must not send them there. With probe_targets pools
// (the default) such a target is refused and sees no request; with any it
// is probed without the credentials; with any_with_credentials, with
// them; targets of the pools get them in every case.
func TestProbeCredentialsStayInPools(t *testing.T) {
	t.Parallel()
	cd := startCredentialsDaemon(t, nil)
	for _, tt := range []struct {
		name, module string
		rec          *recorder
		target       string
		status       int
		creds        bool // the target sees the credentials
	}{
		{"pools: a pool target gets them", "secret", cd.pool, cd.pool.addr(), 200, true},
		{"pools: a pool target as a URL with a path", "secret", cd.pool, "http://" + cd.pool.addr() + "/x", 200, true},
		{"pools: another address is refused", "secret", cd.outsider, cd.outsider.addr(), 403, false},
		{"pools: another address as a URL is refused", "secret", cd.outsider, "http://" + cd.outsider.addr() + "/", 403, false},
		{"pools: another https address is refused", "secret_tls", cd.tlsOther, cd.tlsOther.addr(), 403, false},
		{"any: a pool target gets them", "open", cd.pool, cd.pool.addr(), 200, true},
		{"any: another address is probed without them", "open", cd.outsider, cd.outsider.addr(), 200, false},
		{"any: another https address, without headers, token or certificate", "open_tls", cd.tlsOther, cd.tlsOther.addr(), 200, false},
		{"any: an https pool target gets them all", "open_tls", cd.tlsPool, cd.tlsPool.addr(), 200, true},
		{"any_with_credentials: another address gets them", "trusted", cd.outsider, cd.outsider.addr(), 200, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.rec.requests())
			code, body := cd.probe(t, tt.module, tt.target, nil)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			got := tt.rec.since(before)
			if tt.status != http.StatusOK {
				if len(got) > 0 {
					t.Fatalf("refused, yet the target saw %d requests: %+v", len(got), got)
				}
				return
			}
			if samples(t, body)["probe_success"] != 1 || len(got) != 1 {
				t.Fatalf("%d requests seen, want 1; answer:\n%s", len(got), body)
			}
			s := got[0]
			wantCerts := 0
			if tt.creds && tt.rec.srv.TLS != nil {
				wantCerts = 1
			}
			if (s.auth == bearer) != tt.creds || (s.token != "") != tt.creds || s.certs != wantCerts {
				t.Errorf("target saw Authorization %q, token %q, %d client certificates; want credentials %v", s.auth, s.token, s.certs, tt.creds)
			}
			if !tt.creds && (s.auth != "" || s.token != "" || s.certs != 0) {
				t.Errorf("target outside the pools saw credentials: %+v", s)
			}
		})
	}
}

// TestProbeRefusesOtherProtocol checks that a URL turning a check's
// protocol into another is not a target of its pools: https credentials
// never go in clear to the same endpoint.
func TestProbeRefusesOtherProtocol(t *testing.T) {
	t.Parallel()
	cd := startCredentialsDaemon(t, nil)
	before := len(cd.tlsPool.requests())
	code, body := cd.probe(t, "secret_tls", "http://"+cd.tlsPool.addr()+"/", nil)
	if code != http.StatusForbidden || !strings.Contains(body, "http to "+cd.tlsPool.addr()+" is not a target of the pools of check secret_tls") {
		t.Errorf("http URL for an https check: %d %s", code, body)
	}
	if got := cd.tlsPool.since(before); len(got) > 0 {
		t.Errorf("the pool target saw %+v", got)
	}
}

// TestProbeCrossOrigin is the regression test of /probe sent by a page of
// another site (the browser names 127.0.0.1 in Host): refused before any
// probe, as /-/reload refuses it; tools and same-origin pages get through.
func TestProbeCrossOrigin(t *testing.T) {
	t.Parallel()
	cd := startCredentialsDaemon(t, nil)
	host := strings.TrimPrefix(cd.td.http.URL, "http://")
	for _, tt := range []struct {
		name   string
		header http.Header
		want   int
	}{
		{"no browser headers (Prometheus, curl)", nil, 200},
		{"same origin", http.Header{"Origin": {"http://" + host}}, 200},
		{"typed by the user", http.Header{"Sec-Fetch-Site": {"none"}}, 200},
		{"same origin by fetch metadata", http.Header{"Sec-Fetch-Site": {"same-origin"}}, 200},
		{"cross-site by fetch metadata", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"same-site by fetch metadata", http.Header{"Sec-Fetch-Site": {"same-site"}}, 403},
		{"other origin", http.Header{"Origin": {"http://evil.example"}}, 403},
		{"opaque origin", http.Header{"Origin": {"null"}}, 403},
		{"other port of loopback", http.Header{"Origin": {"http://127.0.0.1:1"}}, 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(cd.pool.requests())
			code, body := cd.probe(t, "secret", cd.pool.addr(), tt.header)
			if code != tt.want {
				t.Fatalf("status %d, want %d: %s", code, tt.want, body)
			}
			if n := len(cd.pool.since(before)); tt.want == 403 && n > 0 {
				t.Errorf("refused, yet the target saw %d requests", n)
			}
		})
	}
}

// TestProbeDebugRedacts is the regression test of debug=true printing a
// check's header values: they show as (set), as on the status page, and
// neither the header nor the token's secret appears anywhere in the view.
func TestProbeDebugRedacts(t *testing.T) {
	t.Parallel()
	cd := startCredentialsDaemon(t, nil)
	for _, module := range []string{"secret", "open", "trusted"} {
		code, text := cd.td.scrape(t, "/probe?"+url.Values{"module": {module}, "target": {cd.pool.addr()}, "debug": {"true"}}.Encode(), nil)
		if code != http.StatusOK || !strings.Contains(text, `"Authorization": "(set)"`) || !strings.Contains(text, "probe_success 1") {
			t.Errorf("debug view of %s: %d, want 200 with the header as (set)\n%s", module, code, text)
		}
		for _, secret := range []string{bearer, "s3cret-value", cd.secret} {
			if strings.Contains(text, secret) {
				t.Errorf("debug view of %s shows %q:\n%s", module, secret, text)
			}
		}
	}
	_, text := cd.td.scrape(t, "/probe?"+url.Values{"module": {"open"}, "target": {cd.outsider.addr()}, "debug": {"true"}}.Encode(), nil)
	if !strings.Contains(text, "probing without the check's headers, auth token and client certificate") || !strings.Contains(text, `"credentials_withheld": true`) {
		t.Errorf("debug view of a probe without credentials does not say so:\n%s", text)
	}
}

// TestProbeDisabled checks -web.enable-probe=false: /probe answers 403 and
// probes nothing.
func TestProbeDisabled(t *testing.T) {
	t.Parallel()
	cd := startCredentialsDaemon(t, func(o *Options) { o.Web.DisableProbe = true })
	code, body := cd.probe(t, "secret", cd.pool.addr(), nil)
	if code != http.StatusForbidden || !strings.Contains(body, "-web.enable-probe=false") {
		t.Errorf("disabled /probe: %d %s", code, body)
	}
	if n := len(cd.pool.requests()); n != 0 {
		t.Errorf("disabled /probe probed: the target saw %d requests", n)
	}
}

// TestProbeNames checks how names count: a name the configuration lists
// with the check takes its configured address without a lookup, and a
// name the client makes up counts by the address it resolves to.
func TestProbeNames(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, false)
	_, port, _ := strings.Cut(rec.addr(), ":")
	td := startDaemon(t, fmt.Sprintf(`
checks:
  byname: {protocol: http, path: /, interval: 1h, timeout: 5s, headers: {Authorization: %q}}
  byaddr: {protocol: http, path: /, interval: 1h, timeout: 5s, headers: {Authorization: %q}}
pools:
  - {name: a, check: byname, targets: ["localhost:%[3]s"], health_checks: false}
  - {name: b, check: byaddr, targets: ["127.0.0.1:%[3]s"], health_checks: false}
`, bearer, bearer, port))
	debug := func(module, target string) (int, string) {
		return td.scrape(t, "/probe?"+url.Values{"module": {module}, "target": {target}, "debug": {"true"}}.Encode(), nil)
	}
	code, text := debug("byname", "localhost:"+port)
	if code != http.StatusOK || !strings.Contains(text, "target address from the configuration") || strings.Contains(text, "resolving target address") {
		t.Errorf("a configured name: %d, want its configured address without a lookup\n%s", code, text)
	}
	code, text = debug("byname", "127.0.0.1:"+port)
	if code != http.StatusOK {
		t.Errorf("the address of a configured name: %d\n%s", code, text)
	}
	code, text = debug("byaddr", "localhost:"+port)
	if code != http.StatusOK || !strings.Contains(text, "resolved target address") {
		t.Errorf("a name resolving to a pool target's address: %d\n%s", code, text)
	}
	if got := rec.requests(); len(got) != 3 || got[0].auth != bearer || got[2].auth != bearer {
		t.Errorf("pool target saw %+v, want 3 requests with the header", got)
	}
}

// TestProbeRestrictedAddresses checks that link-local and metadata
// addresses need probe_allow_addresses whatever probe_targets says, and
// that a target outside the pools takes the check's credentials out only
// with probe_targets any. It asks the daemon's decision directly: a probe
// sent to those addresses would leave loopback.
func TestProbeRestrictedAddresses(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, `
checks:
  pools: {protocol: http, path: /, interval: 1h, headers: {Authorization: x}}
  any: {protocol: http, path: /, interval: 1h, probe_targets: any, headers: {Authorization: x}}
  allowed: {protocol: http, path: /, interval: 1h, probe_targets: any, probe_allow_addresses: ["169.254.169.254"]}
pools: # never probed: the decision alone is under test
  - {name: p, check: pools, targets: ["169.254.169.254:80", "127.0.0.1:1"], health_checks: false}
  - {name: q, check: any, targets: ["127.0.0.1:1"], health_checks: false}
  - {name: r, check: allowed, targets: ["127.0.0.1:1"], health_checks: false}
`)
	g := td.d.cur.Load()
	for _, tt := range []struct {
		module, target string
		ok, withheld   bool
	}{
		{"pools", "169.254.169.254:80", false, false}, // a pool target, yet restricted
		{"pools", "127.0.0.1:1", true, false},
		{"pools", "127.0.0.2:1", false, false},
		{"any", "169.254.169.254:80", false, false},
		{"any", "[fe80::1]:80", false, false},
		{"any", "[fd00:ec2::254]:80", false, false},
		{"any", "100.100.100.200:80", false, false},
		{"any", "[::ffff:169.254.169.254]:80", false, false},
		{"any", "127.0.0.2:1", true, true},
		{"any", "127.0.0.1:1", true, false},
		{"allowed", "169.254.169.254:80", true, false},
		{"allowed", "169.254.169.253:80", false, false},
	} {
		shot, err := g.newOneShot(tt.module, tt.target)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.module, tt.target, err)
		}
		shot.log = td.d.log
		err = g.authorize(&shot, shot.target.Addr)
		if (err == nil) != tt.ok || shot.withheld != tt.withheld || shot.withheld && shot.check.HasCredentials() {
			t.Errorf("%s → %s: err %v, withheld %v (credentials %v); want allowed %v, withheld %v",
				tt.module, tt.target, err, shot.withheld, shot.check.HasCredentials(), tt.ok, tt.withheld)
		}
	}
}
