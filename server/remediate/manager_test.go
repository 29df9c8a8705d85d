package remediate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// harness runs a Manager over a config whose targets' states the test sets,
// on a simulated clock, with actions that only record their firing.
type harness struct {
	t     *testing.T
	m     *Manager
	cfg   *config.Config
	clock *scheduler.SimClock
	reg   *prometheus.Registry
	mu    sync.Mutex
	st    map[uint32]scheduler.TargetStatus
	fired []*Firing
	fail  error // returned by every action
}

func newHarness(t *testing.T, yaml string) *harness {
	t.Helper()
	h := &harness{t: t, clock: scheduler.NewSimClock(time.Unix(1_700_000_000, 0)), reg: prometheus.NewRegistry(), st: map[uint32]scheduler.TargetStatus{}}
	h.m = New(Options{Registerer: h.reg, Period: time.Hour, Act: func(_ context.Context, f *Firing) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.fired = append(h.fired, f)
		return h.fail
	}})
	t.Cleanup(h.m.Close)
	h.load(yaml)
	return h
}

// load switches the manager to a config, as a reload does.
func (h *harness) load(yaml string) {
	h.t.Helper()
	cfg, err := config.Parse([]byte(yaml), "", config.LoadOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.cfg = cfg
	p, err := h.m.Plan(h.t.Context(), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.m.Use(p, NewView(cfg, h.clock, h.status, func(uint32) string { return "refused" }))
}

func (h *harness) status(id uint32) scheduler.TargetStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st[id]
}

// id returns the id of the target at ep ("address:port") in pool.
func (h *harness) id(pool, ep string) uint32 {
	h.t.Helper()
	for _, p := range h.cfg.Pools {
		if p.Name != pool {
			continue
		}
		for _, id := range p.Members {
			if h.cfg.Targets[id].AddrPort().String() == ep {
				return id
			}
		}
	}
	h.t.Fatalf("no target %s in pool %s", ep, pool)
	return 0
}

// set gives the target at ep in pool a state, entered at the current time.
func (h *harness) set(pool, ep string, state scheduler.State) {
	h.t.Helper()
	id := h.id(pool, ep)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Nanotime()
	h.st[id] = scheduler.TargetStatus{State: state, Probed: true, Since: now, LastProbe: now, LastOutcome: map[bool]probe.Outcome{true: probe.Refused, false: probe.Success}[state == scheduler.Unhealthy]}
}

// at moves the clock to d after its start and evaluates.
func (h *harness) at(d time.Duration) {
	h.clock.Set(int64(d))
	h.m.Evaluate(h.clock.Nanotime())
	h.m.acts.Wait()
}

// firedFor returns the instances fired so far, in order, without the
// 10.0.0 of the tests' addresses.
func (h *harness) firedFor() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Actions run concurrently: their firings' order is their sequence.
	slices.SortFunc(h.fired, func(a, b *Firing) int { return int(a.Seq) - int(b.Seq) })
	var out []string
	for _, f := range h.fired {
		out = append(out, strings.TrimPrefix(f.Instance, "10.0.0"))
	}
	return out
}

// withheld returns "instance reason" for every withheld record, in order,
// without the 10.0.0 of the tests' addresses.
func (h *harness) withheld() []string {
	var out []string
	for _, r := range h.m.Status(h.clock.Nanotime()).Records {
		if r.Action == "withheld" {
			out = append(out, strings.TrimPrefix(r.Instance, "10.0.0")+" "+r.Reason)
		}
	}
	return out
}

func (h *harness) expect(fired, withheld []string) {
	h.t.Helper()
	if diff := cmp.Diff(fired, h.firedFor()); diff != "" {
		h.t.Fatalf("at %v: fired (-want +got):\n%s", time.Duration(h.clock.Nanotime()), diff)
	}
	if diff := cmp.Diff(withheld, h.withheld()); diff != "" {
		h.t.Fatalf("at %v: withheld (-want +got):\n%s", time.Duration(h.clock.Nanotime()), diff)
	}
}

const twoPools = `checks:
  app: {preset: appservice, path: /health}
pools:
  - {name: app-a, check: app, targets: ["10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"]}
  - {name: app-b, check: app, targets: ["10.0.0.1:8082", "10.0.0.3:8082"]}
remediation:
  - name: plan-a
    pools: [app-a, app-b]
    after: 1m
    command: ["/bin/true"]
`

