package http

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// testCert is a self-signed certificate that is its own CA.
type testCert struct {
	cert     tls.Certificate
	notAfter time.Time
	caFile   string // PEM of the certificate
	keyFile  string // PEM of its key
}

// newCert returns a certificate for the names and 127.0.0.1, valid for d.
func newCert(t *testing.T, d time.Duration, names ...string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Now().Add(d).UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "sonde test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tc := testCert{
		notAfter: notAfter,
		caFile:   filepath.Join(dir, "cert.pem"),
		keyFile:  filepath.Join(dir, "key.pem"),
	}
	writePEM(t, tc.caFile, "CERTIFICATE", der)
	writePEM(t, tc.keyFile, "EC PRIVATE KEY", keyDER)
	tc.cert, err = tls.LoadX509KeyPair(tc.caFile, tc.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// server is an httptest server that records what probes sent.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request // cloned, without body
	sni      []string        // ServerName of each ClientHello
	newConns int             // connections seen in StateNew
}

// newServer starts a loopback server running h. With cert set it serves
// HTTPS with that certificate, after applying configure to its TLS config.
func newServer(t *testing.T, h http.HandlerFunc, cert *testCert, configure ...func(*tls.Config)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Clone(context.Background()))
		s.mu.Unlock()
		h(w, r)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.newConns++
			s.mu.Unlock()
		}
	}
	if cert == nil {
		s.Start()
	} else {
		s.TLS = &tls.Config{
			Certificates: []tls.Certificate{cert.cert},
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				s.mu.Lock()
				s.sni = append(s.sni, hello.ServerName)
				s.mu.Unlock()
				return nil, nil
			},
		}
		for _, f := range configure {
			f(s.TLS)
		}
		s.StartTLS()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *server) target() probe.Target {
	return probe.Target{
		Addr: netip.MustParseAddr("127.0.0.1"),
		Port: s.Listener.Addr().(*net.TCPAddr).AddrPort().Port(),
	}
}

func (s *server) lastRequest(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("server saw no request")
	}
	return s.requests[len(s.requests)-1]
}

func (s *server) stats() (requests, newConns int, sni []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests), s.newConns, append([]string(nil), s.sni...)
}

// rawServer listens on 127.0.0.1:0 and runs serve for every connection.
func rawServer(t *testing.T, serve func(c *net.TCPConn)) probe.Target {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return probe.Target{Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(ln.Addr().(*net.TCPAddr).Port)}
}

// answering returns a test case's target: a rawServer that reads the
// request head and writes answer, then closes.
func answering(answer string) func(*testing.T) probe.Target {
	return func(t *testing.T) probe.Target {
		return rawServer(t, func(c *net.TCPConn) {
			readRequest(c)
			io.WriteString(c, answer)
		})
	}
}

// readRequest reads an HTTP request head from c.
func readRequest(c net.Conn) (*http.Request, error) {
	return http.ReadRequest(bufio.NewReader(c))
}

// closedPort returns a loopback port with no listener.
func closedPort(t *testing.T) probe.Target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return probe.Target{Addr: netip.MustParseAddr("127.0.0.1"), Port: port}
}

// mustNew builds a prober or fails the test.
func mustNew(t testing.TB, o Options) *Prober {
	t.Helper()
	p, err := New(t.Context(), o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return p
}

// report runs one probe with a 5 s deadline (a safety net: every test
// that waits for a deadline sets its own, shorter one).
func report(t *testing.T, p *Prober, tg probe.Target) probe.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return p.Report(ctx, tg)
}

// probePath is one way to run a Prober's probes: the one-shot path
// (Prober.Report, on the caller's goroutine) or the event loops (Loops, as
// the daemon runs plain-HTTP checks). The tests of plain HTTP run every case
// on both, so the two paths keep one behaviour.
type probePath struct {
	name string
	// runner sets up the path for p and returns a function that runs one
	// probe; ctx's deadline is the probe's.
	runner func(t *testing.T, p *Prober) func(ctx context.Context, tg probe.Target) probe.Report
}

var probePaths = []probePath{
	{"oneshot", func(_ *testing.T, p *Prober) func(context.Context, probe.Target) probe.Report { return p.Report }},
	{"loops", loopRunner(engines[0])},
	{"epoll", loopRunner(engines[1])},
}

// eachPath runs f as a subtest per probe path.
func eachPath(t *testing.T, f func(t *testing.T, pa probePath)) {
	t.Helper()
	for _, pa := range probePaths {
		t.Run(pa.name, func(t *testing.T) { f(t, pa) })
	}
}

// report runs one probe on the path with a 5 s deadline (see report).
func (pa probePath) report(t *testing.T, p *Prober, tg probe.Target) probe.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return pa.runner(t, p)(ctx, tg)
}

// loopProbes runs probes on a Loops of its own, one request per probe,
// and hands each probe's report to its waiting caller.
type loopProbes struct {
	ls *Loops
	lr *LoopLauncher

	mu      sync.Mutex
	targets map[uint32]probe.Target
	reports map[uint32]probe.Report
	done    map[uint32]chan probe.Result
	next    uint32
}

// loopRunner returns the runner of a probe path on two event loops of
// engine e, started for p and stopped when the test ends.
func loopRunner(e engine) func(t *testing.T, p *Prober) func(context.Context, probe.Target) probe.Report {
	return func(t *testing.T, p *Prober) func(context.Context, probe.Target) probe.Report {
		return runLoops(t, e, p)
	}
}

func runLoops(t *testing.T, e engine, p *Prober) func(context.Context, probe.Target) probe.Report {
	t.Helper()
	lp := &loopProbes{targets: map[uint32]probe.Target{}, reports: map[uint32]probe.Report{}, done: map[uint32]chan probe.Result{}}
	ls := newLoops(t, e, LoopOptions{
		Target: func(id uint32) probe.Target {
			lp.mu.Lock()
			defer lp.mu.Unlock()
			return lp.targets[id]
		},
		Sink: sinkFunc(func(r probe.Result) {
			lp.mu.Lock()
			ch := lp.done[r.ID]
			lp.mu.Unlock()
			ch <- r
		}),
		Now: probe.Nanotime,
		OnReport: func(id uint32, r *probe.Report) {
			lp.mu.Lock()
			lp.reports[id] = *r
			lp.mu.Unlock()
		},
		Loops: 2,
	})
	lp.ls = ls
	lp.lr = mustLauncher(t, ls, p)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- ls.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	return lp.probe
}

// probe launches one request for tg and waits for its result.
func (lp *loopProbes) probe(ctx context.Context, tg probe.Target) probe.Report {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	ch := make(chan probe.Result, 1)
	lp.mu.Lock()
	lp.next++
	id := lp.next
	lp.targets[id], lp.done[id] = tg, ch
	lp.mu.Unlock()
	now := probe.Nanotime()
	lp.lr.Launch(0, []probe.Request{{ID: id, Gen: 1, Sent: now, Deadline: now + int64(time.Until(deadline))}})
	select {
	case r := <-ch:
		lp.mu.Lock()
		defer lp.mu.Unlock()
		rep, ok := lp.reports[id]
		if !ok {
			return probe.Report{Result: r}
		}
		if rep.Result != r {
			panic(fmt.Sprintf("the sink got %+v, the report said %+v", r, rep.Result))
		}
		return rep
	case <-time.After(time.Until(deadline) + 5*time.Second):
		panic(fmt.Sprintf("no result for probe %d of %v, 5 s after its deadline", id, tg))
	}
}

// sinkFunc is a probe.Sink calling itself.
type sinkFunc func(probe.Result)

func (f sinkFunc) Deliver(r probe.Result) { f(r) }
