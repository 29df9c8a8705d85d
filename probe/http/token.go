package http

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sondeprobe/sonde/internal/safefile"
)

// TokenHeader is the header that carries an App Service style probe token
// (docs/semantics.md H10), in canonical form; HTTP header names are case-insensitive
// and App Service documents it as x-ms-auth-internal-token.
const TokenHeader = "X-Ms-Auth-Internal-Token"

// ErrEmptySecret is returned (wrapped) when a token secret is empty.
var ErrEmptySecret = errors.New("token secret is empty")

// Token is the value of the [TokenHeader]: base64(SHA-256(secret)). It keeps
// only that digest, never the secret, and prints as "[redacted]" with every
// fmt verb, as text and as JSON (the zero Token as ""), so it cannot leak through logs or config
// dumps. The zero Token means no header.
type Token struct {
	value string
}

// NewToken returns the token for secret. secret must not be empty.
func NewToken(secret []byte) (Token, error) {
	if len(secret) == 0 {
		return Token{}, ErrEmptySecret
	}
	sum := sha256.Sum256(secret)
	return Token{value: base64.StdEncoding.EncodeToString(sum[:])}, nil
}

// TokenFromFile returns the token for the secret in the file at path, read
// as every secret file is ([safefile.ReadSecret]: surrounding white space
// is not part of the secret, so a file written by echo works). ctx bounds
// the read. Errors name the path, never the content.
func TokenFromFile(ctx context.Context, path string) (Token, error) {
	b, err := safefile.ReadSecret(ctx, path)
	if err != nil {
		return Token{}, fmt.Errorf("read token secret: %w", err)
	}
	return NewToken(b)
}

// TokenFromEnv returns the token for the secret in environment variable
// name, used as is. An unset or empty variable is an error.
func TokenFromEnv(name string) (Token, error) {
	s, ok := os.LookupEnv(name)
	if !ok {
		return Token{}, fmt.Errorf("token secret: environment variable %s is not set", name)
	}
	t, err := NewToken([]byte(s))
	if err != nil {
		return Token{}, fmt.Errorf("token secret in %s: %w", name, err)
	}
	return t, nil
}

// IsZero reports whether t is the zero Token (no header sent).
func (t Token) IsZero() bool { return t.value == "" }

// HeaderValue returns the value sent in the TokenHeader.
func (t Token) HeaderValue() string { return t.value }

// String returns "[redacted]", or "" for the zero Token.
func (t Token) String() string {
	if t.IsZero() {
		return ""
	}
	return "[redacted]"
}

// GoString returns the same as String.
func (t Token) GoString() string { return t.String() }

// Format prints the same as String for every verb.
func (t Token) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// MarshalText returns the same as String.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
