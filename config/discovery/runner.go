package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"

	"github.com/sondeprobe/sonde/probe/endpoint"
)

// Pool is what the runner follows for one pool.
type Pool struct {
	Name    string
	Sources []Source
	Relabel []*relabel.Config // applied to every discovered target
	Labels  labels.Labels     // the pool's own labels, under every target's
	Names   []Name            // host names the pool's files list
	Family  endpoint.Family   // the address families host names resolve to
}

// Name is a target a configuration file lists by host name.
type Name struct {
	Host string
	Port uint16 // 0: the check chooses
	// Seed is the lookup made when the configuration was loaded, if any:
	// the name is looked up again when its answer expires.
	Seed *endpoint.Resolution
}

// Options configure a [Runner].
type Options struct {
	// Logger receives the sources' and discoverers' messages.
	Logger *slog.Logger
	// Resolver looks host names up; default a [endpoint.DNSResolver].
	Resolver endpoint.Resolver
	// Changed is called, from a goroutine of the runner's and never twice
	// at once, when some pool's targets changed; its owner then calls
	// [Runner.Found] and applies them. ctx ends when the runner closes, and
	// when newer targets are found before the call returns — but not twice
	// in a row: the call after one cut short runs to its end, so targets
	// that change faster than they can be applied are still applied.
	Changed func(ctx context.Context)
	// Debounce is how long changes are gathered before they are relabeled;
	// default 200 ms.
	Debounce time.Duration
	// MaxTargets bounds the targets one pool may have; a pool whose sources
	// give more keeps the targets it had, and its sources are reported as
	// failing. Default 1<<24.
	MaxTargets int
	// RelabelBudget is how long relabeling n targets of one source may
	// take; a source over it keeps the targets it gave last and is
	// reported failing. Default [DefaultRelabelBudget].
	RelabelBudget func(n int) time.Duration
	// ReportApplied makes [Runner.Status] tell the targets of the version
	// of the pools' targets its owner last applied ([Runner.Applied]), and
	// newer ones as pending, so that the status and the running targets
	// change together; without it Status tells what was found last.
	ReportApplied bool
}

// Runner runs the discovery sources and host-name lookups of a set of
// pools. Its methods are safe for concurrent use.
//
// A source's goroutine stores what the source sends. The runner's worker
// goroutine relabels what changed, outside the runner's lock, one source
// at a time (within the relabel budget; given up for a newer update of the
// same source, or when the runner closes), puts each pool's targets
// together and publishes them under a new version; its notifier goroutine
// then calls Options.Changed.
type Runner struct {
	opt    Options
	ctx    context.Context
	cancel context.CancelFunc
	names  *names
	kick   chan struct{} // something may need relabeling
	calls  chan struct{} // a newer version waits for Changed
	wg     sync.WaitGroup

	mu      sync.Mutex
	pools   map[string]*poolState
	order   []string // pool names in configuration order
	version uint64   // bumped whenever some pool's targets change
	applied uint64   // the version the owner last applied (ReportApplied)
	stopped []*source
	call    struct {
		cancel  context.CancelFunc // of the Changed call running, if any
		version uint64             // the version it applies
		final   bool               // it follows a call cut short: it is not cut
	}
}

// poolState is one pool's sources and what they last gave. Guarded by the
// runner's mutex.
type poolState struct {
	spec    Pool
	sources []*source
	rl      *relabeler
	dirty   bool   // some source or name changed since the worker last looked
	found   Found  // the pool's targets, as last published
	over    string // why the pool's last targets were refused, if they were
	// latest is the status of the targets last put together; shown is what
	// Status tells (with ReportApplied, the latest the owner applied).
	latest, shown *poolView
}

// poolView is what the status tells of a pool's targets at one version.
type poolView struct {
	version    uint64
	at         time.Time
	targets    int
	unresolved []Unresolved
	kept       []int            // per source
	dropped    []map[string]int // per source
}

