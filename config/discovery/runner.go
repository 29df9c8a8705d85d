package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"k8s.io/klog/v2"
)

// Pool is what the runner follows for one pool.
type Pool struct {
	Name    string
	Sources []Source
	Relabel []*relabel.Config // applied to every discovered target
	Labels  labels.Labels     // the pool's own labels, under every target's
	Names   []Name            // host names the pool's files list
	Family  Family            // the address families host names resolve to
}

// Name is a target a configuration file lists by host name.
type Name struct {
	Host string
	Port uint16 // 0: the check chooses
	// Seed is the lookup made when the configuration was loaded, if any:
	// the name is looked up again when its answer expires.
	Seed *Resolution
}

// Options configure a [Runner].
type Options struct {
	// Logger receives the sources' and discoverers' messages.
	Logger *slog.Logger
	// Resolver looks host names up; default a [DNSResolver].
	Resolver Resolver
	// Changed is called, from the runner's goroutine and never twice at
	// once, when some pool's targets may have changed; its owner then
	// calls [Runner.Found]. Changes are gathered for Debounce first.
	Changed func()
	// Debounce is how long changes are gathered before Changed; default
	// 200 ms.
	Debounce time.Duration
	// MaxTargets bounds the targets one pool may have; a pool whose sources
	// give more keeps the targets it had, and its sources are reported as
	// failing. Default 1<<24.
	MaxTargets int
}

// Runner runs the discovery sources and host-name lookups of a set of
// pools. Its methods are safe for concurrent use.
type Runner struct {
	opt    Options
	ctx    context.Context
	cancel context.CancelFunc
	names  *names
	notify chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	pools   map[string]*poolState
	order   []string // pool names in configuration order
	version uint64   // bumped whenever some pool's targets change
	stopped []*source
}

// poolState is one pool's sources and what they last gave. Guarded by the
// runner's mutex.
type poolState struct {
	spec    Pool
	sources []*source
	rl      *relabeler
	dirty   bool
	found   Found
	kept    []int            // per source, targets it gave
	dropped []map[string]int // per source, targets dropped by reason ("relabel" for the rules)
	over    string           // why the pool's last computed targets were refused, if they were
}

// klogOnce routes the Kubernetes client's log to the first runner's logger.
var klogOnce sync.Once

