package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// codes is a StatusSet of single codes, as the config package builds for
// "200,204,403".
type codes []int

func (c codes) Contains(code int) bool {
	for _, x := range c {
		if x == code {
			return true
		}
	}
	return false
}

// TestStatus covers H3, H5 and H11: the healthy set decides, redirects are
// judged by their own code and never followed.
func TestStatus(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		tests := []struct {
			name    string
			code    int
			healthy StatusSet
			want    probe.Outcome
		}{
			{"200 default", 200, nil, probe.Success},
			{"204 default", 204, nil, probe.Success},
			{"500 default", 500, nil, probe.HTTPStatus},
			{"403 default", 403, nil, probe.HTTPStatus},
			{"403 accepted (H11)", 403, codes{200, 204, 403}, probe.Success},
			{"404 not in list", 404, codes{200, 204, 403}, probe.HTTPStatus},
			{"301 under 200-299", 301, nil, probe.HTTPStatus},
			{"301 under 200-399", 301, StatusRange{200, 399}, probe.Success},
			{"307 under 200-399", 307, StatusRange{200, 399}, probe.Success},
			{"204 under exactly 200", 204, codes{200}, probe.HTTPStatus},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/elsewhere" {
						w.WriteHeader(200) // a followed redirect would land here
						return
					}
					if tt.code/100 == 3 {
						w.Header().Set("Location", "/elsewhere")
					}
					w.WriteHeader(tt.code)
				}, nil)
				p := mustNew(t, Options{Path: "/health", Healthy: tt.healthy})
				rep := pa.report(t, p, srv.target())
				if rep.Outcome != tt.want || int(rep.Status) != tt.code {
					t.Errorf("outcome %v status %d, want %v %d (err %v)", rep.Outcome, rep.Status, tt.want, tt.code, rep.Err)
				}
				if (tt.want == probe.HTTPStatus) != errors.Is(rep.Err, ErrStatus) {
					t.Errorf("err = %v, want ErrStatus exactly for http_status", rep.Err)
				}
				if n, _, _ := srv.stats(); n != 1 {
					t.Errorf("server saw %d requests, want 1 (redirects are not followed)", n)
				}
			})
		}
	})
}

// TestMethod covers H1: GET and HEAD reach the server as such.
func TestMethod(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		for _, method := range []string{"", "GET", "HEAD"} {
			t.Run("method "+method, func(t *testing.T) {
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "hello")
				}, nil)
				rep := pa.report(t, mustNew(t, Options{Method: method}), srv.target())
				if rep.Outcome != probe.Success {
					t.Fatalf("outcome %v (%v), want success", rep.Outcome, rep.Err)
				}
				want := method
				if want == "" {
					want = "GET"
				}
				if got := srv.lastRequest(t).Method; got != want {
					t.Errorf("server saw method %s, want %s", got, want)
				}
			})
		}
	})
}

// TestBody covers H4: a plain substring within the first MaxBodyBytes.
func TestBody(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		long := strings.Repeat("x", 10000)
		tests := []struct {
			name    string
			body    string
			match   string
			max     int64
			chunked bool
			want    probe.Outcome
		}{
			{"no match asked", "anything", "", 0, false, probe.Success},
			{"match", "status: ok", "ok", 0, false, probe.Success},
			{"mismatch", "status: down", "ok", 0, false, probe.BodyMismatch},
			{"plain text, not regex", "a.c", "a.c", 0, false, probe.Success},
			{"dot is literal", "abc", "a.c", 0, false, probe.BodyMismatch},
			{"match at the bound", long[:95] + "ready", "ready", 100, false, probe.Success},
			{"match past the bound", long[:96] + "ready", "ready", 100, false, probe.BodyMismatch},
			{"match far in, chunked", long + "ready" + long, "ready", 0, true, probe.Success},
			{"empty body", "", "ok", 0, false, probe.BodyMismatch},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
					if tt.chunked {
						for chunk := range strings.SplitSeq(tt.body, "r") { // several writes
							io.WriteString(w, chunk+"r")
							w.(http.Flusher).Flush()
						}
						return
					}
					w.Header().Set("Content-Length", fmt.Sprint(len(tt.body)))
					io.WriteString(w, tt.body)
				}, nil)
				rep := pa.report(t, mustNew(t, Options{Body: tt.match, MaxBodyBytes: tt.max}), srv.target())
				if rep.Outcome != tt.want {
					t.Errorf("outcome %v (%v), want %v", rep.Outcome, rep.Err, tt.want)
				}
				if (tt.want == probe.BodyMismatch) != errors.Is(rep.Err, ErrBodyMismatch) {
					t.Errorf("err = %v, want ErrBodyMismatch exactly for body_mismatch", rep.Err)
				}
				// What was read of the body, and what the response said it
				// would send (nothing for a chunked one).
				bound := tt.max
				if bound == 0 {
					bound = DefaultMaxBodyBytes
				}
				served := int64(len(tt.body))
				wantLength := served
				if tt.chunked {
					served++ // the handler ends with an "r" of its own
					wantLength = -1
				}
				wantBytes := min(served, bound)
				if rep.ContentLength != wantLength || rep.BodyBytes != wantBytes {
					t.Errorf("content length %d, body bytes %d; want %d, %d", rep.ContentLength, rep.BodyBytes, wantLength, wantBytes)
				}
			})
		}
	})
}