// NewRunner returns a runner with no pools; [Runner.Update] gives it some.
func NewRunner(opt Options) *Runner {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Resolver == nil {
		opt.Resolver = &endpoint.DNSResolver{}
	}
	if opt.Changed == nil {
		opt.Changed = func(context.Context) {}
	}
	if opt.Debounce <= 0 {
		opt.Debounce = 200 * time.Millisecond
	}
	if opt.MaxTargets <= 0 {
		opt.MaxTargets = 1 << 24
	}
	if opt.RelabelBudget == nil {
		opt.RelabelBudget = DefaultRelabelBudget
	}
	r := &Runner{opt: opt, pools: map[string]*poolState{}, kick: make(chan struct{}, 1), calls: make(chan struct{}, 1)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.names = newNames(r.namesChanged)
	r.wg.Go(func() { r.names.run(r.ctx, opt.Resolver) })
	r.wg.Go(r.work)
	r.wg.Go(r.notify)
	return r
}

// Update makes pools the pools the runner follows. A source whose pool
// keeps it unchanged (the same configuration, wherever it is in the pool's
// lists) goes on running with what it found; the others stop or start.
// It returns every pool's targets as known now, and their version: the
// targets of a source whose pool's relabel rules or labels changed are
// relabeled by the worker afterwards, and published as a newer version.
func (r *Runner) Update(pools []Pool) (map[string]Found, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*poolState, len(pools))
	r.order = r.order[:0]
	for _, p := range pools {
		r.order = append(r.order, p.Name)
		old := r.pools[p.Name]
		ps := &poolState{spec: p, dirty: true}
		if old != nil && sameRules(old.spec, p) {
			ps.rl = old.rl // the sources' relabeled targets still hold
		} else {
			ps.rl = newRelabeler(p.Labels, p.Relabel)
		}
		if old != nil {
			ps.found, ps.latest, ps.shown = old.found, old.latest, old.shown
		}
		for _, s := range p.Sources {
			var kept *source
			if old != nil {
				for i, os := range old.sources {
					if os != nil && reflect.DeepEqual(os.spec.Config, s.Config) {
						kept, old.sources[i] = os, nil
						break
					}
				}
			}
			if kept == nil {
				kept = startSource(r.ctx, p.Name, s, r.opt.Logger, func() { r.sourceChanged(p.Name) })
			}
			kept.spec = s
			ps.sources = append(ps.sources, kept)
		}
		for _, n := range p.Names {
			if n.Seed != nil {
				r.names.seed(n.Host, p.Family, *n.Seed)
			}
		}
		next[p.Name] = ps
	}
	for name, old := range r.pools {
		for _, s := range old.sources {
			if s != nil {
				s.stop()
				r.stopped = append(r.stopped, s)
			}
		}
		if _, ok := next[name]; !ok {
			r.names.use(name, nil, time.Now())
		}
	}
	r.pools = next
	for _, ps := range next {
		r.publish(ps)
	}
	r.version++
	r.wake()
	return r.foundLocked(), r.version
}

// sameRules reports whether two specs of a pool relabel alike.
func sameRules(a, b Pool) bool {
	if !labels.Equal(a.Labels, b.Labels) || len(a.Relabel) != len(b.Relabel) {
		return false
	}
	ja, err1 := json.Marshal(a.Relabel)
	jb, err2 := json.Marshal(b.Relabel)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// Found returns every pool's targets as last published, by pool name, and
// their version, which changes whenever one of them does. It never waits
// for relabeling. The targets are shared: callers must not change them.
func (r *Runner) Found() (map[string]Found, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.foundLocked(), r.version
}

func (r *Runner) foundLocked() map[string]Found {
	out := make(map[string]Found, len(r.pools))
	for name, ps := range r.pools {
		out[name] = ps.found
	}
	return out
}

// Applied tells the runner that its owner now runs the pools' targets of
// version (see Options.ReportApplied).
func (r *Runner) Applied(version uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = max(r.applied, version)
	for _, ps := range r.pools {
		if ps.latest != nil && ps.latest.version <= r.applied {
			ps.shown = ps.latest
		}
	}
}

// work relabels and publishes what changed, debounced, and reads the
// sources' failure counters every second.
func (r *Runner) work() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
			r.pollFailures()
		case <-r.kick:
			t := time.NewTimer(r.opt.Debounce)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			r.round()
		}
	}
}

