package remediate

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
)

// Defaults of [Options] fields left zero.
const (
	DefaultPeriod  = time.Second
	DefaultRecords = 1000
)

// Options configure a [Manager].
type Options struct {
	// Logger receives every firing, withheld firing and failed action.
	Logger *slog.Logger
	// Registerer gets the manager's counters; nil registers none.
	Registerer prometheus.Registerer
	// Period is how often [Manager.Run] evaluates; default DefaultPeriod.
	Period time.Duration
	// Records is the number of recent firings and withheld firings kept
	// for the API; default DefaultRecords.
	Records int
	// Client posts webhooks; nil means the webhook package's default,
	// which follows no redirects.
	Client *http.Client
	// Act runs the action of a firing; nil runs the remediation's command
	// and webhook. Tests replace it.
	Act func(ctx context.Context, f *Firing) error
}

// Manager decides when remediations fire and runs their actions. It is
// safe for concurrent use: one mutex guards its state, which changes once
// per evaluation and per reload, never per probe.
type Manager struct {
	opt Options
	log *slog.Logger
	met *metrics

	ctx    context.Context // actions run under it; Close cancels it
	cancel context.CancelFunc
	loop   sync.WaitGroup // the evaluation loop
	acts   sync.WaitGroup // actions in flight

	mu      sync.Mutex
	view    *View
	rules   map[string]*rule
	records []Record // ring of the most recent records
	next    uint64   // sequence number of the next record
	epoch   uint64   // evaluations so far
	running bool     // the evaluation loop started
	closed  bool
}

// rule is one remediation's state across generations.
type rule struct {
	cfg    *config.Remediation
	act    *action
	budget budget
	inst   map[netip.Addr]*instance
}

// instance is what a rule remembers of one address while it is unhealthy
// in at least one of the rule's pools.
type instance struct {
	epoch     uint64 // last evaluation that saw it unhealthy somewhere
	fired     bool   // fired in this episode
	lastFired int64  // Nanotime of that firing
	withheld  string // why its due firing is withheld, as last recorded; "" while not withheld
	obs       observation
}

// New returns a manager with no remediations; [Manager.Use] gives it a
// configuration.
func New(opt Options) *Manager {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Period <= 0 {
		opt.Period = DefaultPeriod
	}
	if opt.Records <= 0 {
		opt.Records = DefaultRecords
	}
	m := &Manager{opt: opt, log: opt.Logger, met: newMetrics(opt.Registerer), rules: map[string]*rule{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.records = make([]Record, opt.Records)
	return m
}

// Plan is a configuration's remediations with their actions ready: webhook
// secrets read. Build it with [Manager.Plan] before switching to the
// configuration, so that a secret that cannot be read rejects it.
type Plan struct {
	rules []*config.Remediation
	acts  map[string]*action
}

// Plan prepares the remediations of cfg. A configuration that holds one
// shard of the targets cannot have remediations: its process sees only
// part of each pool, so neither a remediation's budget nor the multi-pool
// rule would hold; the error (a config.FieldError) says so. ctx bounds the
// reading of the webhooks' secrets.
func (m *Manager) Plan(ctx context.Context, cfg *config.Config) (*Plan, error) {
	if n := cfg.Shard.Shards(); n > 1 && len(cfg.Remediations) > 0 {
		return nil, &config.FieldError{Field: "remediation", Msg: fmt.Sprintf(
			"cannot run in shard %s: a shard sees part of every pool, so the budgets and the multi-pool rule would not hold; run the remediations from a sonde without -shard", cfg.Shard)}
	}
	p := &Plan{rules: cfg.Remediations, acts: map[string]*action{}}
	for _, r := range cfg.Remediations {
		a, err := newAction(ctx, r, m.opt.Client)
		if err != nil {
			return nil, err
		}
		p.acts[r.Name] = a
	}
	return p, nil
}

// Use switches to plan over view, the running configuration. A
// remediation that keeps its name keeps its budget and the state of its
// instances; one that is gone is forgotten. The first call with a
// remediation starts the evaluation loop, which runs every Options.Period
// on the view's clock until [Manager.Close].
func (m *Manager) Use(p *Plan, v *View) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	next := make(map[string]*rule, len(p.rules))
	for _, rc := range p.rules {
		r := m.rules[rc.Name]
		if r == nil {
			r = &rule{inst: map[netip.Addr]*instance{}}
		}
		r.cfg, r.act = rc, p.acts[rc.Name]
		next[rc.Name] = r
		m.met.add(rc.Name)
	}
	for name := range m.rules {
		if next[name] == nil {
			m.met.forget(name)
		}
	}
	m.rules, m.view = next, v
	if !m.running && len(next) > 0 {
		m.running = true
		m.loop.Go(func() { m.evaluateEvery(v.clock) })
	}
}

// evaluateEvery evaluates every period until Close.
func (m *Manager) evaluateEvery(clock scheduler.Clock) {
	t := time.NewTicker(m.opt.Period)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.Evaluate(clock.Nanotime())
		}
	}
}

