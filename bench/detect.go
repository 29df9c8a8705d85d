package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/sondeprobe/sonde/internal/netns"
)

// detectPort is where the detect scenario's daemon serves (prober namespace).
const detectPort = 9202

// detectPlan is the detect scenario's size and timing.
type detectPlan struct {
	targets, slice    netip.Prefix // probed, and made to drop mid-run
	interval, timeout time.Duration
	fall              int
}

func (e *env) detectPlan() detectPlan {
	clean := fleetSize() / 2 // the second half of the fleet has no static subsets
	if e.opt.Quick {
		return detectPlan{
			targets:  blocks(clean, 256)[0],
			slice:    blocks(clean+128, 32)[0],
			interval: 500 * time.Millisecond, timeout: 500 * time.Millisecond, fall: 2,
		}
	}
	return detectPlan{
		targets:  blocks(clean, 4096)[0],
		slice:    blocks(clean+2048, 256)[0],
		interval: time.Second, timeout: time.Second, fall: 3,
	}
}

// apiEvent is the part of an /api/v1/events entry the scenario reads.
type apiEvent struct {
	Time   time.Time `json:"time"`
	Target string    `json:"target"`
	To     string    `json:"to"`
}

// runDetect makes a slice of healthy targets start dropping every packet and
// measures, per target, the time from the onset to its unhealthy state
// change, against the failure windows the daemon computes and exports.
func (e *env) runDetect(ctx context.Context, s *Scenario) error {
	p := e.detectPlan()
	n, k := 1<<(32-p.targets.Bits()), 1<<(32-p.slice.Bits())
	s.Measure = fmt.Sprintf("`sonde run` probing %s (%d targets, SYN, interval %s, timeout %s, fall %d); %s (%d targets) starts dropping every packet; time from the onset (pinned by a canary connection) to each target's unhealthy event in /api/v1/events, against the W1 and W3 windows from /metrics",
		p.targets, n, p.interval, p.timeout, p.fall, p.slice, k)
	cfg := fmt.Sprintf("checks:\n  detect: {protocol: tcp, tcp_mode: syn, port: %d, interval: %s, timeout: %s, rise: 2, fall: %d}\npools:\n  - name: detect\n    check: detect\n    targets: [%q]\nmetrics: {per_target: false}\n",
		ScanPort, p.interval, p.timeout, p.fall, p.targets.String())
	d, err := e.startDaemon(ctx, "detect", cfg, detectPort)
	if err != nil {
		return err
	}
	defer d.stop()
	s.Command = append(s.Command, commandLine(d.cmd)+"   # config: "+fmt.Sprintf("tcp_mode: syn, interval %s, timeout %s, rise 2, fall %d, targets %s", p.interval, p.timeout, p.fall, p.targets))
	if _, err := d.waitReady(ctx, time.Minute); err != nil {
		return err
	}
	m, err := d.scrape(ctx)
	if err != nil {
		return err
	}
	check := map[string]string{"check": "detect"}
	w1 := m.Sum("sonde_check_failure_window_seconds", check)
	w3 := m.Sum("sonde_check_failure_window_from_onset_seconds", check)
	if w1 <= 0 || w3 <= 0 {
		return fmt.Errorf("the daemon exports no failure windows for check detect")
	}
	if err := e.waitHealthy(ctx, d, n, 10*p.interval+10*time.Second); err != nil {
		return err
	}
	var cursor struct {
		Next uint64 `json:"next"`
	}
	if err := d.getJSON(ctx, "/api/v1/events?since=0&limit=1", &cursor); err != nil {
		return err
	}

	// The rule takes effect somewhere inside the nft command. A canary
	// connecting to a slice address back to back pins the moment down: the
	// last connection that got through was sent before the onset, the
	// first that did not, after.
	canary := netip.AddrPortFrom(p.slice.Addr().Next(), ScanPort)
	cc := make(chan canaryResult, 1)
	go func() { cc <- e.canary(canary, 3*time.Second) }()
	time.Sleep(20 * time.Millisecond) // let it connect a few times first
	ruleStart := time.Now()
	if err := e.fleet.SetDrop([]netip.Prefix{p.slice}); err != nil {
		return err
	}
	restored := false
	defer func() {
		if !restored {
			_ = e.fleet.SetDrop(nil) // on an error path; the run reports that error
		}
	}()
	ruleEnd := time.Now()
	cr := <-cc
	// The onset lies in [early, late]; times from early are upper
	// bounds, from late lower bounds.
	early, late := ruleStart, ruleEnd
	if cr.err != nil || cr.lastOK.IsZero() || cr.firstLost.IsZero() {
		s.note("the canary could not pin the onset down (%v); the onset is taken as somewhere inside the nft command", cr.err)
	} else {
		early, late = cr.lastOK, cr.firstLost
	}
	e.opt.Progress("detect: slice dropping", "slice", p.slice, "onset_uncertainty_ms", late.Sub(early).Seconds()*1e3)

	detected := map[netip.Addr]time.Time{}
	others := 0
	deadline := ruleEnd.Add(time.Duration((w3 + 5) * float64(time.Second)))
	for len(detected) < k && time.Now().Before(deadline) {
		if err := d.sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		var page struct {
			Events []apiEvent `json:"events"`
			Next   uint64     `json:"next"`
		}
		if err := d.getJSON(ctx, fmt.Sprintf("/api/v1/events?since=%d&limit=0", cursor.Next), &page); err != nil {
			return err
		}
		cursor.Next = page.Next
		for _, ev := range page.Events {
			if ev.To != "unhealthy" {
				continue
			}
			ap, err := netip.ParseAddrPort(ev.Target)
			if err != nil {
				return fmt.Errorf("event target %q: %w", ev.Target, err)
			}
			if !p.slice.Contains(ap.Addr()) {
				others++
				continue
			}
			if _, dup := detected[ap.Addr()]; !dup {
				detected[ap.Addr()] = ev.Time
			}
		}
	}
	restored = true
	if err := e.fleet.SetDrop(nil); err != nil {
		return err
	}
	// Each detection, from the latest possible onset (ds) and from the
	// earliest (upper).
	var ds, upper []float64
	inside, tooEarly := 0, 0
	for _, at := range detected {
		lo, hi := at.Sub(late).Seconds(), at.Sub(early).Seconds()
		ds, upper = append(ds, lo), append(upper, hi)
		if lo <= w3 {
			inside++
		}
		if hi < w1-p.interval.Seconds() {
			tooEarly++ // sooner than k probes sent after the onset could have failed
		}
	}
	slices.Sort(ds)
	ms := func(sec float64) float64 { return sec * 1e3 }
	s.add("targets", float64(n), "")
	s.add("dropped slice", float64(k), "targets")
	s.add("W1 (from first failing probe)", ms(w1), "ms")
	s.add("W3 (from onset)", ms(w3), "ms")
	s.add("detected", float64(len(detected)), "targets")
	if len(ds) > 0 {
		s.add("time to unhealthy min", ms(ds[0]), "ms")
		s.add("time to unhealthy p50", ms(ds[len(ds)/2]), "ms")
		s.add("time to unhealthy max", ms(ds[len(ds)-1]), "ms")
		s.add("max from earliest onset", ms(slices.Max(upper)), "ms")
	}
	s.add("inside W3", float64(inside), "targets")
	s.add("other targets unhealthy", float64(others), "targets")
	s.add("onset uncertainty", ms(late.Sub(early).Seconds()), "ms")
	s.add("firewall rule took", ms(ruleEnd.Sub(ruleStart).Seconds()), "ms")
	s.goal("every detection inside its window", inside == k && tooEarly == 0 && others == 0,
		"%d of %d dropped targets unhealthy within W3 = %.0f ms of the onset (latest %.1f ms, %.1f ms from the earliest possible onset), %d implausibly early, %d false detections",
		inside, k, ms(w3), ms(maxOr0(ds)), ms(maxOr0(upper)), tooEarly, others)
	s.note("onset: between the send of the canary's last connection to %s that got through and its first that did not (%.2f ms apart); times are from the latest possible onset, \"max from earliest onset\" from the earliest. A probe sent just after the onset is detected W1 = t·k + i·(k−1) later; one answered just before it, W3 = W1 + i after the onset (the scheduler sends a probe within the 1 ms tick before its due time, never after)", canary, ms(late.Sub(early).Seconds()))
	return d.stop()
}

func maxOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

// waitHealthy waits until the daemon's pools report want healthy targets.
func (e *env) waitHealthy(ctx context.Context, d *daemon, want int, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	got := 0
	for time.Now().Before(end) {
		var pools struct {
			Pools []struct {
				Healthy int `json:"healthy"`
			} `json:"pools"`
		}
		if err := d.getJSON(ctx, "/api/v1/pools", &pools); err != nil {
			return err
		}
		got = 0
		for _, p := range pools.Pools {
			got += p.Healthy
		}
		if got >= want {
			return nil
		}
		if err := d.sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("only %d of %d targets healthy after %v", got, want, timeout)
}

// canaryResult brackets the moment a firewall rule started dropping.
type canaryResult struct {
	lastOK, firstLost time.Time // send times of the last answered and first unanswered connection
	err               error
}

// canary connects to ap from the prober namespace, one connection after the
// other, until one goes unanswered (or limit passes).
func (e *env) canary(ap netip.AddrPort, limit time.Duration) canaryResult {
	var r canaryResult
	r.err = netns.Do(e.fleet.ProberNS, func() error {
		d := net.Dialer{Timeout: 50 * time.Millisecond}
		end := time.Now().Add(limit)
		for time.Now().Before(end) {
			t := time.Now()
			c, err := d.Dial("tcp", ap.String())
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					r.firstLost = t
					return nil
				}
				return fmt.Errorf("canary: %w", err)
			}
			c.Close()
			r.lastOK = t
		}
		return errors.New("canary: the rule never took effect")
	})
	return r
}