// TestBodyReadBound checks that at most MaxBodyBytes of a huge body are
// read: the server streams until the client goes away, and the probe still
// ends well before its deadline.
func TestBodyReadBound(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			buf := []byte(strings.Repeat("y", 4096))
			for r.Context().Err() == nil {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		}, nil)
		p := mustNew(t, Options{Body: "never", MaxBodyBytes: 1 << 16})
		rep := pa.report(t, p, srv.target())
		if rep.Outcome != probe.BodyMismatch {
			t.Fatalf("outcome %v (%v), want body_mismatch", rep.Outcome, rep.Err)
		}
	})
}

// TestHostAndSNI covers H6: the Host header and SNI a server sees.
func TestHostAndSNI(t *testing.T) {
	t.Parallel()
	cert := newCert(t, 24*time.Hour, "app.sonde.test", "other.sonde.test")
	tests := []struct {
		name       string
		opts       Options
		targetHost string
		wantHost   string // "" = the target's address:port
		wantSNI    string
	}{
		{"address only", Options{}, "", "", ""},
		{"target host name", Options{}, "app.sonde.test", "app.sonde.test:%d", "app.sonde.test"},
		{"host option for both (App Gateway v2)", Options{Host: "app.sonde.test"}, "ignored.test", "app.sonde.test", "app.sonde.test"},
		{"host option with port", Options{Host: "app.sonde.test:8443"}, "", "app.sonde.test:8443", "app.sonde.test"},
		{"sni override", Options{Host: "app.sonde.test", SNI: "other.sonde.test"}, "", "app.sonde.test", "other.sonde.test"},
		{"sni only", Options{SNI: "other.sonde.test"}, "", "", "other.sonde.test"},
		{"ip host header sends no sni", Options{Host: "127.0.0.1"}, "", "127.0.0.1", ""},
		{"default host (App Gateway), sni from the target", Options{DefaultHost: "127.0.0.1"}, "app.sonde.test", "127.0.0.1:%d", "app.sonde.test"},
		{"host option wins over default host", Options{Host: "app.sonde.test", DefaultHost: "127.0.0.1"}, "", "app.sonde.test", "app.sonde.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {}, &cert)
			o := tt.opts
			o.Scheme = "https"
			o.TLS.CAFile = cert.caFile
			tg := srv.target()
			tg.Host = tt.targetHost
			rep := report(t, mustNew(t, o), tg)
			if rep.Outcome != probe.Success {
				t.Fatalf("outcome %v (%v), want success", rep.Outcome, rep.Err)
			}
			wantHost := tt.wantHost
			switch {
			case wantHost == "":
				wantHost = netip.AddrPortFrom(tg.Addr, tg.Port).String()
			case strings.Contains(wantHost, "%d"):
				wantHost = fmt.Sprintf(wantHost, tg.Port)
			}
			if got := srv.lastRequest(t).Host; got != wantHost {
				t.Errorf("Host = %q, want %q", got, wantHost)
			}
			if _, _, sni := srv.stats(); !cmp.Equal(sni, []string{tt.wantSNI}) {
				t.Errorf("SNI = %q, want [%q]", sni, tt.wantSNI)
			}
		})
	}
}

