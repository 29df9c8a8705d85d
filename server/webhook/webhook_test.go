package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// receiver answers with the statuses in codes, one per request, then 200.
type receiver struct {
	mu     sync.Mutex
	codes  []int
	bodies []string
	sigs   []string
	hdr    http.Header
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, string(b))
	r.sigs = append(r.sigs, req.Header.Get(SignatureHeader))
	r.hdr = req.Header.Clone()
	code := http.StatusOK
	if len(r.codes) > 0 {
		code, r.codes = r.codes[0], r.codes[1:]
	}
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "7")
	}
	w.WriteHeader(code)
}

func newSender(t *testing.T, r *receiver) (*Sender, *[]time.Duration) {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	var waits []time.Duration
	return &Sender{
		URL:    srv.URL,
		Secret: []byte("k3y"),
		Header: http.Header{"X-Sonde-Event": {"state"}},
		Sleep: func(_ context.Context, d time.Duration) error {
			waits = append(waits, d)
			return nil
		},
	}, &waits
}

func TestPostSignsAndRetries(t *testing.T) {
	t.Parallel()
	r := &receiver{codes: []int{503, 500, 429, 200}}
	s, waits := newSender(t, r)
	body := []byte(`{"seq":1}`)
	n, err := s.Post(context.Background(), body)
	if err != nil || n != 4 {
		t.Fatalf("Post = %d, %v; want 4 attempts, nil", n, err)
	}
	// Backoff doubles from 500ms; the 429's Retry-After of 7s replaces the 2s.
	if diff := cmp.Diff([]time.Duration{500 * time.Millisecond, time.Second, 7 * time.Second}, *waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	for i, sig := range r.sigs {
		if !Verify([]byte("k3y"), body, sig) || r.bodies[i] != string(body) {
			t.Errorf("attempt %d: body %q signature %q does not verify", i, r.bodies[i], sig)
		}
	}
	if Verify([]byte("other"), body, r.sigs[0]) || Verify([]byte("k3y"), []byte(`{"seq":2}`), r.sigs[0]) {
		t.Error("a signature verifies under another key or body")
	}
	if got := r.hdr.Get("X-Sonde-Event"); got != "state" {
		t.Errorf("extra header = %q", got)
	}
	if got := r.hdr.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
}

func TestPostGivesUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		codes    []int
		attempts int
		rejected bool
	}{
		{"client error is final", []int{400}, 1, true},
		{"redirect is final", []int{302}, 1, true},
		{"down until the last attempt", []int{503, 503, 503}, 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &receiver{codes: c.codes}
			s, _ := newSender(t, r)
			s.MaxAttempts = 3
			n, err := s.Post(context.Background(), []byte(`{}`))
			if n != c.attempts || err == nil || errors.Is(err, ErrRejected) != c.rejected {
				t.Errorf("Post = %d, %v; want %d attempts, rejected %v", n, err, c.attempts, c.rejected)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Code != c.codes[len(c.codes)-1] {
				t.Errorf("error %v does not carry status %d", err, c.codes[len(c.codes)-1])
			}
		})
	}
}

func TestPostStopsWithContext(t *testing.T) {
	t.Parallel()
	r := &receiver{codes: []int{503, 503, 503}}
	s, _ := newSender(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	s.Sleep = func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }
	n, err := s.Post(ctx, []byte(`{}`))
	if n != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("Post = %d, %v; want 1 attempt and context.Canceled", n, err)
	}
}

func TestUnsigned(t *testing.T) {
	t.Parallel()
	r := &receiver{}
	s, _ := newSender(t, r)
	s.Secret = nil
	if _, err := s.Post(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if r.sigs[0] != "" {
		t.Errorf("unsigned sender sent signature %q", r.sigs[0])
	}
}

func TestReadSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if b, err := ReadSecret(t.Context(), write("ok", "  s3cret\n")); err != nil || string(b) != "s3cret" {
		t.Errorf("ReadSecret = %q, %v", b, err)
	}
	for _, p := range []string{write("empty", " \n"), write("big", string(make([]byte, 64<<10+1))), dir, filepath.Join(dir, "missing")} {
		if _, err := ReadSecret(t.Context(), p); err == nil {
			t.Errorf("ReadSecret(%s) accepted it", p)
		}
	}
}

// TestReadSecretFIFO: a secret file swapped for a FIFO is refused at once;
// opening it used to wait for a writer, holding the reload that read it.
func TestReadSecretFIFO(t *testing.T) {
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
		_, err := ReadSecret(t.Context(), fifo)
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadSecret(FIFO) = %v, want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadSecret(FIFO) waits for a writer")
	}
}

// TestPostNoRedirect: a redirect is the receiver's answer, a refusal, with
// any client: the signed body never goes where it points.
func TestPostNoRedirect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	followed := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			mu.Lock()
			followed++
			mu.Unlock()
			return
		}
		http.Redirect(w, r, "/moved", http.StatusPermanentRedirect)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"default client", nil}, {"a client of the caller's", &http.Client{}}} {
		t.Run(c.name, func(t *testing.T) {
			s := &Sender{URL: srv.URL + "/hook", Client: c.client, Secret: []byte("k3y")}
			n, err := s.Post(t.Context(), []byte(`{}`))
			var se *StatusError
			if !errors.Is(err, ErrRejected) || !errors.As(err, &se) || se.Code != http.StatusPermanentRedirect || n != 1 {
				t.Fatalf("Post to a redirecting receiver = %d, %v; want one attempt refused with status 308", n, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if followed != 0 {
				t.Fatalf("the redirect was followed %d times", followed)
			}
		})
	}
}
