package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

// Source is one discovery source of a pool: one entry of one of its
// "*_sd_configs" lists (or of "static_configs").
type Source struct {
	Key    string // the list it is in: "file_sd_configs", "static_configs", ...
	Index  int    // its position in that list
	Config SourceConfig
}

// Name is how the source is named in status, metrics and logs:
// "file_sd_configs[0]".
func (s Source) Name() string { return fmt.Sprintf("%s[%d]", s.Key, s.Index) }

// watchFailureWindow is how long a failure of a source that sends updates
// only on change (Kubernetes, Consul) counts: such a source retries within
// about half a minute while it cannot reach its server, and sends nothing
// when it recovers to an unchanged state.
const watchFailureWindow = 65 * time.Second

// source runs one discovery source and keeps what it sent last, as chunks.
// Its state is guarded by mu; the feed and the goroutine reading a
// Prometheus discoverer's updates are its own. out and superseded belong
// to the runner, under the runner's mutex.
type source struct {
	pool string
	spec Source
	mech string
	reg  *prometheus.Registry // a Prometheus discoverer's own metrics: read for its failures

	cancel context.CancelFunc
	done   chan struct{}
	// version counts the changes of its content; the runner's relabeling
	// of the source reads it to tell that a newer update came meanwhile.
	version atomic.Uint64

	mu      sync.Mutex
	chunks  map[string]*chunk // by key: a file, an answer's URL, a group's source
	groups  int               // in chunks
	updates uint64
	started time.Time
	update  time.Time // last update received
	failed  time.Time // last failure seen
	failing time.Time // the first failure since the source last worked
	fails   uint64    // failures seen
	refused uint64    // updates whose targets were refused (see relabelSource)
	lastErr string
	counted float64 // the failure counters' sum when last read

	out         *relabeled     // what its last accepted relabeling gave
	lastDropped map[string]int // the targets its last relabeling dropped, by reason
	superseded  bool           // its last relabeling was given up for a newer update
	// Its last refused relabeling: of what content, with which rules, why,
	// and the updates it had received then. The same content given again
	// is refused again without relabeling.
	refusedAs      tried
	refusedMsg     string
	refusedUpdates uint64
	// refusedVersion, guarded by mu, is the content version whose last
	// relabeling was refused, 0 once one is accepted: while the source
	// gives that content again it is failing, also before the runner
	// refuses it again.
	refusedVersion uint64
}

// tried is a relabeling of one version of a source's content with one set
// of rules.
type tried struct {
	version uint64
	rl      *relabeler
}

// outdated reports whether the source's content needs relabeling with rl:
// neither its last accepted relabeling nor its last refused one is of its
// content now with rl. The caller holds the runner's mutex.
func (s *source) outdated(rl *relabeler) bool {
	now := tried{s.version.Load(), rl}
	return (s.out == nil || tried{s.out.version, s.out.rl} != now) && s.refusedAs != now
}

// refusedAgain reports whether the source has given again the content
// whose relabeling with rl was refused. The caller holds the runner's
// mutex.
func (s *source) refusedAgain(rl *relabeler) bool {
	if s.refusedAs != (tried{s.version.Load(), rl}) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates > s.refusedUpdates
}

// feed is what a source runs: it reads the source's targets and sends them
// to out until ctx ends.
type feed interface {
	run(ctx context.Context, out feedOut)
}

// feedOut receives what a feed reads.
type feedOut interface {
	// send stores an update: chunks by key, each replacing the chunk of
	// its key; a nil chunk removes its key.
	send(up map[string]*chunk)
	// fail records a failure with its reason.
	fail(msg string)
}

// startSource starts spec's discovery for pool: sonde's own reader for
// file_sd and http_sd (bounded, streamed, see fileFeed and httpFeed), a
// Prometheus discoverer for the others. Updates are reported through
// changed; log records go to logger, and its errors are noted as the
// source's.
func startSource(ctx context.Context, pool string, spec Source, logger *slog.Logger, changed func()) *source {
	base := logger
	s := &source{pool: pool, spec: spec, mech: spec.Config.Mechanism(), chunks: map[string]*chunk{},
		started: time.Now(), done: make(chan struct{})}
	ctx, s.cancel = context.WithCancel(ctx)
	log := slog.New(&errorNoter{h: logger.Handler(), s: s}).With("pool", pool, "source", spec.Name())
	f, err := s.newFeed(spec, log, base)
	if err != nil {
		s.note(fmt.Sprintf("cannot start %s discovery: %v", s.mech, err))
		log.Error("discovery source cannot start", "err", err)
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		f.run(ctx, sourceSink{s: s, changed: changed, log: log})
	}()
	return s
}

