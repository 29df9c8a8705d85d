package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/server/web/api"
	"github.com/sondeprobe/sonde/server/webhook"
)

// receiver is a webhook receiver on a fixed loopback port that can be
// stopped and started again, as a restarted service would be. It accepts
// only batches signed with its secret.
type receiver struct {
	t       *testing.T
	addr    string
	secret  []byte
	mu      sync.Mutex
	srv     *http.Server
	batches []api.HookBatch
	bad     []string // why a request was refused
}

func newReceiver(t *testing.T, secret []byte) *receiver {
	r := &receiver{t: t, secret: secret}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	r.serve(l)
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle)}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	var b api.HookBatch
	switch {
	case err != nil:
		r.bad = append(r.bad, err.Error())
	case !webhook.Verify(r.secret, body, req.Header.Get(webhook.SignatureHeader)):
		r.bad = append(r.bad, "bad signature")
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	case json.Unmarshal(body, &b) != nil:
		r.bad = append(r.bad, "bad JSON")
	default:
		r.batches = append(r.batches, b)
	}
}

// stop closes the listener and every connection: the receiver is down.
func (r *receiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// start listens again on the same port.
func (r *receiver) start() {
	l, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(l)
}

// seqs returns the sequence numbers received, in order, and the batches.
func (r *receiver) seqs() ([]uint64, []api.HookBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []uint64
	for _, b := range r.batches {
		for _, e := range b.Events {
			s = append(s, e.Seq)
		}
	}
	return s, slices.Clone(r.batches)
}

// TestWebhookOrderAndRestart is issue 13's webhook done-when: a receiver on
// loopback gets signed batches in order, only the events it asked for, and
// loses none while it is down: the batches wait and are retried until it is
// back.
func TestWebhookOrderAndRestart(t *testing.T) {
	secret := []byte("s3cret")
	secretFile := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, secret)
	a, b := newBackend(t), newBackend(t)
	td := startDaemonWith(t, fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 1h, timeout: 1s, rise: 1, fall: 1}
pools:
  - {name: api, check: web, targets: [%q]}
  - {name: other, check: web, targets: [%q]}
webhooks:
  - name: lb
    url: http://%s/sonde
    secret_file: %s
    timeout: 2s
    events: {kinds: [state, route], pools: [api]}
`, a.addr(), b.addr(), rc.addr, secretFile), func(o *Options) {
		o.WebhookMinBackoff, o.WebhookMaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	})
	d := td.d
	wanted := func(e api.Event) bool {
		return (e.Kind == api.KindState || e.Kind == api.KindRoute) && slices.Contains(e.Pools, "api")
	}
	emit := func(n int) {
		for i := range n {
			kinds := []string{api.KindRoute, api.KindState, api.KindPreferred, api.KindRoute}
			pools := [][]string{{"api"}, {"api", "other"}, {"api"}, {"other"}}
			d.events.add(api.Event{Kind: kinds[i%4], Pools: pools[i%4], Target: fmt.Sprint(i)})
		}
	}
	// want returns the sequence numbers of every event in the log the
	// webhook wants, oldest first.
	want := func() []uint64 {
		var s []uint64
		evs, _, _ := d.events.page(0, maxEventsPage)
		for _, e := range evs {
			if wanted(e) {
				s = append(s, e.Seq)
			}
		}
		return s
	}
	waitAll := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, _ := rc.seqs()
			w := want()
			if slices.Equal(got, w) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: received %v, want %v", what, got, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	h := d.hooks.list()[0]

	emit(40)
	waitAll("receiver up")

	rc.stop()
	emit(40)
	deadline := time.Now().Add(20 * time.Second)
	for h.failed.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed delivery while the receiver is down (%d)", h.failed.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	emit(40)
	rc.start()
	waitAll("receiver restarted")

	_, batches := rc.seqs()
	for _, bt := range batches {
		if bt.Webhook != "lb" || bt.Lost != 0 {
			t.Errorf("batch %+v: want webhook lb, nothing lost", bt)
		}
		for _, e := range bt.Events {
			if !wanted(e) {
				t.Errorf("received %+v, which the filter excludes", e)
			}
		}
	}
	if len(rc.bad) > 0 {
		t.Errorf("refused requests: %v", rc.bad)
	}
	// The receiver has the events before sonde reads its answer.
	for n := uint64(len(want())); h.delivered.Load() != n || h.dropped.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d dropped %d, want %d and 0", h.delivered.Load(), h.dropped.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	problems, err := testutil.GatherAndLint(d.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if v := metricValue(t, d.metrics.reg, "sonde_webhook_requests_total", map[string]string{"webhook": "lb", "result": "failure"}); v < 2 {
		t.Errorf("sonde_webhook_requests_total{result=failure} = %v, want ≥ 2", v)
	}
}

// metricValue returns the value of the series of metric name with labels,
// failing when there is none.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// TestHookRefusedAndFull covers the two ways a webhook drops events: a
// receiver that refuses a batch for good (4xx) drops that batch, and a
// queue that fills while the receiver is down drops the oldest events; the
// next batch accepted tells how many of both.
func TestHookRefusedAndFull(t *testing.T) {
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
	opt := &Options{Version: "test"}
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
	deadline := time.Now().Add(20 * time.Second)
	for h.queued() > 0 || h.succeeded.Load() < uint64(hookQueue/hookBatch-1) {
		if time.Now().After(deadline) {
			t.Fatalf("queue not delivered: %d queued, %d requests", h.queued(), h.succeeded.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: "http://127.0.0.1:1/", Timeout: time.Second}, &Options{}, slog.New(slog.DiscardHandler))
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
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := newHook(t.Context(), &config.EventWebhook{Name: "lb", URL: "http://127.0.0.1:1/", SecretFile: empty}, &Options{}, slog.New(slog.DiscardHandler))
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
	opt := &Options{Version: "test", WebhookMinBackoff: time.Millisecond, WebhookMaxBackoff: 2 * time.Millisecond}
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: srv.URL + "/hook", Timeout: time.Second}, opt, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.offer(&api.Event{Seq: uint64(i + 1), Kind: api.KindState})
	}
	h.start()
	defer h.stop()
	waitFor(t, "the first batch refused", func() bool { return h.refused.Load() == 1 })
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
	waitFor(t, "events 4 and 5 delivered", func() bool { s, _ := received(); return slices.Contains(s, 5) })
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusGone)
	}))
	defer srv.Close()
	logs := &syncBuffer{}
	opt := &Options{Version: "test", WebhookMinBackoff: time.Millisecond, WebhookMaxBackoff: 2 * time.Millisecond}
	h, err := newHook(t.Context(), &config.EventWebhook{Name: "x", URL: srv.URL, Timeout: time.Second}, opt, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	defer h.stop()
	for i := range 20 {
		h.offer(&api.Event{Seq: uint64(i + 1), Kind: api.KindState})
		waitFor(t, fmt.Sprintf("batch %d refused", i+1), func() bool { return h.refused.Load() >= uint64(i+1) })
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines for %d refused batches, want 1:\n%s", n, h.refused.Load(), logs.String())
	}
}