// Close stops the evaluation loop and cancels the actions in flight (a
// command is killed), and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.loop.Wait()
	m.acts.Wait()
}

// observation is one address's health in a rule's pools at one evaluation.
type observation struct {
	addr      netip.Addr
	unhealthy []int   // positions in the rule's Pools where it is unhealthy
	healthy   []int   // positions where it is not (healthy, undecided or not yet probed)
	since     int64   // unhealthy in at least one pool since (the earliest change): its wait runs from it
	reason    string  // outcome of its most recent failed probe
	group     []entry // its targets in the rule's pools
}

// observe reads the state of one address's entries.
func (v *View) observe(group []entry) observation {
	o := observation{addr: group[0].addr, group: group}
	var lastProbe int64
	for i := 0; i < len(group); {
		j, sick, since := i, true, int64(0)
		for ; j < len(group) && group[j].pool == group[i].pool; j++ {
			st := v.status(group[j].id)
			if st.State != scheduler.Unhealthy || !st.Probed {
				sick = false
				continue
			}
			since = max(since, st.Since)
			if (o.reason == "" || st.LastProbe > lastProbe) && !st.LastOutcome.Healthy() {
				lastProbe, o.reason = st.LastProbe, st.LastOutcome.String()
			}
		}
		if sick {
			if len(o.unhealthy) == 0 || since < o.since {
				o.since = since
			}
			o.unhealthy = append(o.unhealthy, group[i].pool)
		} else {
			o.healthy = append(o.healthy, group[i].pool)
		}
		i = j
	}
	return o
}

// due is an instance whose firing is due at this evaluation.
type due struct {
	r     *rule
	inst  *instance
	start int64 // when its current wait began
}

// Evaluate looks at every instance of every remediation at Nanotime now,
// fires what is due within the budgets and records what is withheld. The
// evaluation loop calls it every period; tests call it with simulated times.
func (m *Manager) Evaluate(now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.view == nil {
		return
	}
	m.epoch++
	for _, name := range slices.Sorted(maps.Keys(m.rules)) {
		m.evaluateRule(m.rules[name], now)
	}
}