// TestFireAfterAndHourBudget is R1 on a simulated clock: an instance
// unhealthy for "after" in all its pools fires once; the next due instance
// is withheld by max_per_hour (recorded once, not at every evaluation) and
// fires when the hour has passed; an instance that stays unhealthy fires
// again one "after" after its firing, within the budget.
func TestFireAfterAndHourBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy) // only in app-a
	h.at(59 * time.Second)
	h.expect(nil, nil)
	h.at(time.Minute)
	h.expect([]string{".2"}, nil)
	f := h.fired[0]
	if f.Remediation != "plan-a" || !slices.Equal(f.Pools, []string{"app-a"}) || f.UnhealthySeconds != 60 || f.Reason != "refused" ||
		len(f.Targets) != 1 || f.Targets[0].Target != "10.0.0.2:8081" || f.Targets[0].Error != "refused" {
		t.Fatalf("firing %+v", f)
	}

	// Still unhealthy: due again at 2m, but the hour's one firing is spent.
	h.clock.Set(int64(5 * time.Minute))
	h.set("app-a", "10.0.0.1:8081", scheduler.Unhealthy)
	h.set("app-b", "10.0.0.1:8082", scheduler.Unhealthy)
	h.at(6*time.Minute - 1)
	h.expect([]string{".2"}, []string{".2 max_per_hour"})
	h.at(6 * time.Minute)
	h.expect([]string{".2"}, []string{".2 max_per_hour", ".1 max_per_hour"})
	h.at(30 * time.Minute) // recorded once, not at every evaluation
	h.expect([]string{".2"}, []string{".2 max_per_hour", ".1 max_per_hour"})
	// The hour since the first firing ends: the instance waiting longest
	// (.2, due again since 2m) goes first.
	h.at(61 * time.Minute)
	h.expect([]string{".2", ".2"}, []string{".2 max_per_hour", ".1 max_per_hour"})
	// .1 waited longest now. Its firing is the third of the day: .2 is
	// withheld by the day's cap, which frees a slot later than the hour's.
	h.at(121 * time.Minute)
	h.expect([]string{".2", ".2", ".1"}, []string{".2 max_per_hour", ".1 max_per_hour", ".2 max_per_day"})
	h.at(181 * time.Minute)
	h.expect([]string{".2", ".2", ".1"}, []string{".2 max_per_hour", ".1 max_per_hour", ".2 max_per_day", ".1 max_per_day"})
	// The first firing leaves the 24 h window.
	h.at(24*time.Hour + time.Minute)
	h.expect([]string{".2", ".2", ".1", ".2"}, []string{".2 max_per_hour", ".1 max_per_hour", ".2 max_per_day", ".1 max_per_day"})

	want := `
# HELP sonde_remediation_firings_total Remediation actions started, by remediation (R1); a failed action counts too.
# TYPE sonde_remediation_firings_total counter
sonde_remediation_firings_total{remediation="plan-a"} 4
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "sonde_remediation_firings_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(h.m.met.withheld.WithLabelValues("plan-a", "max_per_hour")); got != 2 {
		t.Fatalf("withheld by max_per_hour: %v, want 2", got)
	}
}

// TestMultiPool is R2 as the App Service document words it: "when an app on
// an instance stays unhealthy for more than an hour, the instance is replaced
// only if every other app with health checks is also unhealthy". An instance
// unhealthy in one of its pools and healthy in another is withheld (once),
// never fired; the moment it is unhealthy in the other too, it fires: the
// wait runs from the first pool's start, and the second pool need not have
// been unhealthy for "after" itself.
func TestMultiPool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.set("app-a", "10.0.0.1:8081", scheduler.Unhealthy)
	h.set("app-b", "10.0.0.1:8082", scheduler.Healthy)
	h.at(time.Minute - 1)
	h.expect(nil, nil)
	h.at(time.Minute)
	h.expect(nil, []string{".1 multi_pool"})
	h.at(10 * time.Minute)
	h.expect(nil, []string{".1 multi_pool"})
	rec := h.m.Status(h.clock.Nanotime()).Records[0]
	if !slices.Equal(rec.UnhealthyPools, []string{"app-a"}) || !slices.Equal(rec.HealthyPools, []string{"app-b"}) || rec.UnhealthySeconds != 60 {
		t.Fatalf("record %+v: want unhealthy in app-a for 60 s, healthy in app-b", rec)
	}
	h.set("app-b", "10.0.0.1:8082", scheduler.Unhealthy)
	h.at(10*time.Minute + time.Second)
	h.expect([]string{".1"}, []string{".1 multi_pool"})
	if f := h.fired[0]; !slices.Equal(f.Pools, []string{"app-a", "app-b"}) || len(f.Targets) != 2 || f.UnhealthySeconds != 601 ||
		!f.UnhealthySince.Equal(h.clock.Now().Add(-601*time.Second)) {
		t.Fatalf("firing %+v: want both pools and targets, unhealthy for 601 s since app-a turned unhealthy", f)
	}

	// Both unhealthy within "after" of the first pool's start: not yet.
	h.set("app-a", "10.0.0.1:8081", scheduler.Healthy)
	h.set("app-b", "10.0.0.1:8082", scheduler.Healthy)
	h.clock.Set(int64(11 * time.Minute))
	h.set("app-a", "10.0.0.3:8081", scheduler.Unhealthy)
	h.at(11*time.Minute + 30*time.Second)
	h.set("app-b", "10.0.0.3:8082", scheduler.Unhealthy)
	h.at(12*time.Minute - 1)
	h.expect([]string{".1"}, []string{".1 multi_pool"})
	if is := h.m.Status(h.clock.Nanotime()).Remediations[0].Instances; len(is) != 1 || is[0].Instance != "10.0.0.3" || is[0].UnhealthySeconds != (time.Minute-1).Seconds() {
		t.Fatalf("instances %+v: want 10.0.0.3, unhealthy since app-a turned unhealthy", is)
	}
}

// TestWithheldOncePerCause checks that a due firing withheld is recorded
// once per cause, not once per evaluation, and again whenever the cause
// changes within an episode: multi-pool, then the budget once the healthy
// pool fails too, multi-pool again when it recovers, the budget again; and
// anew after the instance went back to waiting.
func TestWithheldOncePerCause(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy) // spends the hour's firing at 1m
	h.set("app-a", "10.0.0.1:8081", scheduler.Unhealthy)
	h.set("app-b", "10.0.0.1:8082", scheduler.Healthy)
	h.at(time.Minute)
	h.set("app-a", "10.0.0.2:8081", scheduler.Healthy)
	h.at(90 * time.Second)
	h.expect([]string{".2"}, []string{".1 multi_pool"})
	h.set("app-b", "10.0.0.1:8082", scheduler.Unhealthy)
	h.at(2 * time.Minute)
	h.at(150 * time.Second)
	h.expect([]string{".2"}, []string{".1 multi_pool", ".1 max_per_hour"})
	h.set("app-b", "10.0.0.1:8082", scheduler.Healthy)
	h.at(3 * time.Minute)
	h.at(210 * time.Second)
	h.expect([]string{".2"}, []string{".1 multi_pool", ".1 max_per_hour", ".1 multi_pool"})
	if is := h.m.Status(h.clock.Nanotime()).Remediations[0].Instances; is[0].Instance != "10.0.0.1" || is[0].Withheld != "multi_pool" {
		t.Fatalf("instances %+v: want 10.0.0.1 withheld by multi_pool", is)
	}
	h.set("app-b", "10.0.0.1:8082", scheduler.Unhealthy)
	h.at(4 * time.Minute)
	h.expect([]string{".2"}, []string{".1 multi_pool", ".1 max_per_hour", ".1 multi_pool", ".1 max_per_hour"})
	// app-a recovers and fails again: the wait runs from app-b's start at
	// 3m30s, so the instance waits again; due at 4m30s, its withholding is
	// recorded anew.
	h.set("app-a", "10.0.0.1:8081", scheduler.Healthy)
	h.at(4*time.Minute + 5*time.Second)
	h.set("app-a", "10.0.0.1:8081", scheduler.Unhealthy)
	h.at(270*time.Second - 1)
	h.expect([]string{".2"}, []string{".1 multi_pool", ".1 max_per_hour", ".1 multi_pool", ".1 max_per_hour"})
	h.at(270 * time.Second)
	h.at(5 * time.Minute)
	h.expect([]string{".2"}, []string{".1 multi_pool", ".1 max_per_hour", ".1 multi_pool", ".1 max_per_hour", ".1 max_per_hour"})
	for reason, want := range map[string]float64{"multi_pool": 2, "max_per_hour": 3} {
		if got := testutil.ToFloat64(h.m.met.withheld.WithLabelValues("plan-a", reason)); got != want {
			t.Errorf("withheld by %s: %v, want %v", reason, got, want)
		}
	}
}

// TestWhatDoesNotCount checks the instances and pools R2 leaves out: a pool
// with health checks off, a target disabled in a pool, a target not probed
// yet, an address outside the remediation's pools. And routing has no say:
// a single instance, all of its pool unhealthy, is acted on.
func TestWhatDoesNotCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `checks:
  app: {preset: appservice, path: /health}