// NewRunner returns a runner with no pools; [Runner.Update] gives it some.
func NewRunner(opt Options) *Runner {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Resolver == nil {
		opt.Resolver = &DNSResolver{}
	}
	if opt.Changed == nil {
		opt.Changed = func() {}
	}
	if opt.Debounce <= 0 {
		opt.Debounce = 200 * time.Millisecond
	}
	if opt.MaxTargets <= 0 {
		opt.MaxTargets = 1 << 24
	}
	r := &Runner{opt: opt, pools: map[string]*poolState{}, notify: make(chan struct{}, 1)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.names = newNames(r.namesChanged)
	r.wg.Go(func() { r.names.run(r.ctx, opt.Resolver) })
	r.wg.Go(r.loop)
	return r
}

// Update makes pools the pools the runner follows. A source whose pool
// keeps it unchanged (the same configuration, wherever it is in the pool's
// lists) goes on running with what it found; the others stop or start.
// It returns every pool's targets as known now.
func (r *Runner) Update(pools []Pool) (map[string]Found, uint64) {
	if slices.ContainsFunc(pools, func(p Pool) bool {
		return slices.ContainsFunc(p.Sources, func(s Source) bool { return s.Config.Name() == "kubernetes" })
	}) {
		klogOnce.Do(func() { klog.SetSlogLogger(r.opt.Logger.With("component", "kubernetes-client")) })
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*poolState, len(pools))
	r.order = r.order[:0]
	for _, p := range pools {
		r.order = append(r.order, p.Name)
		old := r.pools[p.Name]
		ps := &poolState{spec: p, rl: newRelabeler(p.Labels, p.Relabel), dirty: true}
		if old != nil {
			ps.found = old.found
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
	r.version++
	return r.foundLocked(), r.version
}

// Found returns every pool's targets as known now, by pool name, and a
// version that changes whenever one of them does. The slices are shared:
// callers must not change them.
func (r *Runner) Found() (map[string]Found, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.foundLocked(), r.version
}

func (r *Runner) foundLocked() map[string]Found {
	out := make(map[string]Found, len(r.pools))
	for name, ps := range r.pools {
		if ps.dirty {
			r.compute(ps)
		}
		out[name] = ps.found
	}
	return out
}

// compute turns the pool's names and its sources' groups into its targets.
func (r *Runner) compute(ps *poolState) {
	ps.dirty = false
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
	ps.kept = make([]int, len(ps.sources))
	ps.dropped = make([]map[string]int, len(ps.sources))
	for i, s := range ps.sources {
		drops := map[string]int{}
		before := len(f.Targets) + len(f.Unresolved)
		s.eachGroup(func(g *targetgroup.Group) {
			for _, tl := range g.Targets {
				ep, ls, ok, reason := ps.rl.process(g.Labels, tl)
				switch {
				case !ok && reason == "":
					drops["relabel"]++
				case !ok:
					drops[reason]++
				case ep.host != "":
					byName(ep.host, ep.port, ls)
				default:
					f.Targets = append(f.Targets, Target{Addr: ep.addr, Port: ep.port, Labels: ls})
				}
			}
		})
		ps.kept[i] = len(f.Targets) + len(f.Unresolved) - before
		ps.dropped[i] = drops
	}
	if n := len(f.Targets) + len(f.Unresolved); n > r.opt.MaxTargets {
		ps.over = fmt.Sprintf("%d targets, more than the limit of %d; the pool keeps its previous targets", n, r.opt.MaxTargets)
		for _, s := range ps.sources {
			s.note(ps.over)
		}
		return
	}
	ps.over = ""
	r.names.use(ps.spec.Name, keys, now)
	if !sameFound(ps.found, f) {
		ps.found = f
		r.version++
	}
}

// sameFound reports whether two results hold the same targets in the same
// order, and the same unresolved names with the same errors.
func sameFound(a, b Found) bool {
	return slices.EqualFunc(a.Targets, b.Targets, func(x, y Target) bool {
		return x.Addr == y.Addr && x.Port == y.Port && x.Host == y.Host && labels.Equal(x.Labels, y.Labels)
	}) && slices.EqualFunc(a.Unresolved, b.Unresolved, func(x, y Unresolved) bool {
		return x.Host == y.Host && x.Port == y.Port && x.Err == y.Err && labels.Equal(x.Labels, y.Labels)
	})
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
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// loop tells the owner of changes, debounced, and reads the sources'
// failure counters every second.
func (r *Runner) loop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
			r.pollFailures()
		case <-r.notify:
			t := time.NewTimer(r.opt.Debounce)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			r.opt.Changed()
		}
	}
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

// Close stops every source and lookup and waits for them.
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
}

// SourceStatus is how one source is doing.
type SourceStatus struct {
	Source      string         `json:"source"`    // "file_sd_configs[0]"
	Mechanism   string         `json:"mechanism"` // "file", "http", "dns", "kubernetes", "consul", "static"
	State       string         `json:"state"`     // "starting", "ok" or "failing"
	Targets     int            `json:"targets"`   // targets it gave, after relabeling
	Dropped     map[string]int `json:"dropped,omitempty"`
	Groups      int            `json:"groups"`
	Updates     uint64         `json:"updates"`
	Failures    uint64         `json:"failures"`
	LastUpdate  *time.Time     `json:"last_update"`
	LastFailure *time.Time     `json:"last_failure,omitempty"`
	LastError   string         `json:"last_error,omitempty"`
	// FailingSince is, while the source fails, when it started to: its
	// first failure since it last worked.
	FailingSince *time.Time `json:"failing_since,omitempty"`
}

// Status tells how every pool's discovery is doing, pools in
// configuration order.
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
		if ps.dirty {
			r.compute(ps)
		}
		st := PoolStatus{Pool: name, Names: len(ps.spec.Names), Targets: len(ps.found.Targets),
			Unresolved: r.freshUnresolved(ps), Refused: ps.over}
		for i, s := range ps.sources {
			s.mu.Lock()
			ss := SourceStatus{Source: s.spec.Name(), Mechanism: s.mech, State: s.stateLocked(now),
				Groups: len(s.groups), Updates: s.updates, Failures: s.fails, LastError: s.lastErr}
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
			if i < len(ps.kept) {
				ss.Targets = ps.kept[i]
				n := 0
				for _, c := range ps.dropped[i] {
					n += c
				}
				if n > 0 {
					ss.Dropped = ps.dropped[i]
				}
			}
			st.Sources = append(st.Sources, ss)
		}
		out = append(out, st)
	}
	return out
}

// freshUnresolved returns the pool's unresolved names with their lookups as
// the names table has them now: a lookup that fails again with the same
// error changes no target, so the pool's found targets keep the schedule of
// the lookup that made them.
func (r *Runner) freshUnresolved(ps *poolState) []Unresolved {
	if len(ps.found.Unresolved) == 0 {
		return nil
	}
	out := slices.Clone(ps.found.Unresolved)
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
