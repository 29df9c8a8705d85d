package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestHookRefusedAndFull covers the two ways a webhook drops events: a
// receiver that refuses a batch for good (4xx) drops that batch, and a
// queue that fills while the receiver is down drops the oldest events; the
// next batch accepted tells how many of both.
func TestHookRefusedAndFull(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []api.HookBatch
	refuse := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			refuse = false
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		var b api.HookBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Error(err)
		}
		got = append(got, b)
	}))
	defer srv.Close()
	opt := &HookOptions{UserAgent: "sonde/test"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: srv.URL, Timeout: time.Second}, opt, log)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hookQueue + 5 { // not running yet: the queue fills
		h.offer(&api.Event{Seq: uint64(i + 1), Kind: api.KindState})
	}
	if h.dropped.Load() != 5 || h.queued() != hookQueue {
		t.Fatalf("full queue: %d dropped, %d queued; want 5 and %d", h.dropped.Load(), h.queued(), hookQueue)
	}
	h.start()
	defer h.stop()
	testenv.Eventually(t, "the queue delivered", func() (string, bool) {
		q, n := h.queued(), h.succeeded.Load()
		return fmt.Sprintf("%d queued, %d requests", q, n), q == 0 && n >= uint64(hookQueue/hookBatch-1)
	})
	mu.Lock()
	defer mu.Unlock()
	// The first batch (6..505, with lost 5) was refused; the rest arrive,
	// the first of them counting the refused batch's events and lost ones.
	if len(got) == 0 || got[0].Events[0].Seq != 6+hookBatch || got[0].Lost != 5+hookBatch {
		t.Fatalf("first batch accepted starts at %d lost %d, want %d lost %d", got[0].Events[0].Seq, got[0].Lost, 6+hookBatch, 5+hookBatch)
	}
	if h.refused.Load() != 1 || h.dropped.Load() != 5+hookBatch {
		t.Fatalf("refused %d dropped %d, want 1 and %d", h.refused.Load(), h.dropped.Load(), 5+hookBatch)
	}
}

// TestHookLostReported checks that the next batch says how many events the
// full queue dropped.
func TestHookLostReported(t *testing.T) {
	t.Parallel()
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: "http://127.0.0.1:1/", Timeout: time.Second}, &HookOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range hookQueue + 3 {
		h.offer(&api.Event{Seq: uint64(i + 1)})
	}
	evs, lost := h.take(2)
	if lost != 3 || len(evs) != 2 || evs[0].Seq != 4 {
		t.Fatalf("take: %d events from %d, lost %d; want 2 from 4, lost 3", len(evs), evs[0].Seq, lost)
	}
	if _, lost := h.take(2); lost != 0 {
		t.Fatalf("second take: lost %d, want 0", lost)
	}
}

// TestHookSecretUnreadable rejects a configuration whose secret file cannot
// be read, naming the webhook.
func TestHookSecretUnreadable(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := newHook(t.Context(), &config.EventWebhook{Name: "lb", URL: "http://127.0.0.1:1/", SecretFile: empty}, &HookOptions{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.HasPrefix(err.Error(), "webhook lb: ") || !errors.Is(err, safefile.ErrEmptySecret) {
		t.Fatalf("empty secret file: %v", err)
	}
}

// TestHookRefusedCountedLost: a receiver that answers a batch with a
// redirect (any status outside 2xx that is not retried), then 200, is told
// in the lost of a later batch how many events it missed; the redirect is
// not followed. The refused events used to be dropped with the next batch
// saying lost 0.
func TestHookRefusedCountedLost(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []api.HookBatch
	requests, followed := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/moved" {
			followed++
			return
		}
		if requests++; requests == 1 {
			http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
			return
		}
		var b api.HookBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Error(err)
		}
		got = append(got, b)
	}))
	defer srv.Close()
	opt := &HookOptions{UserAgent: "sonde/test", MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: srv.URL + "/hook", Timeout: time.Second}, opt, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.offer(&api.Event{Seq: uint64(i + 1), Kind: api.KindState})
	}
	h.start()
	defer h.stop()
	testenv.Eventually(t, "the first batch refused", func() (uint64, bool) { n := h.refused.Load(); return n, n == 1 })
	h.offer(&api.Event{Seq: 4, Kind: api.KindState})
	h.offer(&api.Event{Seq: 5, Kind: api.KindState})
	received := func() (seqs []uint64, lost uint64) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range got {
			lost += b.Lost
			for _, e := range b.Events {
				seqs = append(seqs, e.Seq)
			}
		}
		return seqs, lost
	}
	testenv.Eventually(t, "events 4 and 5 delivered", func() ([]uint64, bool) { s, _ := received(); return s, slices.Contains(s, 5) })
	seqs, lost := received()
	if !slices.Equal(seqs, []uint64{4, 5}) || lost != 3 {
		t.Errorf("received events %v with lost %d in all, want 4 and 5 with lost 3 (the refused batch)", seqs, lost)
	}
	mu.Lock()
	defer mu.Unlock()
	if followed != 0 {
		t.Errorf("the redirect was followed %d times", followed)
	}
}

// TestHookRefusalsLogged: a receiver that refuses every batch is logged
// once when it starts (then at most once a minute, with the count), not
// once per batch: it used to be an error line per batch, thousands a
// minute.
func TestHookRefusalsLogged(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusGone)
	}))
	defer srv.Close()
	logs := &testenv.SyncBuffer{}
	opt := &HookOptions{UserAgent: "sonde/test", MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: srv.URL, Timeout: time.Second}, opt, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	defer h.stop()
	for i := range 20 {
		h.offer(&api.Event{Seq: uint64(i + 1), Kind: api.KindState})
		testenv.Eventually(t, fmt.Sprintf("batch %d refused", i+1), func() (uint64, bool) { n := h.refused.Load(); return n, n >= uint64(i+1) })
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines for %d refused batches, want 1:\n%s", n, h.refused.Load(), logs.String())
	}
}