// round relabels the sources of the dirty pools whose targets are out of
// date, and publishes the pools' targets.
func (r *Runner) round() {
	type job struct {
		ps   *poolState
		todo []*source
		rl   *relabeler
	}
	var jobs []job
	r.mu.Lock()
	for _, name := range r.order {
		ps := r.pools[name]
		if ps == nil || !ps.dirty {
			continue
		}
		ps.dirty = false
		j := job{ps: ps, rl: ps.rl}
		for _, s := range ps.sources {
			switch {
			case s.outdated(ps.rl):
				j.todo = append(j.todo, s)
			case s.refusedAgain(ps.rl):
				r.refuse(s, tried{s.version.Load(), ps.rl}, s.refusedMsg)
			}
		}
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	published := false
	for _, j := range jobs {
		for _, s := range j.todo {
			if !r.relabel(s, j.rl) {
				return // the runner closes
			}
		}
		r.mu.Lock()
		if r.pools[j.ps.spec.Name] == j.ps && r.publish(j.ps) {
			r.version++
			published = true
		}
		r.mu.Unlock()
	}
	if published {
		r.newVersion()
	}
}

// relabel relabels source s with rl and stores what it gave, if that can
// be used. It returns false when the runner closes.
func (r *Runner) relabel(s *source, rl *relabeler) bool {
	r.mu.Lock()
	mayAbandon := !s.superseded
	r.mu.Unlock()
	out, err := relabelSource(r.ctx, s, rl, r.opt.RelabelBudget, mayAbandon)
	r.mu.Lock()
	defer r.mu.Unlock()
	s.superseded = false
	var ref *refusal
	switch {
	case errors.Is(err, errStopped):
		return false
	case errors.Is(err, errAbandoned):
		s.superseded = true // the update that came marked the pool: it is relabeled again
	case errors.As(err, &ref):
		s.lastDropped = out.dropped
		r.refuse(s, tried{out.version, rl}, "update refused: "+ref.msg)
	case errors.Is(err, errOverBudget):
		r.refuse(s, tried{out.version, rl}, fmt.Sprintf("update refused: relabeling its %d targets took longer than %s", out.total, r.opt.RelabelBudget(out.total)))
	default:
		s.out, s.lastDropped = out, out.dropped
		s.mu.Lock()
		s.refusedVersion = 0
		s.mu.Unlock()
	}
	return true
}

// refuse reports that what source s gave (its content as, relabeled) is
// not used: the source fails with msg, and the log says how many targets
// it keeps. The caller holds r.mu.
func (r *Runner) refuse(s *source, as tried, msg string) {
	kept := 0
	if s.out != nil {
		kept = s.out.kept()
	}
	s.refusedAs, s.refusedMsg = as, msg
	s.mu.Lock()
	s.refused++
	s.refusedUpdates = s.updates
	s.refusedVersion = as.version
	s.mu.Unlock()
	s.note(msg)
	r.opt.Logger.Warn("discovery update refused", "pool", s.pool, "source", s.spec.Name(), "reason", msg, "kept_targets", kept)
}

// publish puts the pool's targets together from its host names and what
// its sources gave, and reports whether they changed. The caller holds
// r.mu, and bumps the version when they did.
func (r *Runner) publish(ps *poolState) bool {
	f, keys := r.assemble(ps)
	view := &poolView{version: r.version + 1, at: time.Now(), targets: f.Len(), unresolved: f.Unresolved,
		kept: make([]int, len(ps.sources)), dropped: make([]map[string]int, len(ps.sources))}
	for i, s := range ps.sources {
		if s.out != nil {
			view.kept[i] = s.out.kept()
		}
		view.dropped[i] = s.lastDropped
	}
	if n := f.Len() + len(f.Unresolved); n > r.opt.MaxTargets {
		ps.over = fmt.Sprintf("%d targets, more than the limit of %d; the pool keeps its previous targets", n, r.opt.MaxTargets)
		for _, s := range ps.sources {
			s.note(ps.over)
		}
		return false
	}
	ps.over = ""
	r.names.use(ps.spec.Name, keys, time.Now())
	pending := ps.shown != ps.latest
	same := ps.latest != nil && sameFound(ps.found, f)
	if same {
		view.version = ps.latest.version
	}
	ps.found, ps.latest = f, view
	if !r.opt.ReportApplied || ps.shown == nil || (same && !pending) || view.version <= r.applied {
		ps.shown = view
	}
	return !same
}

// assemble puts a pool's targets together: those of its host names, then
// those its sources gave by address, then those they gave by host name;
// host names looked up as the names table has them now. It returns them
// with the names the pool uses. The caller holds r.mu.
func (r *Runner) assemble(ps *poolState) (Found, map[nameKey]bool) {
	now := time.Now()
	var f Found
	keys := map[nameKey]bool{}
	byName := func(host string, port uint16, ls labels.Labels) {
		k := nameKey{host, ps.spec.Family}
		keys[k] = true
		st, ok := r.names.get(k)
		if ok && len(st.addrs) > 0 {
			for _, a := range st.addrs {
				f.Targets = append(f.Targets, Target{Addr: a, Port: port, Host: host, Labels: ls})
			}
			return
		}
		u := Unresolved{Host: host, Port: port, Labels: ls, Err: "not looked up yet", Since: now, Next: now}
		if ok {
			u.Since, u.Next = st.since, st.next
			if st.err != nil {
				u.Err = st.err.Error()
			}
		}
		f.Unresolved = append(f.Unresolved, u)
	}
	for _, n := range ps.spec.Names {
		byName(n.Host, n.Port, ps.spec.Labels)
	}
	for _, s := range ps.sources {
		if s.out != nil && len(s.out.targets.targets) > 0 {
			f.parts = append(f.parts, s.out.targets)
		}
	}
	for _, s := range ps.sources {
		if s.out != nil {
			for _, h := range s.out.hosts {
				byName(h.host, h.port, h.labels)
			}
		}
	}
	return f, keys
}

// sameFound reports whether two results hold the same targets in the same
// order, and the same unresolved names with the same errors. Parts that
// are the same, as a source's are from one look to the next while it sends
// nothing new, are not read.
func sameFound(a, b Found) bool {
	if a.Len() != b.Len() || len(a.Unresolved) != len(b.Unresolved) {
		return false
	}
	same := func(x, y *Target) bool {
		return x.Addr == y.Addr && x.Port == y.Port && x.Host == y.Host && labels.Equal(x.Labels, y.Labels)
	}
	if len(a.Targets) == len(b.Targets) && len(a.parts) == len(b.parts) && slices.EqualFunc(a.parts, b.parts, samePart) {
		if !slices.EqualFunc(a.Targets, b.Targets, func(x, y Target) bool { return same(&x, &y) }) {
			return false
		}
	} else {
		next, stop := iter.Pull(b.All())
		defer stop()
		for x := range a.All() {
			if y, _ := next(); !same(x, y) {
				return false
			}
		}
	}
	return slices.EqualFunc(a.Unresolved, b.Unresolved, func(x, y Unresolved) bool {
		return x.Host == y.Host && x.Port == y.Port && x.Err == y.Err && labels.Equal(x.Labels, y.Labels)
	})
}

// samePart reports whether two parts are one.
func samePart(a, b part) bool {
	return len(a.targets) == len(b.targets) && len(a.targets) > 0 && &a.targets[0] == &b.targets[0]
}

// wake asks the worker to look at the dirty pools.
func (r *Runner) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// newVersion hands a newly published version to the notifier, and cuts
// short a Changed call busy with an older one, unless that call follows
// one cut short already. The caller does not hold r.mu.
func (r *Runner) newVersion() {
	r.mu.Lock()
	if r.call.cancel != nil && !r.call.final && r.call.version < r.version {
		r.call.cancel()
	}
	r.mu.Unlock()
	select {
	case r.calls <- struct{}{}:
	default:
	}
}

// notify calls Options.Changed for every new version, one call at a time.
func (r *Runner) notify() {
	final := false
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.calls:
		}
		ctx, cancel := context.WithCancel(r.ctx)
		r.mu.Lock()
		r.call.cancel, r.call.version, r.call.final = cancel, r.version, final
		r.mu.Unlock()
		r.opt.Changed(ctx)
		r.mu.Lock()
		final = ctx.Err() != nil && r.ctx.Err() == nil // cut short: the next call runs to its end
		r.call.cancel = nil
		r.mu.Unlock()
		cancel()
	}
}