func (m *Manager) evaluateRule(r *rule, now int64) {
	after := int64(r.cfg.After)
	var ready []due
	eachInstance(m.view.byName[r.cfg.Name], func(group []entry) {
		o := m.view.observe(group)
		if len(o.unhealthy) == 0 {
			return // healthy everywhere: forgotten below
		}
		inst := r.inst[o.addr]
		if inst == nil {
			inst = &instance{}
			r.inst[o.addr] = inst
		}
		inst.epoch, inst.obs = m.epoch, o
		start := o.since
		if inst.fired {
			start = max(start, inst.lastFired)
		}
		if now-start < after {
			inst.withheld = "" // still waiting: withholding it later is news
			return
		}
		if len(o.healthy) > 0 {
			// R2: still healthy (or undecided) in another pool.
			m.withhold(r, inst, now, "multi_pool")
			return
		}
		// R2: one app unhealthy for "after" and every other one unhealthy
		// now; how long the others have been does not matter.
		ready = append(ready, due{r: r, inst: inst, start: start})
	})
	for addr, inst := range r.inst {
		if inst.epoch != m.epoch {
			delete(r.inst, addr) // recovered, or no longer in the pools: a new episode next time
		}
	}
	// The instance waiting longest goes first when the budget is short.
	slices.SortFunc(ready, func(a, b due) int {
		return cmp.Or(cmp.Compare(a.start, b.start), a.inst.obs.addr.Compare(b.inst.obs.addr))
	})
	lim := limits{r.cfg.MaxPerHour, r.cfg.MaxPer12h, r.cfg.MaxPerDay}
	for _, d := range ready {
		if reason := r.budget.exhausted(now, lim); reason != "" {
			m.withhold(r, d.inst, now, reason)
			continue
		}
		r.budget.take(now)
		d.inst.fired, d.inst.lastFired, d.inst.withheld = true, now, ""
		m.fire(r, d.inst, now)
	}
}

// poolNames returns the names of the rule's pools at positions.
func (r *rule) poolNames(positions []int) []string {
	out := make([]string, len(positions))
	for i, p := range positions {
		out[i] = r.cfg.Pools[p]
	}
	return out
}

// withhold withholds the instance's due firing for reason. It records,
// logs and counts the withholding when the reason is not the one recorded
// last while the firing stayed due: once per cause, not once per evaluation.
func (m *Manager) withhold(r *rule, inst *instance, now int64, reason string) {
	if inst.withheld == reason {
		return
	}
	inst.withheld = reason
	o := &inst.obs
	unhealthy := now - o.since
	rec := m.record(Record{
		Time:             scheduler.WallTime(m.view.clock, now),
		Remediation:      r.cfg.Name,
		Instance:         o.addr.String(),
		Action:           "withheld",
		Reason:           reason,
		UnhealthyPools:   r.poolNames(o.unhealthy),
		HealthyPools:     r.poolNames(o.healthy),
		UnhealthySeconds: time.Duration(unhealthy).Seconds(),
		LastOutcome:      o.reason,
	})
	m.met.withheld.WithLabelValues(r.cfg.Name, reason).Inc()
	m.log.Info("remediation withheld", "remediation", rec.Remediation, "instance", rec.Instance, "reason", reason,
		"unhealthy_pools", rec.UnhealthyPools, "healthy_pools", rec.HealthyPools, "unhealthy_for", time.Duration(unhealthy).Round(time.Millisecond))
}

// fire records a firing and starts its action.
func (m *Manager) fire(r *rule, inst *instance, now int64) {
	o := &inst.obs
	v := m.view
	f := &Firing{
		Time:             scheduler.WallTime(v.clock, now),
		Remediation:      r.cfg.Name,
		Instance:         o.addr.String(),
		Pools:            r.poolNames(o.unhealthy),
		UnhealthySince:   scheduler.WallTime(v.clock, o.since),
		UnhealthySeconds: time.Duration(now - o.since).Seconds(),
		Reason:           o.reason,
	}
	for _, e := range o.group {
		st := v.status(e.id)
		ts := TargetState{Pool: r.cfg.Pools[e.pool], Target: v.cfg.Targets[e.id].AddrPort().String(), LastOutcome: st.LastOutcome.String(), LastStatus: int(st.LastStatus)}
		if v.errs != nil {
			ts.Error = v.errs(e.id)
		}
		f.Targets = append(f.Targets, ts)
	}
	rec := m.record(Record{
		Time: f.Time, Remediation: f.Remediation, Instance: f.Instance, Action: "fired", Result: "running",
		UnhealthyPools: f.Pools, UnhealthySeconds: f.UnhealthySeconds, LastOutcome: f.Reason,
	})
	f.Seq = rec.Seq
	m.met.fired.WithLabelValues(r.cfg.Name).Inc()
	m.log.Info("remediation fired", "remediation", f.Remediation, "instance", f.Instance, "pools", f.Pools,
		"unhealthy_for", time.Duration(now-o.since).Round(time.Millisecond), "reason", f.Reason, "seq", f.Seq)
	act := m.opt.Act
	if act == nil {
		act = r.act.run
	}
	m.acts.Go(func() {
		err := act(m.ctx, f)
		m.finish(f, err)
	})
}

