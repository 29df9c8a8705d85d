package http

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"os"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// ErrNoPEMCertificate is returned (wrapped) by [ReadCAFile] for a file that
// holds no PEM certificate.
var ErrNoPEMCertificate = errors.New("no PEM certificate found")

// ReadCAFile reads a PEM file of CA certificates into a pool. The config
// check and the prober both use it, so a file one accepts the other does.
func ReadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, ErrNoPEMCertificate
	}
	return pool, nil
}

// LoadClientCert reads a client certificate and its key (PEM files), as
// the config check and the prober both do.
func LoadClientCert(certFile, keyFile string) (tls.Certificate, error) {
	return tls.LoadX509KeyPair(certFile, keyFile)
}

// loadTLSConfig builds the client TLS configuration of o.TLS, reading its
// files. ServerName is left for each probe to set.
func loadTLSConfig(o TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // a user's explicit choice
		NextProtos:         []string{"http/1.1"},
	}
	if o.CAFile != "" {
		pool, err := ReadCAFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca file %s: %w", o.CAFile, err)
		}
		cfg.RootCAs = pool
	}
	if o.CertFile != "" {
		cert, err := LoadClientCert(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s: %w", o.CertFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// tlsConfigFor returns the TLS configuration for server name name: the
// shared one when the prober's name is fixed, a copy otherwise.
func (p *Prober) tlsConfigFor(name string) *tls.Config {
	if p.tlsFixed {
		return p.tls
	}
	cfg := p.tls.Clone()
	cfg.ServerName = name
	return cfg
}

// handshakeError marks an error of the TLS handshake, so that classification
// does not have to guess the phase.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// handshake runs a TLS handshake over c for server name name, calls the
// trace's TLS hooks, and returns the TLS connection. It records in rep the
// earliest expiry of the certificates the server presented (also on a
// verification error) and, once the handshake completed, the version and
// cipher suite. c's deadline bounds the handshake.
func (p *Prober) handshake(trace *httptrace.ClientTrace, c net.Conn, name string, rep *probe.Report) (*tls.Conn, error) {
	tc := tls.Client(c, p.tlsConfigFor(name))
	if trace.TLSHandshakeStart != nil {
		trace.TLSHandshakeStart()
	}
	err := tc.Handshake()
	state := tc.ConnectionState()
	if trace.TLSHandshakeDone != nil {
		trace.TLSHandshakeDone(state, err)
	}
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			rep.CertExpiry = earliestExpiry(verr.UnverifiedCertificates)
		}
		return nil, &handshakeError{err}
	}
	rep.CertExpiry = earliestExpiry(state.PeerCertificates)
	rep.TLSVersion, rep.TLSCipher = state.Version, state.CipherSuite
	return tc, nil
}

// earliestExpiry returns the earliest NotAfter of certs, zero for none.
func earliestExpiry(certs []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range certs {
		if t.IsZero() || c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}
