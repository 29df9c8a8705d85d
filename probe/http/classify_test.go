package http

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sondeprobe/sonde/probe"
)

func opErr(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
}

// TestClassify covers the classification of errors that loopback tests
// cannot produce (no route, host down) next to those they do.
func TestClassify(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	deadline := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		ctx  context.Context
		ph   phase
		err  error
		rr   respReader
		want probe.Outcome
	}{
		{"connect refused", live, phaseConnect, opErr("connect", syscall.ECONNREFUSED), respReader{}, probe.Refused},
		{"connect host unreachable", live, phaseConnect, opErr("connect", syscall.EHOSTUNREACH), respReader{}, probe.Unreachable},
		{"connect net unreachable", live, phaseConnect, opErr("connect", syscall.ENETUNREACH), respReader{}, probe.Unreachable},
		{"connect address not available (local ports exhausted)", live, phaseConnect, opErr("connect", syscall.EADDRNOTAVAIL), respReader{}, probe.LocalError},
		{"connect kernel timeout", live, phaseConnect, opErr("connect", syscall.ETIMEDOUT), respReader{}, probe.Timeout},
		{"connect ctx deadline", live, phaseConnect, fmt.Errorf("connect: %w", context.DeadlineExceeded), respReader{}, probe.Timeout},
		{"connect cancelled", cancelled, phaseConnect, fmt.Errorf("connect: %w", context.Canceled), respReader{}, probe.Error},
		{"connect out of descriptors", live, phaseConnect, opErr("socket", syscall.EMFILE), respReader{}, probe.LocalError},
		{"connect other", live, phaseConnect, opErr("connect", syscall.ECONNRESET), respReader{}, probe.Error},
		{"tls unknown authority", live, phaseTLS, &handshakeError{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, respReader{}, probe.TLS},
		{"tls reset", live, phaseTLS, &handshakeError{opErr("read", syscall.ECONNRESET)}, respReader{}, probe.TLS},
		{"tls deadline", live, phaseTLS, &handshakeError{deadline}, respReader{}, probe.Timeout},
		{"write reset", live, phaseWrite, opErr("write", syscall.EPIPE), respReader{}, probe.Error},
		{"read deadline", live, phaseResponse, deadline, respReader{err: deadline}, probe.Timeout},
		{"read deadline after cancel", cancelled, phaseResponse, deadline, respReader{err: deadline}, probe.Error},
		{"read unreachable (ICMP after connect)", live, phaseResponse, io.ErrUnexpectedEOF, respReader{n: 3, err: opErr("read", syscall.EHOSTUNREACH)}, probe.Unreachable},
		{"read reset", live, phaseResponse, io.ErrUnexpectedEOF, respReader{n: 3, err: opErr("read", syscall.ECONNRESET)}, probe.Error},
		{"read reset over tls", live, phaseBody, io.ErrUnexpectedEOF, respReader{n: 3, err: opErr("read", syscall.ECONNRESET), tls: true}, probe.Error},
		{"tls alert after handshake", live, phaseResponse, errors.New("remote error"), respReader{err: &net.OpError{Op: "remote error", Err: tls.AlertError(116)}, tls: true}, probe.TLS},
		{"empty response", live, phaseResponse, ErrEmptyResponse, respReader{err: io.EOF}, probe.Error},
		{"garbage", live, phaseResponse, errors.New("malformed HTTP response"), respReader{n: 20}, probe.InvalidResponse},
		{"truncated body", live, phaseBody, io.ErrUnexpectedEOF, respReader{n: 20, err: io.EOF}, probe.InvalidResponse},
		{"head too large", live, phaseResponse, ErrHeaderTooLarge, respReader{n: maxHeaderBytes}, probe.InvalidResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.ctx, tt.ph, tt.err, &tt.rr); got != tt.want {
				t.Errorf("classify = %v, want %v", got, tt.want)
			}
		})
	}
}
