package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/events"
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

// TestWebhookOrderAndRestart is the acceptance test of webhooks: a receiver on
// loopback gets signed batches in order, only the events it asked for, and
// loses none while it is down: the batches wait and are retried until it is
// back.
func TestWebhookOrderAndRestart(t *testing.T) {
	t.Parallel()
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
			d.events.Add(api.Event{Kind: kinds[i%4], Pools: pools[i%4], Target: fmt.Sprint(i)})
		}
	}
	// want returns the sequence numbers of every event in the log the
	// webhook wants, oldest first.
	want := func() []uint64 {
		var s []uint64
		evs, _, _ := logPage(d.events, 0, apiv1.MaxEventsPage)
		for _, e := range evs {
			if wanted(e) {
				s = append(s, e.Seq)
			}
		}
		return s
	}
	waitAll := func(what string) {
		t.Helper()
		testenv.Eventually(t, what+": every wanted event received", func() (string, bool) {
			got, _ := rc.seqs()
			w := want()
			return fmt.Sprintf("received %v, want %v", got, w), slices.Equal(got, w)
		})
	}
	h := d.hooks.List()[0]

	emit(40)
	waitAll("receiver up")

	rc.stop()
	emit(40)
	testenv.Eventually(t, "two failed deliveries while the receiver is down", func() (uint64, bool) {
		n := h.Counts().Failed
		return n, n >= 2
	})
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
	n := uint64(len(want()))
	testenv.Eventually(t, fmt.Sprintf("%d delivered, none dropped", n), func() (string, bool) {
		c := h.Counts()
		return fmt.Sprintf("delivered %d dropped %d", c.Delivered, c.Dropped), c.Delivered == n && c.Dropped == 0
	})
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

// logPage reads a poll's page of l whole, as handleEvents writes it.
func logPage(l *events.Log, since uint64, limit int) (evs []api.Event, next, lost uint64) {
	from, end, lost := l.Window(since, limit)
	evs, _ = l.CopyRange(from, end, make([]api.Event, 0, end-from))
	return evs, end - 1, lost
}
