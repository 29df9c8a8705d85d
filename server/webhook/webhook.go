// Package webhook delivers JSON documents to HTTP endpoints for sonde's
// outbound notifications (event webhooks, remediation actions): one POST per
// document, signed with HMAC-SHA256 when a secret is set, retried with
// exponential backoff while the receiver is down or overloaded.
//
// The signature lets a receiver tell sonde's requests from a stranger's: the
// header [SignatureHeader] carries "sha256=" and the lowercase hex HMAC-SHA256
// of the exact request body, keyed with the secret. Receivers compare it in
// constant time. Documents carry their own timestamps and sequence numbers,
// so a receiver can also refuse replays.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// SignatureHeader is the request header that carries the body's signature.
const SignatureHeader = "X-Sonde-Signature-256"

// Defaults of [Sender] fields left zero.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 8
	DefaultMinBackoff  = 500 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
)

// Sender posts documents to one URL. Its fields are set before first use and
// not changed after; it is then safe for concurrent use.
type Sender struct {
	URL    string // endpoint, http or https
	Secret []byte // HMAC key; nil sends no signature
	// Client makes the requests; nil means http.DefaultTransport's. Whatever
	// the client, a redirect is never followed: it is the receiver's
	// answer, a refusal (ErrRejected), and the signed body goes nowhere
	// else.
	Client *http.Client
	// Timeout bounds each attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxAttempts bounds the attempts per document, the first included;
	// 0 means DefaultMaxAttempts.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait between attempts, which
	// doubles from MinBackoff; 0 means the defaults. A Retry-After header of
	// the receiver is honoured up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// UserAgent is sent with every request; "" means "sonde".
	UserAgent string
	// Header holds extra request headers (e.g. an event type).
	Header http.Header
	// Sleep waits between attempts; nil means a timer that ctx can cancel.
	// Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// ErrRejected wraps the error of a document the receiver refused for good
// (a redirect, a 4xx status other than 408 and 429, any other status
// outside 2xx that is not a 5xx): it is not retried.
var ErrRejected = errors.New("webhook rejected")

// StatusError is a response outside 2xx.
type StatusError struct{ Code int }

// Error returns "status CODE".
func (e *StatusError) Error() string { return "status " + strconv.Itoa(e.Code) }

// ReadSecret reads a secret file for a receiver written in Go, with the
// grammar sonde reads its own with: the content without surrounding white
// space, not empty, from a regular file of at most 64 KiB; ctx bounds the
// read.
func ReadSecret(ctx context.Context, path string) ([]byte, error) {
	b, err := safefile.ReadSecret(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	return b, nil
}

// Sign returns the value of [SignatureHeader] for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is the signature of body under secret; it takes
// the same time whatever the mismatch.
func Verify(secret, body []byte, sig string) bool {
	want := Sign(secret, body)
	return hmac.Equal([]byte(want), []byte(sig))
}

// Post delivers body, retrying until it is accepted (2xx), refused for good
// (ErrRejected), MaxAttempts is reached, or ctx ends. It returns the number
// of attempts made and the last error.
func (s *Sender) Post(ctx context.Context, body []byte) (attempts int, err error) {
	maxAttempts := cmp.Or(s.MaxAttempts, DefaultMaxAttempts)
	backoff := cmp.Or(s.MinBackoff, DefaultMinBackoff)
	maxBackoff := cmp.Or(s.MaxBackoff, DefaultMaxBackoff)
	sleep := s.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	for attempts = 1; ; attempts++ {
		retryAfter, err := s.attempt(ctx, body)
		if err == nil || errors.Is(err, ErrRejected) {
			return attempts, err
		}
		if attempts >= maxAttempts {
			return attempts, fmt.Errorf("after %d attempts: %w", attempts, err)
		}
		wait := backoff
		if retryAfter > wait {
			wait = min(retryAfter, maxBackoff)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return attempts, errors.Join(err, serr)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// attempt makes one request. It returns the receiver's Retry-After, if any.
func (s *Sender) attempt(ctx context.Context, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.Timeout, DefaultTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrRejected, err) // a bad URL never gets better
	}
	for k, v := range s.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", cmp.Or(s.UserAgent, "sonde"))
	if s.Secret != nil {
		req.Header.Set(SignatureHeader, Sign(s.Secret, body))
	}
	client := defaultClient
	if s.Client != nil {
		c := *s.Client
		c.CheckRedirect = noRedirect
		client = &c
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	// Drain a little so the connection can be reused, never much.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return 0, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return retryAfter(resp.Header.Get("Retry-After")), &StatusError{Code: c}
	default:
		return 0, fmt.Errorf("%w: %w", ErrRejected, &StatusError{Code: c})
	}
}

// defaultClient follows no redirects: a receiver that moves is a
// configuration error to see, not a hop to take with a signed body.
var defaultClient = &http.Client{CheckRedirect: noRedirect}

// noRedirect makes a client return a redirect as the response.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// retryAfter parses a Retry-After header given in seconds; dates and junk
// give 0.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