// sourceChanged marks a pool whose source sent an update.
func (r *Runner) sourceChanged(pool string) {
	r.mark([]string{pool})
}

// namesChanged marks the pools whose names' addresses changed.
func (r *Runner) namesChanged(pools []string) { r.mark(pools) }

func (r *Runner) mark(pools []string) {
	r.mu.Lock()
	for _, p := range pools {
		if ps := r.pools[p]; ps != nil {
			ps.dirty = true
		}
	}
	r.mu.Unlock()
	r.wake()
}

func (r *Runner) pollFailures() {
	r.mu.Lock()
	var all []*source
	for _, ps := range r.pools {
		all = append(all, ps.sources...)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.pollFailures()
	}
}

// Close stops every source and lookup, ends a relabeling or a Changed call
// in progress (its context) and waits for them. Its owner must not hold
// anything a Changed call waits for.
func (r *Runner) Close() error {
	r.cancel()
	r.mu.Lock()
	all := r.stopped
	for _, ps := range r.pools {
		all = append(all, ps.sources...)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for _, s := range all {
		select {
		case <-s.done:
		case <-timeout.C:
			return errors.New("discovery: sources still running 10 s after close")
		}
	}
	r.wg.Wait()
	return nil
}

// PoolStatus is how one pool's discovery is doing.
type PoolStatus struct {
	Pool       string         `json:"pool"`
	Sources    []SourceStatus `json:"sources"`
	Names      int            `json:"names"`                    // host names the pool's files list
	Targets    int            `json:"targets"`                  // targets found, sources and names together
	Unresolved []Unresolved   `json:"unresolved,omitempty"`     // host names without an address
	Refused    string         `json:"refused_reason,omitempty"` // why the pool kept its previous targets
	// PendingSince is, while newer targets than those the status tells
	// wait to be applied (Options.ReportApplied), when they were found.
	PendingSince *time.Time `json:"pending_since,omitempty"`
}

// SourceStatus is how one source is doing.
type SourceStatus struct {
	Source    string         `json:"source"`    // "file_sd_configs[0]"
	Mechanism string         `json:"mechanism"` // "file", "http", "dns", "kubernetes", "consul", "static"
	State     string         `json:"state"`     // "starting", "ok" or "failing"
	Targets   int            `json:"targets"`   // targets it gave, after relabeling
	Dropped   map[string]int `json:"dropped,omitempty"`
	Groups    int            `json:"groups"`
	Updates   uint64         `json:"updates"`
	Failures  uint64         `json:"failures"`
	// Refused counts the updates whose targets were not used (too many
	// invalid, relabeling over its budget): the source kept the targets it
	// gave before.
	Refused     uint64     `json:"refused"`
	LastUpdate  *time.Time `json:"last_update"`
	LastFailure *time.Time `json:"last_failure,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	// FailingSince is, while the source fails, when it started to: its
	// first failure since it last worked.
	FailingSince *time.Time `json:"failing_since,omitempty"`
}

// Status tells how every pool's discovery is doing, pools in
// configuration order. It never waits for relabeling.
func (r *Runner) Status() []PoolStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make([]PoolStatus, 0, len(r.order))
	for _, name := range r.order {
		ps := r.pools[name]
		if ps == nil {
			continue
		}
		view := ps.shown
		if view == nil {
			view = &poolView{}
		}
		st := PoolStatus{Pool: name, Names: len(ps.spec.Names), Targets: view.targets,
			Unresolved: r.freshUnresolved(ps, view.unresolved), Refused: ps.over}
		if ps.latest != view && ps.latest != nil {
			t := ps.latest.at
			st.PendingSince = &t
		}
		for i, s := range ps.sources {
			s.mu.Lock()
			ss := SourceStatus{Source: s.spec.Name(), Mechanism: s.mech, State: s.stateLocked(now),
				Groups: s.groups, Updates: s.updates, Failures: s.fails, Refused: s.refused, LastError: s.lastErr}
			if !s.update.IsZero() {
				t := s.update
				ss.LastUpdate = &t
			}
			if !s.failed.IsZero() {
				t := s.failed
				ss.LastFailure = &t
			}
			if ss.State == "failing" {
				t := s.failing
				ss.FailingSince = &t
			}
			s.mu.Unlock()
			if i < len(view.kept) {
				ss.Targets = view.kept[i]
				n := 0
				for _, c := range view.dropped[i] {
					n += c
				}
				if n > 0 {
					ss.Dropped = view.dropped[i]
				}
			}
			st.Sources = append(st.Sources, ss)
		}
		out = append(out, st)
	}
	return out
}

// freshUnresolved returns a pool's unresolved names with their lookups as
// the names table has them now: a lookup that fails again with the same
// error changes no target, so the pool's found targets keep the schedule of
// the lookup that made them.
func (r *Runner) freshUnresolved(ps *poolState, us []Unresolved) []Unresolved {
	if len(us) == 0 {
		return nil
	}
	out := slices.Clone(us)
	for i := range out {
		u := &out[i]
		if st, ok := r.names.get(nameKey{u.Host, ps.spec.Family}); ok && len(st.addrs) == 0 {
			u.Since, u.Next = st.since, st.next
			if st.err != nil {
				u.Err = st.err.Error()
			}
		}
	}
	return out
}