// TestHostDefaultPort checks that a derived Host header omits the scheme's
// default port, as a URL does.
func TestHostDefaultPort(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Options{})
	tests := []struct {
		target probe.Target
		want   string
	}{
		{probe.Target{Addr: netip.MustParseAddr("192.0.2.1"), Port: 80}, "192.0.2.1"},
		{probe.Target{Addr: netip.MustParseAddr("2001:db8::1"), Port: 80}, "[2001:db8::1]"},
		{probe.Target{Addr: netip.MustParseAddr("2001:db8::1"), Port: 8080}, "[2001:db8::1]:8080"},
		{probe.Target{Addr: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 81}, "192.0.2.1:81"},
		{probe.Target{Host: "www.sonde.test", Port: 80}, "www.sonde.test"},
	}
	for _, tt := range tests {
		if got := p.hostHeader(tt.target); got != tt.want {
			t.Errorf("hostHeader(%v) = %q, want %q", tt.target, got, tt.want)
		}
	}
	// App Gateway's default probe: 127.0.0.1, with the port unless it is
	// the scheme's default.
	gw := mustNew(t, Options{DefaultHost: "127.0.0.1"})
	for _, tt := range []struct {
		target probe.Target
		want   string
	}{
		{probe.Target{Addr: netip.MustParseAddr("192.0.2.1"), Port: 80}, "127.0.0.1"},
		{probe.Target{Addr: netip.MustParseAddr("2001:db8::1"), Port: 8080}, "127.0.0.1:8080"},
		{probe.Target{Host: "www.sonde.test", Port: 81}, "127.0.0.1:81"},
	} {
		if got := gw.hostHeader(tt.target); got != tt.want {
			t.Errorf("default host: hostHeader(%v) = %q, want %q", tt.target, got, tt.want)
		}
	}
}

// TestHeaders covers H7, H10 and custom headers, plus Connection: close
// and the path sent as written.
func TestHeaders(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		secret := "s3cr3t"
		sum := sha256.Sum256([]byte(secret))
		wantToken := base64.StdEncoding.EncodeToString(sum[:])
		tok, err := NewToken([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			opts Options
			want map[string]string // header → value; "" = absent
		}{
			{"defaults", Options{}, map[string]string{
				"User-Agent": DefaultUserAgent, "Connection": "close", TokenHeader: "", "Accept-Encoding": "",
			}},
			{"front door user agent (H7)", Options{UserAgent: "Edge Health Probe"}, map[string]string{
				"User-Agent": "Edge Health Probe",
			}},
			{"custom headers", Options{Headers: http.Header{"X-Probe": {"1"}, "accept": {"text/plain"}}}, map[string]string{
				"X-Probe": "1", "Accept": "text/plain",
			}},
			{"token (H10)", Options{Token: tok}, map[string]string{
				"x-ms-auth-internal-token": wantToken,
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {}, nil)
				o := tt.opts
				o.Path = "/health?probe=1&x=%20"
				rep := pa.report(t, mustNew(t, o), srv.target())
				if rep.Outcome != probe.Success {
					t.Fatalf("outcome %v (%v), want success", rep.Outcome, rep.Err)
				}
				r := srv.lastRequest(t)
				for name, want := range tt.want {
					if got := r.Header.Get(name); name != "Connection" && got != want {
						t.Errorf("header %s = %q, want %q", name, got, want)
					}
				}
				if !r.Close {
					t.Error("request did not ask to close the connection")
				}
				if r.RequestURI != o.Path {
					t.Errorf("request URI %q, want %q", r.RequestURI, o.Path)
				}
			})
		}
	})
}

// TestNewConnectionPerProbe covers H8: every probe opens its own connection.
func TestNewConnectionPerProbe(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {}, nil)
		p := mustNew(t, Options{})
		const n = 5
		for range n {
			if rep := pa.report(t, p, srv.target()); rep.Outcome != probe.Success {
				t.Fatalf("outcome %v (%v)", rep.Outcome, rep.Err)
			}
		}
		if reqs, conns, _ := srv.stats(); reqs != n || conns != n {
			t.Errorf("server saw %d requests on %d connections, want %d on %d", reqs, conns, n, n)
		}
	})
}