// newFeed returns the feed of spec: log is the source's logger, base the
// runner's.
func (s *source) newFeed(spec Source, log, base *slog.Logger) (feed, error) {
	switch c := spec.Config.(type) {
	case *FileSD:
		return &fileFeed{cfg: c}, nil
	case *HTTPSD:
		return newHTTPFeed(c)
	case *StaticSD:
		return staticFeed{c.Groups}, nil
	case DiscovererConfig:
		s.reg = prometheus.NewRegistry()
		d, err := c.NewDiscoverer(DiscovererOptions{Logger: log, ClientLogger: base, Registerer: s.reg, SetName: s.pool + "/" + spec.Name()})
		if err != nil {
			return nil, err
		}
		return promFeed{d}, nil
	}
	return nil, fmt.Errorf("%T is not a configuration the runner can run", spec.Config)
}

// promFeed runs a Prometheus discoverer, each of its groups a chunk.
type promFeed struct{ d Discoverer }

func (p promFeed) run(ctx context.Context, out feedOut) {
	up := make(chan []*targetgroup.Group)
	go p.d.Run(ctx, up)
	for {
		select {
		case <-ctx.Done():
			return
		case tgs, ok := <-up:
			if !ok {
				<-ctx.Done() // a static source closes its channel once it has sent
				return
			}
			m := make(map[string]*chunk, len(tgs))
			for _, g := range tgs {
				if g == nil {
					continue
				}
				if len(g.Targets) == 0 {
					m[g.Source] = nil
					continue
				}
				m[g.Source] = chunkOf(g)
			}
			out.send(m)
		}
	}
}

// staticFeed sends static groups once, each group a chunk.
type staticFeed struct{ groups []*targetgroup.Group }

func (f staticFeed) run(ctx context.Context, out feedOut) {
	m := make(map[string]*chunk, len(f.groups))
	for _, g := range f.groups {
		if len(g.Targets) > 0 {
			m[g.Source] = chunkOf(g)
		}
	}
	out.send(m)
	<-ctx.Done()
}

// sourceSink is a source's feedOut: updates are stored and reported
// through changed, failures noted and logged.
type sourceSink struct {
	s       *source
	changed func()
	log     *slog.Logger
}

func (o sourceSink) send(up map[string]*chunk) {
	o.s.receive(up)
	o.changed()
}

func (o sourceSink) fail(msg string) {
	o.s.note(msg)
	o.log.Warn("discovery source failed", "err", msg)
}

// receive stores an update. Its content changes only when some chunk
// does: a file read again, or an HTTP SD answer given again, as it was is
// not relabeled again.
func (s *source) receive(up map[string]*chunk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for k, c := range up {
		old := s.chunks[k]
		switch {
		case c == nil && old == nil:
			continue
		case c != nil && old != nil && c.equal(old):
			continue
		case old != nil:
			s.groups -= old.groups
		}
		changed = true
		if c == nil {
			delete(s.chunks, k)
			continue
		}
		s.chunks[k] = c
		s.groups += c.groups
	}
	s.updates++
	s.update = time.Now()
	if changed || s.updates == 1 {
		s.version.Add(1)
	}
}

// snapshot returns the source's chunks in the order of their keys, the
// version they are of, and their numbers of targets and groups.
func (s *source) snapshot() (cs []*chunk, version uint64, targets, groups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.chunks))
	for k := range s.chunks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cs = make([]*chunk, len(keys))
	for i, k := range keys {
		c := s.chunks[k]
		cs[i] = c
		targets += c.targets
		groups += c.groups
	}
	return cs, s.version.Load(), targets, groups
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
	if s.reg == nil {
		return // sonde's own feeds note their failures themselves
	}
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

// stateLocked tells whether the source works: "starting" before its first
// update or failure, "failing" while its last failure is newer than its last
// update, else "ok". The caller holds s.mu.
func (s *source) stateLocked(now time.Time) string {
	switch {
	case s.failed.IsZero() && s.update.IsZero():
		return "starting"
	case s.refusedVersion != 0 && s.refusedVersion == s.version.Load():
		return "failing"
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
