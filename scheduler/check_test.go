package scheduler

import (
	"errors"
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name             string
		check            Timing
		failure, success time.Duration // W1, W2 with r = timeout
		onset            time.Duration // W3
	}{
		{
			// docs/semantics.md W1 and W2 examples: t=3 s, i=2 s, k=3.
			name:    "globalaccelerator",
			check:   Timing{Interval: 2 * s, Timeout: 3 * s, Rise: 3, Fall: 3},
			failure: 13 * s, success: 13 * s, onset: 15 * s,
		},
		{
			// "10 failed pings = 10 minutes".
			name:    "appservice, fixed rate",
			check:   Timing{Cadence: FixedRate, Interval: 60 * s, Timeout: 60 * s, Rise: 1, Fall: 10},
			failure: 600 * s, success: 60 * s, onset: 660 * s,
		},
		{
			name:    "appservice after completion",
			check:   Timing{Interval: 60 * s, Timeout: 60 * s, Rise: 1, Fall: 10},
			failure: 1140 * s, success: 60 * s, onset: 1200 * s,
		},
		{
			// k = n - x + 1 = 3 to fail, x = 2 to recover.
			name:    "frontdoor window 4/2, fixed rate",
			check:   Timing{Cadence: FixedRate, Interval: 30 * s, Timeout: 30 * s, Window: Window{Size: 4, Required: 2}},
			failure: 90 * s, success: 60 * s, onset: 120 * s,
		},
		{
			name:    "frontdoor window 4/2 after completion",
			check:   Timing{Interval: 30 * s, Timeout: 30 * s, Window: Window{Size: 4, Required: 2}},
			failure: 150 * s, success: 90 * s, onset: 180 * s,
		},
		{
			// "first detection 20 s + 2 failed probes × 20 s" at 30 s.
			name:    "appgateway, fixed rate",
			check:   Timing{Cadence: FixedRate, Interval: 30 * s, Timeout: 30 * s, Rise: 1, Fall: 3, Initial: Unhealthy},
			failure: 90 * s, success: 30 * s, onset: 120 * s,
		},
		{
			name:    "fixed rate with fast recheck and unhealthy interval",
			check:   Timing{Cadence: FixedRate, Interval: 10 * s, Timeout: 2 * s, FastRecheck: 3 * s, UnhealthyInterval: 20 * s, Rise: 2, Fall: 3},
			failure: 2*3*s + 2*s, success: 20*s + 2*s, onset: 18 * s,
		},
		{
			name:    "fast recheck shortens the failure gaps only",
			check:   Timing{Interval: 10 * s, Timeout: 2 * s, FastRecheck: s, Rise: 2, Fall: 3},
			failure: 6*s + 2*s, success: 4*s + 10*s, onset: 18 * s,
		},
		{
			name:    "unhealthy interval governs recovery",
			check:   Timing{Interval: 10 * s, Timeout: 2 * s, UnhealthyInterval: 30 * s, Rise: 2, Fall: 3},
			failure: 6*s + 20*s, success: 4*s + 30*s, onset: 36 * s,
		},
		{
			name:    "jitter widens every gap",
			check:   Timing{Interval: 10 * s, Timeout: 2 * s, Jitter: s, Rise: 2, Fall: 3},
			failure: 6*s + 22*s, success: 4*s + 11*s, onset: 28*s + 11*s,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.check.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tt.check.FailureWindow(); got != tt.failure {
				t.Errorf("FailureWindow = %v, want %v", got, tt.failure)
			}
			if got := tt.check.SuccessWindow(tt.check.Timeout); got != tt.success {
				t.Errorf("SuccessWindow(timeout) = %v, want %v", got, tt.success)
			}
			if got := tt.check.FailureWindowFromOnset(); got != tt.onset {
				t.Errorf("FailureWindowFromOnset = %v, want %v", got, tt.onset)
			}
		})
	}
}

func TestSuccessWindowMeasuredLatency(t *testing.T) {
	t.Parallel()
	c := Timing{Interval: 2 * time.Second, Timeout: 3 * time.Second, Rise: 3, Fall: 3}
	// docs/semantics.md W2 example: r=1 s, i=2 s, k=3 → 7 s.
	if got := c.SuccessWindow(time.Second); got != 7*time.Second {
		t.Fatalf("SuccessWindow(1s) = %v, want 7s", got)
	}
	// r is capped at the timeout: a slower answer is a timeout.
	if got := c.SuccessWindow(time.Minute); got != 13*time.Second {
		t.Fatalf("SuccessWindow(1m) = %v, want 13s", got)
	}
}

func TestCheckValidate(t *testing.T) {
	t.Parallel()
	ok := Timing{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	bad := []struct {
		name string
		mod  func(*Timing)
	}{
		{"zero interval", func(c *Timing) { c.Interval = 0 }},
		{"zero timeout", func(c *Timing) { c.Timeout = 0 }},
		{"negative jitter", func(c *Timing) { c.Jitter = -1 }},
		{"zero rise", func(c *Timing) { c.Rise = 0 }},
		{"huge fall", func(c *Timing) { c.Fall = MaxThreshold + 1 }},
		{"window required above size", func(c *Timing) { c.Window = Window{Size: 2, Required: 3} }},
		{"window too large", func(c *Timing) { c.Window = Window{Size: MaxWindow + 1, Required: 1} }},
		{"bad initial", func(c *Timing) { c.Initial = 7 }},
		{"interval beyond a day", func(c *Timing) { c.Interval = MaxDelay + time.Millisecond }},
		{"jitter beyond a day", func(c *Timing) { c.Interval, c.Jitter = MaxDelay, time.Millisecond }},
		{"unknown cadence", func(c *Timing) { c.Cadence = 2 }},
		{"fixed rate, timeout above interval", func(c *Timing) { c.Cadence, c.Timeout = FixedRate, 2*time.Second }},
		{"fixed rate, timeout above fast recheck", func(c *Timing) { c.Cadence, c.FastRecheck = FixedRate, time.Millisecond }},
		{"fixed rate, timeout above unhealthy interval", func(c *Timing) { c.Cadence, c.UnhealthyInterval = FixedRate, time.Millisecond }},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid check: %v", err)
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.Validate(); !errors.Is(err, ErrInvalidCheck) {
				t.Fatalf("Validate() = %v, want ErrInvalidCheck", err)
			}
		})
	}
}

func TestProbeRate(t *testing.T) {
	t.Parallel()
	c := Timing{Interval: 2 * time.Second, FastRecheck: 500 * time.Millisecond, Timeout: 500 * time.Millisecond}
	if got := c.ProbeRate(); got != 2 {
		t.Fatalf("ProbeRate = %v, want 2", got)
	}
	if got := c.TimeoutRate(); got != 1 {
		t.Fatalf("after completion: TimeoutRate = %v, want 1 (one per timeout + gap)", got)
	}
	c.Cadence = FixedRate
	if got := c.TimeoutRate(); got != 2 {
		t.Fatalf("fixed rate: TimeoutRate = %v, want 2 (one per gap)", got)
	}
}

func TestParseCadence(t *testing.T) {
	t.Parallel()
	for _, c := range []Cadence{AfterCompletion, FixedRate} {
		got, err := ParseCadence(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCadence(%q) = %v, %v", c, got, err)
		}
	}
	if _, err := ParseCadence("fixed"); err == nil {
		t.Fatal("ParseCadence(fixed) succeeded")
	}
}
