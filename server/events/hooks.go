package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/internal/safefile"
	"github.com/sondeprobe/sonde/server/web/api"
	"github.com/sondeprobe/sonde/server/webhook"
)

// Delivery settings of event webhooks.
const (
	// hookQueue is the number of events a webhook keeps while its receiver
	// is slow or down; beyond it the oldest are dropped and counted.
	hookQueue = 10000
	// hookBatch is the most events sent in one request.
	hookBatch = 500
	// hookAttempts is the number of attempts of one round of retries; a
	// batch that fails a round waits the longest backoff and tries again, so
	// it is never given up while the receiver only fails.
	hookAttempts = 4
	// hookLogEvery bounds the log of a receiver that refuses batches: one
	// line when it starts, then at most one a period, with the number
	// refused meanwhile.
	hookLogEvery = time.Minute
)

// Hook delivers the events one webhook wants, in batches, in order: one
// goroutine takes the oldest queued events, posts them until they are
// accepted, then takes the next. [Hook.offer] only queues, so the engine
// and the router never wait for a receiver.
type Hook struct {
	cfg    *config.EventWebhook
	key    string // the settings that make two hooks the same
	sender *webhook.Sender
	log    *slog.Logger

	mu   sync.Mutex
	q    []api.Event // ring of hookQueue events once grown
	head int
	n    int
	lost uint64 // events lost that no batch sent yet reports: dropped from a full queue, or in refused batches
	wake chan struct{}

	refusals RateLimit // of the log of refused batches

	delivered, dropped         atomic.Uint64 // events
	succeeded, failed, refused atomic.Uint64 // requests

	cancel context.CancelFunc
	done   chan struct{}
}

// newHook prepares the delivery of w, reading its secret; ctx bounds the
// read.
func newHook(ctx context.Context, w *config.EventWebhook, opt *HookOptions, log *slog.Logger) (*Hook, error) {
	var secret []byte
	if w.SecretFile != "" {
		var err error
		if secret, err = safefile.ReadSecret(ctx, w.SecretFile); err != nil {
			return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
		}
	}
	key, err := json.Marshal(struct {
		W      *config.EventWebhook
		Secret []byte
	}{w, secret})
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
	}
	return &Hook{
		cfg: w,
		key: string(key),
		sender: &webhook.Sender{
			URL:         w.URL,
			Secret:      secret,
			Timeout:     w.Timeout,
			MaxAttempts: hookAttempts,
			MinBackoff:  opt.MinBackoff,
			MaxBackoff:  opt.MaxBackoff,
			UserAgent:   opt.UserAgent,
		},
		log:      log.With("webhook", w.Name),
		wake:     make(chan struct{}, 1),
		refusals: RateLimit{Period: hookLogEvery},
	}, nil
}

// offer queues e if the webhook wants it. It never blocks on delivery:
// when the queue is full, the oldest event is dropped.
func (h *Hook) offer(e *api.Event) {
	if !h.cfg.Wants(e.Kind, e.Pools) {
		return
	}
	h.mu.Lock()
	if h.n == len(h.q) {
		if len(h.q) < hookQueue {
			h.grow()
		} else {
			h.head = (h.head + 1) % len(h.q)
			h.n--
			h.lost++
			h.dropped.Add(1)
		}
	}
	h.q[(h.head+h.n)%len(h.q)] = *e
	h.n++
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// grow doubles the queue up to hookQueue; a webhook that keeps up holds few
// events. h.mu is held.
func (h *Hook) grow() {
	q := make([]api.Event, min(max(2*len(h.q), 64), hookQueue))
	for i := range h.n {
		q[i] = h.q[(h.head+i)%len(h.q)]
	}
	h.q, h.head = q, 0
}

// take removes up to limit events from the queue, oldest first, with the
// number lost before them.
func (h *Hook) take(limit int) ([]api.Event, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := min(h.n, limit)
	out := make([]api.Event, k)
	for i := range k {
		j := (h.head + i) % len(h.q)
		out[i], h.q[j] = h.q[j], api.Event{}
	}
	if k > 0 {
		h.head = (h.head + k) % len(h.q)
		h.n -= k
	}
	lost := h.lost
	h.lost = 0
	return out, lost
}

// lose counts n events as lost: the next batch says so.
func (h *Hook) lose(n uint64) {
	h.mu.Lock()
	h.lost += n
	h.mu.Unlock()
}

// queued returns the number of events waiting.
func (h *Hook) queued() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// start runs the delivery goroutine until stop.
func (h *Hook) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		h.run(ctx)
	}()
}

// stop ends delivery; queued events and a batch being retried are dropped.
func (h *Hook) stop() {
	h.cancel()
	<-h.done
}