// finish records the result of a firing's action.
func (m *Manager) finish(f *Firing, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	result, msg := "success", ""
	if err != nil {
		result, msg = "failure", err.Error()
		m.met.failed.WithLabelValues(f.Remediation).Inc()
		m.log.Error("remediation action failed", "remediation", f.Remediation, "instance", f.Instance, "seq", f.Seq, "err", err)
	} else {
		m.log.Info("remediation action done", "remediation", f.Remediation, "instance", f.Instance, "seq", f.Seq)
	}
	if rec := &m.records[f.Seq%uint64(len(m.records))]; rec.Seq == f.Seq && rec.Action == "fired" {
		rec.Result, rec.Error = result, msg
	}
}

// record stores r with the next sequence number and returns it.
func (m *Manager) record(r Record) Record {
	r.Seq = m.next
	m.records[m.next%uint64(len(m.records))] = r
	m.next++
	return r
}

// Record is one firing or withheld firing, as /api/v1/remediations lists it.
type Record struct {
	Seq              uint64    `json:"seq"`
	Time             time.Time `json:"time"`
	Remediation      string    `json:"remediation"`
	Instance         string    `json:"instance"`
	Action           string    `json:"action"`           // fired or withheld
	Reason           string    `json:"reason,omitempty"` // withheld: max_per_hour, max_per_12h, max_per_day or multi_pool
	UnhealthyPools   []string  `json:"unhealthy_pools"`
	HealthyPools     []string  `json:"healthy_pools,omitempty"` // multi_pool: the pools where it is not unhealthy
	UnhealthySeconds float64   `json:"unhealthy_seconds"`       // since it turned unhealthy in the first of UnhealthyPools
	LastOutcome      string    `json:"last_outcome,omitempty"`
	Result           string    `json:"result,omitempty"` // fired: running, success or failure
	Error            string    `json:"error,omitempty"`  // why the action failed
}

// Status is the state of the remediations and the recent records.
type Status struct {
	Remediations []RemediationStatus `json:"remediations"`
	Records      []Record            `json:"records"` // oldest first
}

// Settings are a remediation's settings as the API and `sonde config
// check` show them.
type Settings struct {
	Name           string   `json:"name"`
	Pools          []string `json:"pools"`
	AfterSeconds   float64  `json:"after_seconds"`
	MaxPerHour     int      `json:"max_per_hour"` // 0: no cap
	MaxPer12h      int      `json:"max_per_12h"`
	MaxPerDay      int      `json:"max_per_day"`
	Command        []string `json:"command,omitempty"`
	WebhookURL     string   `json:"webhook_url,omitempty"`
	WebhookSigned  bool     `json:"webhook_signed,omitempty"` // a secret signs the webhook's body
	TimeoutSeconds float64  `json:"timeout_seconds"`
}

// SettingsOf returns r's settings.
func SettingsOf(r *config.Remediation) Settings {
	return Settings{
		Name: r.Name, Pools: r.Pools, AfterSeconds: r.After.Seconds(),
		MaxPerHour: r.MaxPerHour, MaxPer12h: r.MaxPer12h, MaxPerDay: r.MaxPerDay,
		Command: r.Command, WebhookURL: r.WebhookURL, WebhookSigned: r.WebhookSecretFile != "",
		TimeoutSeconds: r.Timeout.Seconds(),
	}
}

// RemediationStatus is one remediation: its settings, its budget's use and
// the instances it watches.
type RemediationStatus struct {
	Settings
	FiredLastHour int `json:"fired_last_hour"`
	// Fired12hPeriod counts the firings of the 12-hour period open now,
	// which ends at Period12hEnds (nil when none is open: no firing in the
	// last 12 hours).
	Fired12hPeriod int              `json:"fired_12h_period"`
	Period12hEnds  *time.Time       `json:"period_12h_ends,omitempty"`
	FiredLastDay   int              `json:"fired_last_day"`
	Instances      []InstanceStatus `json:"instances"` // unhealthy in at least one of its pools
}