// TestRSTClose checks that the prober aborts its connection with an RST:
// the server answers without closing, then reads; after a FIN it would read
// io.EOF, after an RST it reads ECONNRESET.
func TestRSTClose(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		got := make(chan error, 1)
		tg := rawServer(t, func(c *net.TCPConn) {
			if _, err := readRequest(c); err != nil {
				got <- err
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			_, err := c.Read(make([]byte, 1))
			got <- err
		})
		rep := pa.report(t, mustNew(t, Options{}), tg)
		if rep.Outcome != probe.Success {
			t.Fatalf("outcome %v (%v), want success", rep.Outcome, rep.Err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("server read after the probe: %v, want ECONNRESET", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("server read did not end")
		}
	})
}

// TestFailures covers every failure reason an HTTP probe can give.
func TestFailures(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		cert := newCert(t, time.Hour, "app.sonde.test")
		tests := []struct {
			name    string
			target  func(t *testing.T) probe.Target
			opts    Options
			timeout time.Duration
			want    probe.Outcome
			wantErr error // checked with errors.Is when set
		}{
			{
				name:    "refused",
				target:  closedPort,
				want:    probe.Refused,
				wantErr: syscall.ECONNREFUSED,
			},
			{
				name: "timeout: server never answers",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
				},
				timeout: 200 * time.Millisecond,
				want:    probe.Timeout,
				wantErr: os.ErrDeadlineExceeded,
			},
			{
				name: "timeout: body never ends",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
						io.Copy(io.Discard, c)
					})
				},
				timeout: 200 * time.Millisecond,
				want:    probe.Timeout,
			},
			{
				name:   "invalid response: not HTTP",
				target: answering("SSH-2.0-OpenSSH_9.2\r\n"),
				want:   probe.InvalidResponse,
			},
			{
				name:    "invalid response: truncated body",
				target:  answering("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"),
				want:    probe.InvalidResponse,
				wantErr: io.ErrUnexpectedEOF,
			},
			{
				name: "invalid response: head too large",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\n")
						for range 2 * maxHeaderBytes / 64 {
							io.WriteString(c, "X-Filler: "+strings.Repeat("f", 52)+"\r\n")
						}
					})
				},
				want:    probe.InvalidResponse,
				wantErr: ErrHeaderTooLarge,
			},
			{
				name: "error: closed without a response",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) { readRequest(c) })
				},
				want:    probe.Error,
				wantErr: ErrEmptyResponse,
			},
			{
				name: "error: reset mid-body",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
						time.Sleep(10 * time.Millisecond) // let "half" arrive before the RST
						c.SetLinger(0)
					})
				},
				want:    probe.Error,
				wantErr: syscall.ECONNRESET,
			},
			{
				name: "tls: untrusted certificate",
				target: func(t *testing.T) probe.Target {
					return newServer(t, func(http.ResponseWriter, *http.Request) {}, &cert).target()
				},
				opts: Options{Scheme: "https", Host: "app.sonde.test"}, // system roots only
				want: probe.TLS,
			},
			{
				name: "tls: name mismatch",
				target: func(t *testing.T) probe.Target {
					return newServer(t, func(http.ResponseWriter, *http.Request) {}, &cert).target()
				},
				opts: Options{Scheme: "https", Host: "wrong.sonde.test", TLS: TLSOptions{CAFile: cert.caFile}},
				want: probe.TLS,
			},
			{
				name: "tls: server speaks plain HTTP",
				target: func(t *testing.T) probe.Target {
					return newServer(t, func(http.ResponseWriter, *http.Request) {}, nil).target()
				},
				opts: Options{Scheme: "https", TLS: TLSOptions{InsecureSkipVerify: true}},
				want: probe.TLS,
			},
			{
				name: "timeout: slowloris head, a byte at a time",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Slow: ")
						dribble(c, 'z', 20*time.Millisecond)
					})
				},
				timeout: 200 * time.Millisecond,
				want:    probe.Timeout,
			},
			{
				name: "timeout: slowloris body, a byte at a time",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
						dribble(c, 'z', 20*time.Millisecond)
					})
				},
				timeout: 200 * time.Millisecond,
				want:    probe.Timeout,
			},
			{
				name: "invalid response: one header line too large",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("b", 2*maxHeaderBytes)+"\r\n\r\n")
					})
				},
				want:    probe.InvalidResponse,
				wantErr: ErrHeaderTooLarge,
			},
			{
				name: "invalid response: endless interim responses",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						for range 2 * maxHeaderBytes / 25 {
							if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
								return
							}
						}
					})
				},
				want: probe.InvalidResponse,
			},
			{
				name: "invalid response: binary garbage without a line end",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						c.Write(bytes.Repeat([]byte{0xff, 0x00, 0x7f}, maxHeaderBytes))
					})
				},
				want: probe.InvalidResponse,
			},
			{
				name:   "invalid response: closed mid-head",
				target: answering("HTTP/1.1 200 OK\r\nContent-Le"),
				want:   probe.InvalidResponse,
			},
			{
				name:   "invalid response: bad content length",
				target: answering("HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\nok"),
				want:   probe.InvalidResponse,
			},
			{
				name:   "invalid response: two different content lengths",
				target: answering("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!"),
				want:   probe.InvalidResponse,
			},
			{
				name:   "invalid response: unsupported transfer encoding",
				target: answering("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
				want:   probe.InvalidResponse,
			},
			{
				name:   "invalid response: bad chunk size",
				target: answering("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n"),
				want:   probe.InvalidResponse,
			},
			{
				name:    "invalid response: truncated chunked body",
				target:  answering("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nhalf"),
				want:    probe.InvalidResponse,
				wantErr: io.ErrUnexpectedEOF,
			},
			{
				name: "body mismatch: endless chunked body read to its bound",
				target: func(t *testing.T) probe.Target {
					return rawServer(t, func(c *net.TCPConn) {
						readRequest(c)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
						chunk := []byte("1000\r\n" + strings.Repeat("y", 0x1000) + "\r\n")
						for {
							if _, err := c.Write(chunk); err != nil {
								return
							}
						}
					})
				},
				opts:    Options{Body: "never", MaxBodyBytes: 1 << 16},
				want:    probe.BodyMismatch,
				wantErr: ErrBodyMismatch,
			},
			{
				name:   "error: no address",
				target: func(*testing.T) probe.Target { return probe.Target{Port: 80} },
				want:   probe.Error,
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				timeout := tt.timeout
				if timeout == 0 {
					timeout = 5 * time.Second
				}
				ctx, cancel := context.WithTimeout(t.Context(), timeout)
				defer cancel()
				p := mustNew(t, tt.opts)
				if pa.name != "oneshot" && (!p.Loopable() || tt.name == "error: no address") {
					// HTTPS stays on the one-shot path; a target without an
					// address is one gone from the table, whose request the
					// loops drop (TestLoopsDropGoneTargets).
					t.Skip("not a case of the event loops")
				}
				rep := pa.runner(t, p)(ctx, tt.target(t))
				if rep.Outcome != tt.want {
					t.Errorf("outcome %v, want %v (err %v)", rep.Outcome, tt.want, rep.Err)
				}
				if rep.Err == nil {
					t.Error("err is nil for a failed probe")
				}
				if tt.wantErr != nil && !errors.Is(rep.Err, tt.wantErr) {
					t.Errorf("err = %v, want one wrapping %v", rep.Err, tt.wantErr)
				}
				if rep.Latency <= 0 {
					t.Errorf("latency %v, want > 0", rep.Latency)
				}
			})
		}
	})
}