pools:
  - {name: app-a, check: app, targets: ["10.0.0.1:8081", "10.0.0.2:8081"], disabled: ["10.0.0.2:8081"]}
  - {name: static, check: app, targets: ["10.0.0.1:8083"], health_checks: false}
  - {name: app-c, check: app, targets: ["10.0.0.2:8082", "10.0.0.4:8082"]}
  - {name: other, check: app, targets: ["10.0.0.5:8081"]}
remediation:
  - {name: plan-a, pools: [app-a, static, app-c], after: 1m, max_per_hour: 0, max_per_day: 0, command: ["/bin/true"]}
`)
	h.set("app-a", "10.0.0.1:8081", scheduler.Unhealthy)
	h.set("app-c", "10.0.0.2:8082", scheduler.Unhealthy) // disabled in app-a: app-c alone counts
	h.set("other", "10.0.0.5:8081", scheduler.Unhealthy) // not in the remediation's pools
	id := h.id("app-c", "10.0.0.4:8082")
	h.st[id] = scheduler.TargetStatus{State: scheduler.Unhealthy} // starts unhealthy, never probed
	h.at(time.Minute)
	h.expect([]string{".1", ".2"}, nil)
	if cov := CoverageOf(h.cfg, h.cfg.Remediations[0]); cov != (Coverage{Instances: 3, MultiPool: 0}) {
		t.Fatalf("coverage %+v: want 3 instances (10.0.0.1, .2, .4), none in two health-checked pools", cov)
	}
}

// TestRecoveryStartsAnew checks "continuously": an instance that recovers
// before "after" starts its wait again when it fails anew.
func TestRecoveryStartsAnew(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy)
	h.at(50 * time.Second)
	h.set("app-a", "10.0.0.2:8081", scheduler.Healthy)
	h.at(55 * time.Second)
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy)
	h.at(time.Minute + 54*time.Second)
	h.expect(nil, nil)
	h.at(time.Minute + 55*time.Second)
	h.expect([]string{".2"}, nil)
}

// TestFailedActionUsesItsSlot checks that a failing tool is not run again
// and again: its firing counts against the budget, and the failure is
// counted and recorded.
func TestFailedActionUsesItsSlot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.fail = errors.New("exit status 3")
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy)
	h.at(time.Minute)
	h.at(2 * time.Minute)
	h.at(59 * time.Minute)
	h.expect([]string{".2"}, []string{".2 max_per_hour"})
	st := h.m.Status(h.clock.Nanotime())
	if r := st.Records[0]; r.Action != "fired" || r.Result != "failure" || r.Error != "exit status 3" {
		t.Fatalf("record %+v: want a failed firing", r)
	}
	if got := testutil.ToFloat64(h.m.met.failed.WithLabelValues("plan-a")); got != 1 {
		t.Fatalf("failed firings: %v, want 1", got)
	}
	if rs := st.Remediations[0]; rs.FiredLastHour != 1 || rs.FiredLastDay != 1 || len(rs.Instances) != 1 || rs.Instances[0].Withheld != "max_per_hour" {
		t.Fatalf("status %+v", rs)
	}
}

// TestBudgetSurvivesReload checks that a reload keeps a remediation's
// budget and its instances' state by name, and that a new name starts
// afresh.
func TestBudgetSurvivesReload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, twoPools)
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy)
	h.at(time.Minute)
	h.load(twoPools) // a reload: new view, same remediation
	h.set("app-a", "10.0.0.3:8081", scheduler.Unhealthy)
	h.set("app-b", "10.0.0.3:8082", scheduler.Unhealthy)
	h.at(3 * time.Minute)
	h.expect([]string{".2"}, []string{".2 max_per_hour", ".3 max_per_hour"})
	h.load(strings.Replace(twoPools, "name: plan-a", "name: plan-b", 1))
	h.at(4 * time.Minute)
	h.expect([]string{".2", ".2"}, []string{".2 max_per_hour", ".3 max_per_hour", ".3 max_per_hour"})
	if got := len(h.m.Status(h.clock.Nanotime()).Remediations); got != 1 {
		t.Fatalf("%d remediations after the rename, want 1", got)
	}
}

// TestBudgetReasons checks the caps and the reason named when several are
// full: the one that frees a slot last.
func TestBudgetReasons(t *testing.T) {
	t.Parallel()
	h := int64(time.Hour)
	var b budget
	lim := limits{1, 2, 3}
	if r := b.exhausted(0, lim); r != "" {
		t.Fatalf("empty budget: %q", r)
	}
	b.take(0)
	if r := b.exhausted(h-1, lim); r != "max_per_hour" {
		t.Fatalf("one firing in the hour: %q, want max_per_hour", r)
	}
	b.take(h)
	if r := b.exhausted(2*h, lim); r != "max_per_12h" {
		t.Fatalf("two in the 12-hour period: %q, want max_per_12h", r)
	}
	if r := b.exhausted(2*h-1, lim); r != "max_per_12h" {
		t.Fatalf("hour and 12-hour period full: %q, want max_per_12h (frees last)", r)
	}
	b.take(12 * h)
	if r := b.exhausted(13*h, lim); r != "max_per_day" {
		t.Fatalf("three in the day: %q, want max_per_day", r)
	}
	if r := b.exhausted(24*h, lim); r != "" {
		t.Fatalf("at 24 h the first firing leaves the day: %q", r)
	}
	if r := b.exhausted(25*h, limits{}); r != "" || len(b.fired) != 1 {
		t.Fatalf("no caps: %q; pruned to %d firings, want the one of the last 24 h", r, len(b.fired))
	}
}

// TestTwelveHourPeriod checks that max_per_12h counts in fixed 12-hour
// periods, as App Service's per-scale-unit count that resets every 12
// hours, not in a sliding window: a period opens with a firing and its
// count resets 12 h later, so two firings late in one period do not hold
// back the next period's.
func TestTwelveHourPeriod(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(twoPools, "after: 1m", "after: 1m\n    max_per_hour: 0\n    max_per_12h: 2\n    max_per_day: 0", 1))
	h.set("app-a", "10.0.0.2:8081", scheduler.Unhealthy)
	h.at(time.Minute) // opens the period [1m, 12h1m)
	h.set("app-a", "10.0.0.2:8081", scheduler.Healthy)
	h.at(2 * time.Minute)
	h.clock.Set(int64(11 * time.Hour))
	h.set("app-a", "10.0.0.3:8081", scheduler.Unhealthy)
	h.set("app-b", "10.0.0.3:8082", scheduler.Unhealthy)
	h.at(11*time.Hour + time.Minute)
	h.at(11*time.Hour + 2*time.Minute)
	h.expect([]string{".2", ".3"}, []string{".3 max_per_12h"})
	rs := h.m.Status(h.clock.Nanotime()).Remediations[0]
	if ends := h.clock.Now().Add(time.Hour - time.Minute); rs.Fired12hPeriod != 2 || rs.Period12hEnds == nil || !rs.Period12hEnds.Equal(ends) {
		t.Fatalf("status %+v: want 2 firings in the period, ending at %v", rs, ends)
	}
	h.at(12*time.Hour + time.Minute - 1)
	h.expect([]string{".2", ".3"}, []string{".3 max_per_12h"})
	// The count resets: a new period opens with .3's firing, and .3, due
	// again a minute later, fires as the period's second although the
	// firings at 11h1m and 12h1m are 1 h apart (a sliding 12 h window would
	// withhold it).
	h.at(12*time.Hour + time.Minute)
	h.at(12*time.Hour + 2*time.Minute)
	h.expect([]string{".2", ".3", ".3", ".3"}, []string{".3 max_per_12h"})
	h.at(12*time.Hour + 3*time.Minute)
	h.expect([]string{".2", ".3", ".3", ".3"}, []string{".3 max_per_12h", ".3 max_per_12h"})
	if rs := h.m.Status(h.clock.Nanotime()).Remediations[0]; rs.Fired12hPeriod != 2 || rs.FiredLastHour != 2 || rs.FiredLastDay != 4 {
		t.Fatalf("status %+v: want 2 firings in the new period and the hour, 4 in the day", rs)
	}
	if rs := h.m.Status(int64(24*time.Hour + time.Minute)).Remediations[0]; rs.Fired12hPeriod != 0 || rs.Period12hEnds != nil {
		t.Fatalf("status after the period %+v: want no period open", rs)
	}
}

// TestNoRemediationInAShard checks that a process holding one shard of the
// targets refuses remediations: it sees part of every pool.
func TestNoRemediationInAShard(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(twoPools), "", config.LoadOptions{Shard: config.Shard{Index: 1, Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{}).Plan(t.Context(), cfg)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "cannot run in shard 1/2") {
		t.Fatalf("Plan in a shard: %v, want an invalid-configuration error naming the shard", err)
	}
}