// run delivers batches until ctx ends. A batch the receiver refuses for
// good (a status outside 2xx that is not worth retrying: a redirect, a 4xx
// other than 408 and 429) is dropped, and its events, with the lost ones it
// reported, are counted in the lost of the next batch, so that the receiver
// learns it missed them and resyncs. The next batch waits a backoff that
// doubles while batches are refused, so a receiver that refuses everything
// gets a request per longest backoff, not a stream of them.
func (h *Hook) run(ctx context.Context) {
	var pause time.Duration // before the next batch, after a refused one
	refused := 0            // batches refused since the last accepted one
	for ctx.Err() == nil {
		if pause > 0 && !sleepCtx(ctx, pause) {
			return
		}
		batch, lost := h.take(hookBatch)
		if len(batch) == 0 && lost == 0 {
			select {
			case <-h.wake:
			case <-ctx.Done():
			}
			continue
		}
		body, err := json.Marshal(api.HookBatch{Webhook: h.cfg.Name, Lost: lost, Events: batch})
		if err != nil { // Event holds only strings, numbers and times
			h.log.Error("encode webhook batch", "err", err)
			continue
		}
		switch err := h.deliver(ctx, body, len(batch)); {
		case err == nil:
			if refused > 0 {
				h.log.Info("webhook accepts batches again; it was told of the events it refused", "refused_batches", refused, "lost", lost)
			}
			pause, refused = 0, 0
		case errors.Is(err, webhook.ErrRejected):
			h.lose(lost + uint64(len(batch)))
			refused++
			pause = min(max(2*pause, h.minBackoff()), h.maxBackoff())
			if skipped, ok := h.refusals.Allow(time.Now()); ok {
				h.log.Error("webhook refused a batch; its events are dropped and the next batch counts them as lost",
					"events", len(batch), "err", err, "refused_since_last_log", skipped)
			}
		}
	}
}

// sleepCtx waits d, and reports false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deliver posts body until the receiver accepts it (nil), refuses it for
// good (webhook.ErrRejected), or ctx ends (its error). A receiver that is
// down or failing delays the batch and those behind it, and loses none of
// them.
func (h *Hook) deliver(ctx context.Context, body []byte, events int) error {
	failing := false
	for {
		attempts, err := h.sender.Post(ctx, body)
		switch {
		case err == nil:
			h.failed.Add(uint64(attempts - 1))
			h.succeeded.Add(1)
			h.delivered.Add(uint64(events))
			if failing || attempts > 1 {
				h.log.Info("webhook delivered after retries", "events", events)
			}
			return nil
		case errors.Is(err, webhook.ErrRejected):
			h.failed.Add(uint64(attempts - 1))
			h.refused.Add(1)
			h.dropped.Add(uint64(events))
			return err
		}
		h.failed.Add(uint64(attempts))
		if ctx.Err() != nil {
			h.dropped.Add(uint64(events))
			return ctx.Err()
		}
		if !failing {
			h.log.Warn("webhook delivery failing; retrying until the receiver accepts", "events", events, "err", err)
			failing = true
		}
		sleepCtx(ctx, h.maxBackoff())
	}
}

func (h *Hook) minBackoff() time.Duration {
	if h.sender.MinBackoff > 0 {
		return h.sender.MinBackoff
	}
	return webhook.DefaultMinBackoff
}

func (h *Hook) maxBackoff() time.Duration {
	if h.sender.MaxBackoff > 0 {
		return h.sender.MaxBackoff
	}
	return webhook.DefaultMaxBackoff
}

// HookCounts are a webhook's counters since it started.
type HookCounts struct {
	Delivered, Dropped         uint64 // events
	Succeeded, Failed, Refused uint64 // requests
	Queued                     int    // events waiting for delivery
}

// Name returns the webhook's name.
func (h *Hook) Name() string { return h.cfg.Name }

// Counts returns the webhook's counters.
func (h *Hook) Counts() HookCounts {
	return HookCounts{Delivered: h.delivered.Load(), Dropped: h.dropped.Load(),
		Succeeded: h.succeeded.Load(), Failed: h.failed.Load(), Refused: h.refused.Load(), Queued: h.queued()}
}

// HookOptions are the delivery settings every event webhook shares.
type HookOptions struct {
	// MinBackoff and MaxBackoff bound the pause between attempts (0: the
	// defaults of package webhook).
	MinBackoff, MaxBackoff time.Duration
	// UserAgent is the User-Agent of the requests.
	UserAgent string
}

// HookSet is the daemon's running webhooks, fed by an event log. It is
// safe for concurrent use.
type HookSet struct {
	mu     sync.Mutex // one update at a time
	cur    atomic.Pointer[[]*Hook]
	opt    HookOptions
	log    *slog.Logger
	events *Log // offers its new events to the running hooks
}

// NewHookSet returns an empty set of webhooks that will take the events of
// events once [HookSet.Replace] gives it some.
func NewHookSet(events *Log, opt HookOptions, log *slog.Logger) *HookSet {
	return &HookSet{events: events, opt: opt, log: log}
}

// Prepare builds the hooks of cfg, reusing running ones whose settings did
// not change, so their queues carry over a reload. It starts nothing; ctx
// bounds the reading of their secrets.
func (s *HookSet) Prepare(ctx context.Context, cfg *config.Config) ([]*Hook, error) {
	var old []*Hook
	if p := s.cur.Load(); p != nil {
		old = *p
	}
	var next []*Hook
	for _, w := range cfg.Webhooks {
		h, err := newHook(ctx, w, &s.opt, s.log)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(old, func(o *Hook) bool { return o.key == h.key }); i >= 0 {
			h = old[i]
		}
		next = append(next, h)
	}
	return next, nil
}

// Replace makes next the running set: new hooks start, and hooks that are
// not in next stop.
func (s *HookSet) Replace(next []*Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []*Hook
	if p := s.cur.Load(); p != nil {
		old = *p
	}
	for _, h := range next {
		if h.done == nil {
			h.start()
		}
	}
	s.events.setHooks(next)
	s.cur.Store(&next)
	for _, h := range old {
		if !slices.Contains(next, h) {
			h.stop()
		}
	}
}

// StopAll stops every hook.
func (s *HookSet) StopAll() {
	s.Replace(nil)
}

// List returns the running hooks.
func (s *HookSet) List() []*Hook {
	if p := s.cur.Load(); p != nil {
		return *p
	}
	return nil
}