// dribble writes b to c once per interval until c fails or 10 s pass: a
// server that never finishes.
func dribble(c net.Conn, b byte, interval time.Duration) {
	for range 10 * time.Second / interval {
		if _, err := c.Write([]byte{b}); err != nil {
			return
		}
		time.Sleep(interval)
	}
}

// TestCancelled checks that a probe cut short by cancellation is an error,
// not a timeout.
func TestCancelled(t *testing.T) {
	t.Parallel()
	tg := rawServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	time.AfterFunc(50*time.Millisecond, cancel)
	rep := mustNew(t, Options{}).Report(ctx, tg)
	if rep.Outcome != probe.Error {
		t.Errorf("outcome %v (%v), want error", rep.Outcome, rep.Err)
	}
}

// TestInterimResponse checks that 1xx responses before the final one are
// skipped.
func TestInterimResponse(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		tg := rawServer(t, func(c *net.TCPConn) {
			readRequest(c)
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"+
				"HTTP/1.1 204 No Content\r\n\r\n")
		})
		rep := pa.report(t, mustNew(t, Options{}), tg)
		if rep.Outcome != probe.Success || rep.Status != 204 {
			t.Errorf("outcome %v status %d (%v), want success 204", rep.Outcome, rep.Status, rep.Err)
		}
	})
}

