package http

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/safefile"
)

func digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func TestTokenFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		want    string // header value; "" = error expected
	}{
		{"plain", "s3cr3t", digest("s3cr3t")},
		{"trailing newline", "s3cr3t\n", digest("s3cr3t")},
		{"trailing CRLF", "s3cr3t\r\n", digest("s3cr3t")},
		{"surrounding white space trimmed", " \ts3cr3t \n\n", digest("s3cr3t")},
		{"inner white space kept", "s3 cr3t", digest("s3 cr3t")},
		{"empty", "", ""},
		{"newline only", "\n", ""},
		{"too large", strings.Repeat("a", int(safefile.MaxSecret)+1), ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			tok, err := TokenFromFile(t.Context(), path)
			if tt.want == "" {
				if err == nil {
					t.Fatal("no error")
				}
				if secret := strings.TrimSpace(tt.content); secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.HeaderValue(); got != tt.want {
				t.Errorf("header value %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := TokenFromFile(t.Context(), filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}

// TestTokenFromFileFIFO: a secret file swapped for a FIFO is refused at
// once; opening it used to wait for a writer, holding whoever built the
// prober (a reload, a /probe request).
func TestTokenFromFileFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "secret")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // lets a blocked open go, should there be one
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := TokenFromFile(t.Context(), fifo)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, safefile.ErrNotRegular) {
			t.Fatalf("TokenFromFile(FIFO) = %v, want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TokenFromFile(FIFO) waits for a writer")
	}
}

func TestTokenFromEnv(t *testing.T) {
	t.Setenv("SONDE_TEST_SECRET", "s3cr3t")
	t.Setenv("SONDE_TEST_EMPTY", "")
	tok, err := TokenFromEnv("SONDE_TEST_SECRET")
	if err != nil || tok.HeaderValue() != digest("s3cr3t") {
		t.Errorf("TokenFromEnv = %q, %v; want %q", tok.HeaderValue(), err, digest("s3cr3t"))
	}
	if _, err := TokenFromEnv("SONDE_TEST_EMPTY"); !errors.Is(err, ErrEmptySecret) {
		t.Errorf("empty variable: %v, want ErrEmptySecret", err)
	}
	if _, err := TokenFromEnv("SONDE_TEST_UNSET_VARIABLE"); err == nil {
		t.Error("unset variable: no error")
	}
}

// TestTokenRedacted checks that neither the secret nor its digest can be
// printed or marshalled.
func TestTokenRedacted(t *testing.T) {
	t.Parallel()
	tok, err := NewToken([]byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	value := tok.HeaderValue()
	js, err := json.Marshal(struct{ O Options }{Options{Token: tok}})
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{
		fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x %d", tok, tok, tok, tok, tok, tok, tok),
		fmt.Sprintf("%+v %#v", Options{Token: tok}, Options{Token: tok}), string(js),
	}
	for _, out := range outputs {
		if strings.Contains(out, value) || strings.Contains(out, "s3cr3t") || !strings.Contains(out, "[redacted]") {
			t.Errorf("output %q: want [redacted], not the token", out)
		}
	}
	if got := fmt.Sprint(Token{}); got != "" {
		t.Errorf("zero token prints %q, want empty", got)
	}
}
