package scheduler

import (
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// resender is a sim launcher that can also resend (a SYN prober's part in
// T5) and, when settle is set, is a probe.Settler too. The answer to a send
// comes from behave, called with the request and its send's number (0 for
// the first send).
type resender struct {
	*sim
	behave  func(req probe.Request, send int) answer
	resent  []resend
	sends   map[uint64]int // sends so far per (id, gen)
	settled func(now int64) int64
	expired func(r probe.Request) probe.LocalCause
}

// resend is one Resend request and when it came.
type resend struct {
	req probe.Request
	at  int64
}

func (r *resender) Launch(lane int, batch []probe.Request) {
	for _, req := range batch {
		r.sim.sent = append(r.sim.sent, req)
		r.answer(req, r.sim.clock.Nanotime())
	}
}

func (r *resender) Resend(lane int, batch []probe.Request) {
	now := r.sim.clock.Nanotime()
	for _, req := range batch {
		r.resent = append(r.resent, resend{req, now})
		r.answer(req, now)
	}
}

// answer schedules the answer to a send of req at time at, with its latency
// from that send as a SYN prober reports it.
func (r *resender) answer(req probe.Request, at int64) {
	k := uint64(req.ID)<<32 | uint64(req.Gen)
	n := r.sends[k]
	r.sends[k] = n + 1
	a := r.behave(req, n)
	if a.silent {
		return
	}
	r.sim.pending.Add(probe.Result{ID: req.ID, Gen: req.Gen, Outcome: a.outcome, Latency: a.after, Done: at + int64(a.after)})
}

// settlingResender is a resender that is a probe.Settler.
type settlingResender struct{ *resender }

func (r settlingResender) Settled() int64 { return r.settled(r.sim.clock.Nanotime()) }
func (r settlingResender) Expired(req probe.Request) probe.LocalCause {
	if r.expired == nil {
		return probe.CauseNone
	}
	return r.expired(req)
}

// newResendSim builds a sim over one check with n targets whose launcher is
// a resender (a Settler too when settle is true).
func newResendSim(t *testing.T, c Check, n int, settle bool) (*sim, *resender) {
	t.Helper()
	s := &sim{t: t, clock: NewSimClock(time.Unix(1_700_000_000, 0))}
	r := &resender{sim: s, sends: map[uint64]int{}}
	r.behave = func(probe.Request, int) answer { return answer{outcome: probe.Success} }
	c.Launcher = r
	if settle {
		r.settled = func(now int64) int64 { return now }
		c.Launcher = settlingResender{r}
	}
	targets := make([]TargetSpec, n)
	for i := range targets {
		targets[i] = TargetSpec{Leader: uint32(i)}
	}
	eng, err := New([]Check{c}, targets, Options{Shards: 1, Clock: s.clock, Observer: s, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.eng = eng
	return s, r
}

// rtxCheck is an after-completion check with fall 3 whose probes are
// retransmitted after rto.
func rtxCheck(interval, timeout, rto time.Duration) Check {
	return Check{
		Timing:     Timing{Interval: interval, Timeout: timeout, Rise: 1, Fall: 3, Initial: Healthy},
		Retransmit: rto,
	}
}

func TestRetransmitSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		timeout     time.Duration
		rto         time.Duration
		wantOffsets []time.Duration // of the resends, from the first send
	}{
		{"kernel's RTO within 2s", 2 * time.Second, time.Second, []time.Duration{time.Second}},
		{"two within 5s", 5 * time.Second, time.Second, []time.Duration{time.Second, 3 * time.Second}},
		{"three within 7.5s", 7500 * time.Millisecond, time.Second, []time.Duration{time.Second, 3 * time.Second, 7 * time.Second}},
		{"none at exactly the timeout", 3 * time.Second, 3 * time.Second, nil},
		{"none when the offset equals the timeout", 3 * time.Second, time.Second, []time.Duration{time.Second}},
		{"short RTO", time.Second, 200 * time.Millisecond, []time.Duration{200 * time.Millisecond, 600 * time.Millisecond}},
		{"off", 5 * time.Second, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := newResendSim(t, rtxCheck(time.Minute, tc.timeout, tc.rto), 1, false)
			r.behave = func(probe.Request, int) answer { return answer{silent: true} }
			s.runFor(tc.timeout + time.Second)
			if len(s.sent) != 1 {
				t.Fatalf("%d probes sent, want 1", len(s.sent))
			}
			first := s.sent[0]
			var got []time.Duration
			for _, rs := range r.resent {
				if rs.req != first {
					t.Errorf("resend %+v: want the first send's request %+v (same generation, send time, deadline)", rs.req, first)
				}
				got = append(got, time.Duration(rs.at-first.Sent))
			}
			if !equalDurations(got, tc.wantOffsets) {
				t.Errorf("resends at %v from the first send, want %v", got, tc.wantOffsets)
			}
			if len(s.result) != 1 {
				t.Fatalf("%d results, want 1", len(s.result))
			}
			res := s.result[0].r
			if res.Outcome != probe.Timeout || int(res.Retransmits) != len(tc.wantOffsets) || res.Done != first.Deadline {
				t.Errorf("result %+v: want a timeout at the deadline %d with %d retransmits", res, first.Deadline, len(tc.wantOffsets))
			}
			if st := s.eng.Stats(); st.Retransmits != uint64(len(tc.wantOffsets)) {
				t.Errorf("Stats.Retransmits = %d, want %d", st.Retransmits, len(tc.wantOffsets))
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A probe whose first SYN is lost succeeds on the retransmission: one
// retransmit, latency from the first send, and the smoothed latency keeps
// the round-trip samples of clean probes only (Karn's rule).
func TestRetransmitRecoversLostSend(t *testing.T) {
	t.Parallel()
	const rtt = 2 * time.Millisecond
	s, r := newResendSim(t, rtxCheck(2*time.Second, 2*time.Second, time.Second), 1, false)
	lose := false
	r.behave = func(_ probe.Request, send int) answer {
		if lose && send == 0 {
			return answer{silent: true}
		}
		return answer{outcome: probe.Success, after: rtt}
	}
	s.runFor(time.Second) // one clean probe: the smoothed latency is the RTT
	lose = true
	s.result = nil
	s.runFor(4 * time.Second)
	if len(s.result) == 0 {
		t.Fatal("no result after the lost send")
	}
	res := s.result[0].r
	if res.Outcome != probe.Success || res.Retransmits != 1 {
		t.Fatalf("result %+v: want success after 1 retransmit", res)
	}
	if want := time.Second + rtt; res.Latency != want {
		t.Errorf("latency %v, want %v: from the first send", res.Latency, want)
	}
	st := s.eng.Status(0)
	if st.LastRetransmits != 1 {
		t.Errorf("published last retransmits %d, want 1", st.LastRetransmits)
	}
	if st.Smoothed != rtt || st.Latency != time.Second+rtt {
		t.Errorf("latency view: last %v smoothed %v, want last %v and smoothed %v untouched", st.Latency, st.Smoothed, time.Second+rtt, rtt)
	}
	if len(s.events) != 0 {
		t.Errorf("state changes %+v: a lost SYN must not make a healthy target unhealthy", s.events)
	}
}

// Only unanswered probes are sent again.
func TestRetransmitOnlyUnanswered(t *testing.T) {
	t.Parallel()
	s, r := newResendSim(t, rtxCheck(time.Minute, 3*time.Second, time.Second), 64, false)
	r.behave = func(req probe.Request, send int) answer {
		if req.ID%2 == 1 {
			return answer{silent: true}
		}
		return answer{outcome: probe.Success, after: time.Millisecond}
	}
	s.runFor(4 * time.Second)
	if len(r.resent) != 32 {
		t.Fatalf("%d resends, want 32: one for each silent target", len(r.resent))
	}
	for _, rs := range r.resent {
		if rs.req.ID%2 != 1 {
			t.Errorf("answered target %d was sent again", rs.req.ID)
		}
	}
}

// Retransmissions do not move the failure window: every probe of a dead
// target still times out at its deadline, and the target is unhealthy
// exactly W1 after the first failing probe.
func TestRetransmitKeepsFailureWindow(t *testing.T) {
	t.Parallel()
	for _, cadence := range []Cadence{AfterCompletion, FixedRate} {
		c := rtxCheck(2*time.Second, 2*time.Second, time.Second)
		c.Cadence = cadence
		s, r := newResendSim(t, c, 1, false)
		dead := false
		var firstFail int64 = -1
		r.behave = func(req probe.Request, _ int) answer {
			if !dead {
				return answer{outcome: probe.Success, after: time.Millisecond}
			}
			if firstFail < 0 {
				firstFail = req.Sent
			}
			return answer{silent: true}
		}
		s.runFor(10 * time.Second)
		dead = true
		s.runFor(30 * time.Second)
		if len(s.events) != 1 || s.events[0].To != Unhealthy {
			t.Fatalf("%s: events %+v, want one change to unhealthy", cadence, s.events)
		}
		if got, w1 := time.Duration(s.events[0].At-firstFail), c.FailureWindow(); got != w1 {
			t.Errorf("%s: unhealthy %v after the first failing probe, want exactly W1 %v", cadence, got, w1)
		}
	}
}

// A launcher that has not settled holds a timeout back; an answer the kernel
// received before the deadline then counts, however late it is delivered.
func TestSettleHoldsTimeout(t *testing.T) {
	t.Parallel()
	const lag = 300 * time.Millisecond
	s, r := newResendSim(t, rtxCheck(time.Minute, time.Second, 0), 1, true)
	r.settled = func(now int64) int64 { return now - int64(lag) }
	r.behave = func(probe.Request, int) answer { return answer{silent: true} }
	s.runFor(time.Second + lag/2)
	if len(s.result) != 0 {
		t.Fatalf("results %+v before the launcher settled the deadline", s.result)
	}
	// The reply, received by the kernel 1 ms before the deadline, is read
	// now: it counts.
	req := s.sent[0]
	s.eng.Deliver(probe.Result{ID: req.ID, Gen: req.Gen, Outcome: probe.Success, Latency: 999 * time.Millisecond, Done: req.Deadline - int64(time.Millisecond)})
	s.runFor(lag)
	if len(s.result) != 1 || s.result[0].r.Outcome != probe.Success {
		t.Fatalf("results %+v: want the late-read answer as a success", s.result)
	}
}

// Without a late answer the timeout is recorded once the launcher settles,
// with the deadline as its time.
func TestSettleThenTimeout(t *testing.T) {
	t.Parallel()
	const lag = 300 * time.Millisecond
	s, r := newResendSim(t, rtxCheck(time.Minute, time.Second, 0), 1, true)
	r.settled = func(now int64) int64 { return now - int64(lag) }
	r.behave = func(probe.Request, int) answer { return answer{silent: true} }
	s.runFor(2 * time.Second)
	if len(s.result) != 1 {
		t.Fatalf("%d results, want 1", len(s.result))
	}
	res, req := s.result[0].r, s.sent[0]
	if res.Outcome != probe.Timeout || res.Done != req.Deadline {
		t.Errorf("result %+v: want a timeout done at the deadline %d", res, req.Deadline)
	}
}

// A silence the launcher blames on this host is a local error: no verdict,
// the target stays healthy however many there are.
func TestSettleExpiredIsLocalError(t *testing.T) {
	t.Parallel()
	s, r := newResendSim(t, rtxCheck(time.Second, time.Second, 0), 1, true)
	r.behave = func(probe.Request, int) answer { return answer{silent: true} }
	r.expired = func(probe.Request) probe.LocalCause { return probe.CauseCapture }
	s.runFor(20 * time.Second)
	if len(s.result) < 5 {
		t.Fatalf("%d results, want one every 2 s", len(s.result))
	}
	for _, ar := range s.result {
		if ar.r.Outcome != probe.LocalError || ar.r.Cause != probe.CauseCapture {
			t.Fatalf("result %+v: want local_error (capture)", ar.r)
		}
	}
	if len(s.events) != 0 {
		t.Errorf("state changes %+v: local errors are no verdict", s.events)
	}
	if st := s.eng.Status(0); st.LastOutcome != probe.LocalError || st.LastCause != probe.CauseCapture || st.State != Healthy {
		t.Errorf("published %+v: want a healthy target whose last probe was a local error (capture)", st)
	}
	if st := s.eng.Stats(); st.Timeouts != 0 {
		t.Errorf("Stats.Timeouts = %d, want 0", st.Timeouts)
	}
}

// A launcher that never settles cannot hold a probe forever: after
// settleLimit it ends as a local error (late).
func TestSettleLimit(t *testing.T) {
	t.Parallel()
	s, r := newResendSim(t, rtxCheck(time.Minute, time.Second, 0), 1, true)
	r.settled = func(int64) int64 { return 0 }
	r.behave = func(probe.Request, int) answer { return answer{silent: true} }
	s.runFor(time.Second + settleLimit - time.Millisecond)
	if len(s.result) != 0 {
		t.Fatalf("results %+v before the settle limit", s.result)
	}
	s.runFor(10 * time.Millisecond)
	if len(s.result) != 1 || s.result[0].r.Outcome != probe.LocalError || s.result[0].r.Cause != probe.CauseLate {
		t.Fatalf("results %+v: want one local_error (late)", s.result)
	}
}

// A local error a launcher delivers after the deadline (a worker that took
// the request too late) ends the probe that waits to settle.
func TestLateLocalErrorEndsProbe(t *testing.T) {
	t.Parallel()
	s, r := newResendSim(t, rtxCheck(time.Minute, time.Second, 0), 1, true)
	r.settled = func(int64) int64 { return 0 }
	r.behave = func(probe.Request, int) answer { return answer{silent: true} }
	s.runFor(1500 * time.Millisecond)
	req := s.sent[0]
	s.eng.Deliver(probe.Result{ID: req.ID, Gen: req.Gen, Outcome: probe.LocalError, Cause: probe.CauseLate, Done: req.Deadline + int64(400*time.Millisecond)})
	s.runFor(10 * time.Millisecond)
	if len(s.result) != 1 || s.result[0].r.Outcome != probe.LocalError {
		t.Fatalf("results %+v: want the delivered local error", s.result)
	}
	if st := s.eng.Stats(); st.Late != 0 {
		t.Errorf("Stats.Late = %d: a local error is never late", st.Late)
	}
}

// A launcher that cannot resend gets no retransmissions whatever the check
// says.
func TestRetransmitNeedsResender(t *testing.T) {
	t.Parallel()
	c := rtxCheck(time.Minute, 3*time.Second, time.Second)
	s := newSim(t, []Check{c}, []TargetSpec{{Leader: 0}}, 1)
	s.behave = func(probe.Request) answer { return answer{silent: true} }
	s.runFor(4 * time.Second)
	if len(s.sent) != 1 || len(s.result) != 1 || s.result[0].r.Retransmits != 0 {
		t.Fatalf("sent %d, results %+v: want one probe, timed out without retransmits", len(s.sent), s.result)
	}
}

func TestRetransmitValidation(t *testing.T) {
	t.Parallel()
	for _, rto := range []time.Duration{-time.Second, time.Microsecond, MaxDelay + time.Second} {
		c := rtxCheck(time.Second, time.Second, rto)
		c.Launcher = &sim{}
		if _, err := New([]Check{c}, nil, Options{Shards: 1, Clock: NewSimClock(time.Unix(0, 0))}); err == nil {
			t.Errorf("retransmit %v accepted", rto)
		}
	}
}