// TestTLS covers the TLS options and the certificate expiry report.
func TestTLS(t *testing.T) {
	t.Parallel()
	cert := newCert(t, 72*time.Hour, "app.sonde.test")
	client := newCert(t, 72*time.Hour, "client.sonde.test")
	tests := []struct {
		name        string
		opts        Options
		requireCert bool
		want        probe.Outcome
		agreed      bool // the client's handshake completed
	}{
		{"trusted by ca file", Options{TLS: TLSOptions{CAFile: cert.caFile}}, false, probe.Success, true},
		{"insecure skip verify", Options{TLS: TLSOptions{InsecureSkipVerify: true}}, false, probe.Success, true},
		{"untrusted still reports expiry", Options{}, false, probe.TLS, false},
		{"client certificate", Options{TLS: TLSOptions{CAFile: cert.caFile, CertFile: client.caFile, KeyFile: client.keyFile}}, true, probe.Success, true},
		// In TLS 1.3 the server refuses the client after the client's
		// handshake is done.
		{"client certificate missing", Options{TLS: TLSOptions{CAFile: cert.caFile}}, true, probe.TLS, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clientCAs, err := loadTLSConfig(t.Context(), TLSOptions{CAFile: client.caFile})
			if err != nil {
				t.Fatal(err)
			}
			srv := newServer(t, func(http.ResponseWriter, *http.Request) {}, &cert, func(c *tls.Config) {
				if tt.requireCert {
					c.ClientAuth = tls.RequireAndVerifyClientCert
					c.ClientCAs = clientCAs.RootCAs
				}
			})
			o := tt.opts
			o.Scheme, o.Host = "https", "app.sonde.test"
			rep := report(t, mustNew(t, o), srv.target())
			if rep.Outcome != tt.want {
				t.Errorf("outcome %v (%v), want %v", rep.Outcome, rep.Err, tt.want)
			}
			if !rep.CertExpiry.Equal(cert.notAfter) {
				t.Errorf("cert expiry %v, want %v", rep.CertExpiry, cert.notAfter)
			}
			// The server offers up to TLS 1.3, as does the prober; a failed
			// handshake agreed on nothing.
			if tt.agreed != (rep.TLSVersion == tls.VersionTLS13) || tt.agreed != (rep.TLSCipher != 0) {
				t.Errorf("TLS version %s, cipher %s; want TLS 1.3 and a cipher exactly after a completed handshake (%v)",
					tls.VersionName(rep.TLSVersion), tls.CipherSuiteName(rep.TLSCipher), tt.agreed)
			}
		})
	}
}

// TestPhases checks that every phase of an HTTPS probe is timed, that the
// phases follow each other, and that latency is request to last byte.
func TestPhases(t *testing.T) {
	t.Parallel()
	cert := newCert(t, time.Hour, "app.sonde.test")
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond) // the last byte comes later
		io.WriteString(w, "last")
	}, &cert)
	p := mustNew(t, Options{Scheme: "https", Host: "app.sonde.test", Body: "last", TLS: TLSOptions{CAFile: cert.caFile}})
	start := time.Now()
	rep := report(t, p, srv.target())
	elapsed := time.Since(start)
	if rep.Outcome != probe.Success {
		t.Fatalf("outcome %v (%v)", rep.Outcome, rep.Err)
	}
	ph := rep.Phases
	if ph.Connect <= 0 || ph.TLS <= 0 || ph.FirstByte <= 0 || ph.LastByte <= 0 {
		t.Errorf("phases %+v: want all > 0", ph)
	}
	if rep.Latency < 5*time.Millisecond {
		t.Errorf("latency %v, want >= the server's 5ms pause before the last byte", rep.Latency)
	}
	if rep.Latency != ph.FirstByte+ph.LastByte {
		t.Errorf("latency %v, want first byte + last byte = %v", rep.Latency, ph.FirstByte+ph.LastByte)
	}
	if sum := ph.Connect + ph.TLS + ph.FirstByte + ph.LastByte; sum > elapsed {
		t.Errorf("phases sum to %v, more than the probe's %v: they overlap", sum, elapsed)
	}
}

