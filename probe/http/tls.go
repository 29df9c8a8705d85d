package http

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"time"

	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/probe"
)

// ErrNoPEMCertificate is returned (wrapped) by [ReadCAFile] for a file that
// holds no PEM certificate.
var ErrNoPEMCertificate = errors.New("no PEM certificate found")

// ReadCAFile reads a PEM file of CA certificates (at most
// safefile.MaxPEM bytes) into a pool. The config check and the prober both
// use it, so a file one accepts the other does. ctx bounds the read.
func ReadCAFile(ctx context.Context, path string) (*x509.CertPool, error) {
	pem, err := safefile.ReadFile(ctx, path, safefile.MaxPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, ErrNoPEMCertificate
	}
	return pool, nil
}

// LoadClientCert reads a client certificate (a PEM file of at most
// safefile.MaxPEM bytes) and its key (at most safefile.MaxSecret), as the
// config check and the prober both do. ctx bounds the reads.
func LoadClientCert(ctx context.Context, certFile, keyFile string) (tls.Certificate, error) {
	cert, err := safefile.ReadFile(ctx, certFile, safefile.MaxPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := safefile.ReadFile(ctx, keyFile, safefile.MaxSecret)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// loadTLSConfig builds the client TLS configuration of o.TLS, reading its
// files; ctx bounds the reads. ServerName is left for each probe to set.
func loadTLSConfig(ctx context.Context, o TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // a user's explicit choice
		NextProtos:         []string{"http/1.1"},
	}
	if o.CAFile != "" {
		pool, err := ReadCAFile(ctx, o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca file %s: %w", o.CAFile, err)
		}
		cfg.RootCAs = pool
	}
	if o.CertFile != "" {
		cert, err := LoadClientCert(ctx, o.CertFile, o.KeyFile)
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