// InstanceStatus is an instance a remediation watches.
type InstanceStatus struct {
	Instance         string     `json:"instance"`
	UnhealthyPools   []string   `json:"unhealthy_pools"`
	HealthyPools     []string   `json:"healthy_pools,omitempty"`
	UnhealthySeconds float64    `json:"unhealthy_seconds"`  // since it turned unhealthy in the first of UnhealthyPools
	Withheld         string     `json:"withheld,omitempty"` // why its due firing is withheld: a budget's reason or multi_pool
	LastFired        *time.Time `json:"last_fired,omitempty"`
}

// Status returns the remediations' state at Nanotime now and the recent
// records, oldest first.
func (m *Manager) Status(now int64) Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Remediations: []RemediationStatus{}, Records: []Record{}}
	for _, name := range slices.Sorted(maps.Keys(m.rules)) {
		r := m.rules[name]
		r.budget.prune(now)
		rs := RemediationStatus{
			Settings:      SettingsOf(r.cfg),
			FiredLastHour: r.budget.used(now, hourSpan), FiredLastDay: r.budget.used(now, daySpan),
			Instances: []InstanceStatus{},
		}
		if n, ends := r.budget.periodUsed(now); n > 0 && m.view != nil {
			t := scheduler.WallTime(m.view.clock, ends)
			rs.Fired12hPeriod, rs.Period12hEnds = n, &t
		}
		for _, addr := range slices.SortedFunc(maps.Keys(r.inst), netip.Addr.Compare) {
			inst := r.inst[addr]
			is := InstanceStatus{
				Instance: addr.String(), UnhealthyPools: r.poolNames(inst.obs.unhealthy), HealthyPools: r.poolNames(inst.obs.healthy),
				UnhealthySeconds: time.Duration(now - inst.obs.since).Seconds(), Withheld: inst.withheld,
			}
			if inst.fired && m.view != nil {
				t := scheduler.WallTime(m.view.clock, inst.lastFired)
				is.LastFired = &t
			}
			rs.Instances = append(rs.Instances, is)
		}
		st.Remediations = append(st.Remediations, rs)
	}
	first := uint64(0)
	if n := uint64(len(m.records)); m.next > n {
		first = m.next - n
	}
	for s := first; s < m.next; s++ {
		st.Records = append(st.Records, m.records[s%uint64(len(m.records))])
	}
	return st
}

// metrics are the manager's counters.
type metrics struct {
	fired, failed, withheld *prometheus.CounterVec
}

// withheldReasons are the label values of sonde_remediation_withheld_total.
var withheldReasons = []string{"max_per_hour", "max_per_12h", "max_per_day", "multi_pool"}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_remediation_firings_total",
			Help: "Remediation actions started, by remediation (R1); a failed action counts too.",
		}, []string{"remediation"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_remediation_failed_firings_total",
			Help: "Remediation actions whose command or webhook failed, by remediation.",
		}, []string{"remediation"}),
		withheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sonde_remediation_withheld_total",
			Help: "Remediation firings withheld, by remediation and reason: max_per_hour, max_per_12h, max_per_day (budgets), multi_pool (the instance is not unhealthy in every pool, R2).",
		}, []string{"remediation", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.fired, m.failed, m.withheld)
	}
	return m
}

// add creates the series of remediation name at zero.
func (m *metrics) add(name string) {
	m.fired.WithLabelValues(name)
	m.failed.WithLabelValues(name)
	for _, r := range withheldReasons {
		m.withheld.WithLabelValues(name, r)
	}
}

// forget deletes the series of a remediation that is gone.
func (m *metrics) forget(name string) {
	l := prometheus.Labels{"remediation": name}
	m.fired.DeletePartialMatch(l)
	m.failed.DeletePartialMatch(l)
	m.withheld.DeletePartialMatch(l)
}