// TestPhasesPlain checks the phases of a plain-HTTP probe on both paths:
// no TLS phase, the others timed and in order, latency request to last byte.
func TestPhasesPlain(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond) // the last byte comes later
			io.WriteString(w, "last")
		}, nil)
		start := time.Now()
		rep := pa.report(t, mustNew(t, Options{Body: "last"}), srv.target())
		elapsed := time.Since(start)
		if rep.Outcome != probe.Success {
			t.Fatalf("outcome %v (%v)", rep.Outcome, rep.Err)
		}
		ph := rep.Phases
		// Both parts may come in one read on a busy machine: then the last
		// byte is the first.
		if ph.Connect <= 0 || ph.TLS != 0 || ph.FirstByte <= 0 || ph.LastByte < 0 {
			t.Errorf("phases %+v: want connect and first byte > 0, no TLS, last byte >= 0", ph)
		}
		if rep.Latency < 5*time.Millisecond {
			t.Errorf("latency %v, want >= the server's 5ms pause before the last byte", rep.Latency)
		}
		if rep.Latency != ph.FirstByte+ph.LastByte {
			t.Errorf("latency %v, want first byte + last byte = %v", rep.Latency, ph.FirstByte+ph.LastByte)
		}
		if sum := ph.Connect + ph.FirstByte + ph.LastByte; sum > elapsed {
			t.Errorf("phases sum to %v, more than the probe's %v: they overlap", sum, elapsed)
		}
		if rep.ContentLength != -1 || rep.BodyBytes != int64(len("firstlast")) {
			t.Errorf("content length %d, body bytes %d; want -1 (chunked), %d", rep.ContentLength, rep.BodyBytes, len("firstlast"))
		}
	})
}

// TestSource checks that probes leave from the source address (all of
// 127/8 is local on Linux).
func TestSource(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, pa probePath) {
		srv := newServer(t, func(http.ResponseWriter, *http.Request) {}, nil)
		rep := pa.report(t, mustNew(t, Options{Source: netip.MustParseAddr("127.0.0.2")}), srv.target())
		if rep.Outcome != probe.Success {
			t.Fatalf("outcome %v (%v)", rep.Outcome, rep.Err)
		}
		host, _, _ := net.SplitHostPort(srv.lastRequest(t).RemoteAddr)
		if host != "127.0.0.2" {
			t.Errorf("server saw the probe from %s, want 127.0.0.2", host)
		}
	})
}

// TestLocalError checks that a probe that cannot open its socket is a
// LocalError with its cause, no verdict on the target.
// Not parallel: it lowers the whole process's descriptor limit.
func TestLocalError(t *testing.T) {
	eachPath(t, func(t *testing.T, pa probePath) {
		if pa.name == "loops" {
			t.Skip("io_uring loops open direct sockets, outside the descriptor table; a full table of them is TestRingSlotsFull")
		}
		srv := newServer(t, func(http.ResponseWriter, *http.Request) {}, nil)
		p := mustNew(t, Options{})
		run := pa.runner(t, p) // the loops' own descriptors are open before the limit drops
		var rep probe.Report
		probetest.WithoutDescriptors(t, func() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			rep = run(ctx, srv.target())
		})
		if rep.Outcome != probe.LocalError || rep.Cause != probe.CauseDescriptors || !errors.Is(rep.Err, syscall.EMFILE) {
			t.Errorf("outcome %v cause %v (%v), want local_error descriptors from EMFILE", rep.Outcome, rep.Cause, rep.Err)
		}
	})
}

// TestConcurrentProbes runs probes in parallel on one Prober (for -race).
func TestConcurrentProbes(t *testing.T) {
	t.Parallel()
	cert := newCert(t, time.Hour, "app.sonde.test")
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, &cert)
	p := mustNew(t, Options{Scheme: "https", Body: "ok", TLS: TLSOptions{CAFile: cert.caFile}})
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			tg := srv.target()
			tg.Host = "app.sonde.test" // per-target server name
			if i%2 == 0 {
				tg.Host = ""
			}
			rep := report(t, p, tg)
			if rep.Outcome != probe.Success {
				errs <- fmt.Errorf("outcome %v: %w", rep.Outcome, rep.Err)
				return
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
