package http

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/sondeprobe/sonde/probe"
)

// Errors that explain an HTTP probe's failure in [probe.Report].Err; they
// are wrapped, test them with errors.Is.
var (
	// ErrStatus: the status code is outside the healthy set (HTTPStatus).
	ErrStatus = errors.New("status code not in the healthy set")
	// ErrBodyMismatch: the body lacks the expected text (BodyMismatch).
	ErrBodyMismatch = errors.New("response body lacks the expected text")
	// ErrEmptyResponse: the server closed the connection without sending
	// a byte (Error).
	ErrEmptyResponse = errors.New("connection closed without a response")
	// ErrHeaderTooLarge: the response head exceeds the prober's bound
	// (InvalidResponse).
	ErrHeaderTooLarge = fmt.Errorf("response head larger than %d bytes", maxHeaderBytes)
)

// phase is the part of a probe in which an error happened.
type phase uint8

const (
	phaseConnect  phase = iota // TCP connect
	phaseTLS                   // TLS handshake
	phaseWrite                 // writing the request
	phaseResponse              // reading the status line and headers
	phaseBody                  // reading the body
)

// classify returns the outcome of a probe that err ended in phase ph. ctx
// is the probe's context; rr is the response reader (nil before the
// request was written). Errors are told apart by phase, type and errno,
// never by message.
func classify(ctx context.Context, ph phase, err error, rr *respReader) probe.Outcome {
	var sockErr error
	if rr != nil {
		sockErr = rr.err
	}
	return outcomeOf(ph, err, sockErr, rr != nil && rr.tls, errors.Is(ctx.Err(), context.Canceled))
}

// outcomeOf is classify without a context: err ended the probe in phase
// ph; sockErr is the first error of the connection's reads (io.EOF
// included), nil when none; tls tells a TLS connection; cancelled tells a
// probe whose context was cancelled. Both probe paths classify through it.
func outcomeOf(ph phase, err, sockErr error, tls, cancelled bool) probe.Outcome {
	reading := ph == phaseResponse || ph == phaseBody
	// While reading, a failure of the socket itself (reset, deadline,
	// unreachable) explains the error better than what the parser made of it.
	sockFailed := reading && sockErr != nil && sockErr != io.EOF
	if sockFailed {
		err = sockErr
	}
	if probe.IsTimeout(err) {
		if cancelled {
			return probe.Error // cancelled, not out of time
		}
		return probe.Timeout
	}
	switch {
	case sockFailed && tls && !isErrno(err):
		// A TLS record or alert error after the handshake, such as a server
		// rejecting the client certificate (TLS 1.3 reports it late).
		return probe.TLS
	case ph == phaseConnect || ph == phaseWrite || sockFailed:
		return probe.NetOutcome(err)
	case ph == phaseTLS:
		return probe.TLS
	case errors.Is(err, ErrEmptyResponse):
		return probe.Error
	}
	// The server sent bytes that are not a well-formed HTTP response.
	return probe.InvalidResponse
}

// isErrno reports whether err comes from a system call.
func isErrno(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// respReader is the reader beneath the response's bufio.Reader. It counts
// the bytes received, keeps the first error of the connection, and refuses
// to read beyond limit, which bounds the response head.
type respReader struct {
	r     io.Reader
	n     int64 // bytes read so far
	limit int64 // n may not exceed limit; reads past it fail with ErrHeaderTooLarge
	err   error // first error of r, io.EOF included
	tls   bool  // r is a TLS connection
}

func (rr *respReader) reset(r io.Reader, limit int64, tls bool) {
	*rr = respReader{r: r, limit: limit, tls: tls}
}

func (rr *respReader) Read(p []byte) (int, error) {
	if rr.n >= rr.limit {
		return 0, ErrHeaderTooLarge
	}
	if rest := rr.limit - rr.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := rr.r.Read(p)
	rr.n += int64(n)
	if err != nil && rr.err == nil {
		rr.err = err
	}
	return n, err
}
