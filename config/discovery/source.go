package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promsd "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

// Source is one discovery source of a pool: one entry of one of its
// "*_sd_configs" lists (or of "static_configs").
type Source struct {
	Key    string // the list it is in: "file_sd_configs", "static_configs", ...
	Index  int    // its position in that list
	Config promsd.Config
}

// Name is how the source is named in status, metrics and logs:
// "file_sd_configs[0]".
func (s Source) Name() string { return fmt.Sprintf("%s[%d]", s.Key, s.Index) }

// watchFailureWindow is how long a failure of a source that sends updates
// only on change (Kubernetes, Consul) counts: such a source retries within
// about half a minute while it cannot reach its server, and sends nothing
// when it recovers to an unchanged state.
const watchFailureWindow = 65 * time.Second

// source runs one Prometheus discoverer and keeps the target groups it sent
// last. Its state is guarded by mu; the discoverer and the goroutine reading
// its updates are its own.
type source struct {
	pool string
	spec Source
	mech string
	reg  *prometheus.Registry // the discoverer's own metrics: read for its failures

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	groups  map[string]*targetgroup.Group // by group source
	updates uint64
	started time.Time
	update  time.Time // last update received
	failed  time.Time // last failure seen
	failing time.Time // the first failure since the source last worked
	fails   uint64    // failures seen
	lastErr string
	counted float64 // the failure counters' sum when last read
}

// startSource starts spec's discoverer for pool. Updates are reported
// through changed; log records go to logger, and its errors are noted as
// the source's.
func startSource(ctx context.Context, pool string, spec Source, logger *slog.Logger, changed func()) *source {
	s := &source{pool: pool, spec: spec, mech: spec.Config.Name(), reg: prometheus.NewRegistry(),
		groups: map[string]*targetgroup.Group{}, started: time.Now(), done: make(chan struct{})}
	ctx, s.cancel = context.WithCancel(ctx)
	log := slog.New(&errorNoter{h: logger.Handler(), s: s}).With("pool", pool, "source", spec.Name())
	refresh := promsd.NewRefreshMetrics(s.reg)
	metrics := spec.Config.NewDiscovererMetrics(s.reg, refresh)
	if err := refresh.Register(); err == nil {
		_ = metrics.Register() // a failure only loses failure counts; updates still tell
	}
	d, err := spec.Config.NewDiscoverer(promsd.DiscovererOptions{Logger: log, Metrics: metrics, SetName: pool + "/" + spec.Name()})
	if err != nil {
		s.note(fmt.Sprintf("cannot start %s discovery: %v", s.mech, err))
		log.Error("discovery source cannot start", "err", err)
		close(s.done)
		return s
	}
	up := make(chan []*targetgroup.Group)
	go d.Run(ctx, up)
	go func() {
		defer close(s.done)
		for {
			select {
			case <-ctx.Done():
				return
			case tgs, ok := <-up:
				if !ok {
					<-ctx.Done() // a static source closes its channel once it has sent
					return
				}
				s.receive(tgs)
				changed()
			}
		}
	}()
	return s
}

// receive stores an update: a group replaces the group of the same source;
// an empty group removes it.
func (s *source) receive(tgs []*targetgroup.Group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range tgs {
		if g == nil {
			continue
		}
		if len(g.Targets) == 0 {
			delete(s.groups, g.Source)
			continue
		}
		s.groups[g.Source] = g
	}
	s.updates++
	s.update = time.Now()
}

// note records a failure with its reason.
func (s *source) note(msg string) { s.noteAt(msg, time.Now()) }

// noteAt records a failure at now.
func (s *source) noteAt(msg string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stateLocked(now) != "failing" {
		s.failing = now
	}
	s.failed = now
	s.fails++
	if msg != "" {
		s.lastErr = msg
	}
}

// pollFailures reads the discoverer's failure counters and notes a failure
// when they grew.
func (s *source) pollFailures() {
	mfs, err := s.reg.Gather()
	if err != nil {
		return
	}
	sum := 0.0
	for _, mf := range mfs {
		n := mf.GetName()
		if !strings.HasSuffix(n, "_failures_total") && !strings.HasSuffix(n, "_errors_total") {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	s.mu.Lock()
	grew := sum > s.counted
	s.counted = sum
	s.mu.Unlock()
	if grew {
		s.note("")
	}
}

// eachGroup calls fn for the source's groups in the order of their names,
// with the source's lock held.
func (s *source) eachGroup(fn func(g *targetgroup.Group)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.groups))
	for k := range s.groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fn(s.groups[k])
	}
}

// stateLocked tells whether the source works: "starting" before its first
// update or failure, "failing" while its last failure is newer than its last
// update, else "ok". The caller holds s.mu.
func (s *source) stateLocked(now time.Time) string {
	switch {
	case s.failed.IsZero() && s.update.IsZero():
		return "starting"
	case s.failed.After(s.update) && (refreshes(s.mech) || now.Sub(s.failed) < watchFailureWindow):
		return "failing"
	}
	return "ok"
}

// refreshes reports whether a mechanism sends its whole set on every
// successful refresh, so that a failure lasts until the next update.
func refreshes(mech string) bool {
	return mech != "kubernetes" && mech != "consul"
}

func (s *source) stop() {
	s.cancel()
}

// errorNoter passes log records on and notes those at error level as
// failures of its source, with their message and error.
type errorNoter struct {
	h slog.Handler
	s *source
}

func (e *errorNoter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || e.h.Enabled(ctx, l)
}

func (e *errorNoter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				msg += ": " + a.Value.String()
				return false
			}
			return true
		})
		e.s.note(msg)
	}
	if !e.h.Enabled(ctx, r.Level) {
		return nil
	}
	return e.h.Handle(ctx, r)
}

func (e *errorNoter) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorNoter{h: e.h.WithAttrs(as), s: e.s}
}

func (e *errorNoter) WithGroup(name string) slog.Handler {
	return &errorNoter{h: e.h.WithGroup(name), s: e.s}
}
