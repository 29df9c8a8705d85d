package probe

import (
	"context"
	"time"
)

// Phases are the durations of the consecutive phases of one connection-based
// probe. They do not overlap, so their sum is the probe's duration from the
// start of connect() to the last byte read. A phase the probe did not reach,
// or that does not apply (TLS on plain HTTP), is zero.
type Phases struct {
	// Connect is TCP connection set-up: from the connect() call to the
	// established connection (SYN to SYN-ACK, as the client sees it).
	Connect time.Duration
	// TLS is the TLS handshake: from its first message to its completion.
	TLS time.Duration
	// FirstByte is the wait for the response: from just before the request
	// is written to the first byte of the response.
	FirstByte time.Duration
	// LastByte is the transfer of the response: from its first byte to the
	// last byte read (end of body, or the read bound).
	LastByte time.Duration
}

// Report is a [Result] with the detail the scheduler has no room for: why a
// probe failed, how long each phase took and when the server's certificate
// expires. Daemons use it for phase histograms and a target's last error.
type Report struct {
	Result

	// Err is the failure behind a non-Success Outcome, nil on success. It may
	// be a sentinel of the prober's package (for example a status outside the
	// healthy set) or a wrapped network, TLS or protocol error.
	Err error
	// Phases are the probe's phase durations as far as it got.
	Phases Phases
	// CertExpiry is the earliest NotAfter among the certificates the server
	// presented; zero when no TLS handshake got as far as certificates.
	CertExpiry time.Time
	// TLSVersion and TLSCipher are the version (tls.VersionTLS13, …) and
	// cipher suite a completed TLS handshake agreed on; zero without one.
	TLSVersion, TLSCipher uint16
	// ContentLength is the Content-Length of an HTTP response, -1 for a
	// response that gave none (chunked, or until the connection closes),
	// 0 when no response arrived.
	ContentLength int64
	// BodyBytes is how many bytes of an HTTP response's body the probe
	// read: the whole body, or its first MaxBodyBytes (the prober reads no
	// further).
	BodyBytes int64
}

// Reporter is a [Prober] that can also tell the detail of a probe. Report
// runs one probe like [Prober.Probe] and returns its Result within a Report;
// ID, Gen and Done are the caller's to fill in.
type Reporter interface {
	Prober
	Report(ctx context.Context, t Target) Report
}
