package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// State is a target's health as the evaluator sees it.
type State uint8

// The health states. A target starts in its check's initial state (E3); an
// Unknown target takes part in no traffic decision until it has been decided.
const (
	Unknown State = iota
	Healthy
	Unhealthy
)

var stateNames = [...]string{Unknown: "unknown", Healthy: "healthy", Unhealthy: "unhealthy"}

// String returns "unknown", "healthy" or "unhealthy".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText encodes the state as its name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ParseState returns the state named s.
func ParseState(s string) (State, error) {
	for st, name := range stateNames {
		if name == s {
			return State(st), nil
		}
	}
	return 0, fmt.Errorf("unknown state %q: want unknown, healthy or unhealthy", s)
}

// Window is a sliding-window evaluation (E2): a target is healthy while at least
// Required of its last Size results succeeded. The zero Window means the
// consecutive rise/fall evaluation (E1).
type Window struct {
	Size     int `json:"size"`     // number of recent results looked at, 1..MaxWindow
	Required int `json:"required"` // successes among them needed to be healthy, 1..Size
}

// MaxWindow is the largest sliding window the evaluator keeps.
const MaxWindow = 32

// MaxDelay bounds every interval and timeout (with jitter) a check may use.
const MaxDelay = 24 * time.Hour

// MaxThreshold is the largest rise or fall threshold the evaluator counts to.
const MaxThreshold = 1000

// Cadence is when a check sends its next probe (docs/semantics.md, "Cadence").
type Cadence uint8

// The cadences. The zero Cadence is AfterCompletion.
const (
	// AfterCompletion sends the next probe one interval after the previous
	// one completed (answer or timeout), as Global Accelerator and Envoy do.
	AfterCompletion Cadence = iota
	// FixedRate sends one probe every interval from the previous send,
	// whatever that probe did, as App Service, Front Door and App Gateway
	// do. The timeout may not exceed the interval, so a probe has always
	// completed when the next one leaves.
	FixedRate
)

var cadenceNames = [...]string{AfterCompletion: "after_completion", FixedRate: "fixed_rate"}

// String returns "after_completion" or "fixed_rate".
func (c Cadence) String() string {
	if int(c) < len(cadenceNames) {
		return cadenceNames[c]
	}
	return fmt.Sprintf("cadence(%d)", uint8(c))
}

// MarshalText encodes the cadence as its name.
func (c Cadence) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// ParseCadence returns the cadence named s.
func ParseCadence(s string) (Cadence, error) {
	for c, name := range cadenceNames {
		if name == s {
			return Cadence(c), nil
		}
	}
	return 0, fmt.Errorf("unknown cadence %q: want after_completion or fixed_rate", s)
}

// Timing holds how often a check probes and how its results decide a
// target's state: every setting of a check the engine applies, but its
// launcher. Its cadence says what the interval is measured from: the
// previous probe's completion (answer or timeout) or its send. Either way the
// detection windows W1 and W2 are exact.
type Timing struct {
	Cadence           Cadence       // what a gap is measured from: the previous probe's completion or its send
	Interval          time.Duration // gap between probes
	Timeout           time.Duration // time a probe may take before it counts as a timeout
	FastRecheck       time.Duration // gap after a failure that has not yet made the target unhealthy (E4); 0 = Interval
	UnhealthyInterval time.Duration // gap while the target is unhealthy; 0 = Interval
	Jitter            time.Duration // each gap is lengthened by a uniform random amount in [0, Jitter)
	Rise              int           // consecutive successes that make a target healthy (E1)
	Fall              int           // consecutive failures that make a target unhealthy (E1)
	Window            Window        // sliding window instead of Rise/Fall (E2) when Size > 0
	Initial           State         // state before the first decision (E3)
}

// Check is what the engine runs for every target of one check: its
// [Timing], the launcher of its probes and the pace of its first probes.
type Check struct {
	Timing

	// Launcher starts the probes of this check's targets.
	Launcher probe.Launcher

	// Retransmit is the retransmission timeout of an unanswered probe
	// (T5): a launcher that can resend ([probe.Resender]) sends the probe
	// again after Retransmit, then after twice as long again, and so on,
	// as a kernel retransmits a SYN, as long as the send falls before the
	// probe's deadline. Zero sends every probe once. It changes no
	// detection window: the probe's timeout stays what it was.
	Retransmit time.Duration

	// FirstProbes paces the first probe of each of the check's streams, at
	// the engine's start and for a target added later. The zero Pace sends
	// them all at once; a launcher that cannot take a burst sets the rate it
	// can.
	FirstProbes Pace
}

// Pace limits a burst of probes: up to Burst at once, then Rate per second.
// The zero Pace is no limit.
type Pace struct {
	Rate  float64 // probes per second once the burst is spent; 0 means no limit
	Burst int     // probes that may leave at once; values below 1 count as 1
}

// ErrInvalidCheck is returned (wrapped) by [Timing.Validate].
var ErrInvalidCheck = errors.New("invalid check")

// Validate reports settings the engine cannot run. Configuration code checks
// user input earlier, with messages naming the config field; this is the
// engine's own guard.
func (c *Timing) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidCheck, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Interval <= 0:
		return bad("interval %v must be positive", c.Interval)
	case c.Timeout <= 0:
		return bad("timeout %v must be positive", c.Timeout)
	case c.FastRecheck < 0 || c.UnhealthyInterval < 0 || c.Jitter < 0:
		return bad("fast recheck, unhealthy interval and jitter must not be negative")
	case c.Initial > Unhealthy:
		return bad("initial state %d unknown", c.Initial)
	case max(c.Interval, c.Timeout, c.FastRecheck, c.UnhealthyInterval)+c.Jitter > MaxDelay:
		return bad("intervals, timeout and jitter must stay within %v", MaxDelay)
	case c.Cadence > FixedRate:
		return bad("cadence %d unknown", c.Cadence)
	case c.Cadence == FixedRate && c.Timeout > c.shortestGap():
		return bad("timeout %v exceeds the shortest interval %v of a fixed-rate check", c.Timeout, c.shortestGap())
	}
	if c.Window.Size > 0 {
		if c.Window.Size > MaxWindow || c.Window.Required < 1 || c.Window.Required > c.Window.Size {
			return bad("window %d/%d: want size 1..%d and required 1..size", c.Window.Required, c.Window.Size, MaxWindow)
		}
		return nil
	}
	if c.Rise < 1 || c.Rise > MaxThreshold || c.Fall < 1 || c.Fall > MaxThreshold {
		return bad("rise %d and fall %d must be in 1..%d", c.Rise, c.Fall, MaxThreshold)
	}
	return nil
}

// FailureThreshold is k of W1: the number of consecutive failed probes that turn
// a healthy target unhealthy (fall, or Size-Required+1 for a window).
func (c *Timing) FailureThreshold() int {
	if c.Window.Size > 0 {
		return c.Window.Size - c.Window.Required + 1
	}
	return c.Fall
}

// SuccessThreshold is k of W2: the number of consecutive successful probes that
// turn an unhealthy target healthy (rise, or Required for a window).
func (c *Timing) SuccessThreshold() int {
	if c.Window.Size > 0 {
		return c.Window.Required
	}
	return c.Rise
}

// failureGap is the longest gap between the probes that confirm a failure.
func (c *Timing) failureGap() time.Duration {
	gap := c.Interval
	if c.FastRecheck > 0 {
		gap = c.FastRecheck
	}
	return gap + c.Jitter
}

// recoveryGap is the longest gap between probes while a target is unhealthy.
func (c *Timing) recoveryGap() time.Duration {
	gap := c.Interval
	if c.UnhealthyInterval > 0 {
		gap = c.UnhealthyInterval
	}
	return gap + c.Jitter
}

// shortestGap is the shortest gap the check can put between two probes,
// before jitter.
func (c *Timing) shortestGap() time.Duration {
	gap := c.Interval
	if c.FastRecheck > 0 && c.FastRecheck < gap {
		gap = c.FastRecheck
	}
	if c.UnhealthyInterval > 0 && c.UnhealthyInterval < gap {
		gap = c.UnhealthyInterval
	}
	return gap
}

// FailureWindow is W1: the time from the send of the first failing probe
// until a healthy target is declared unhealthy when every probe times out,
// t*k + i*(k-1) after completion and i*(k-1) + t at a fixed rate. Fast
// failures (RST, 5xx) are detected sooner. i is the fast re-check interval
// when one is set, and includes the maximum jitter.
func (c *Timing) FailureWindow() time.Duration {
	k := time.Duration(c.FailureThreshold())
	if c.Cadence == FixedRate {
		return c.failureGap()*(k-1) + c.Timeout
	}
	return c.Timeout*k + c.failureGap()*(k-1)
}

// FailureWindowFromOnset is W3: the bound counted from the moment a target
// breaks, which adds at most one interval (plus jitter) before the first
// failing probe is sent, in both cadences.
func (c *Timing) FailureWindowFromOnset() time.Duration {
	return c.FailureWindow() + c.Interval + c.Jitter
}

// SuccessWindow is W2: the time from the send of the first successful probe
// until an unhealthy target is declared healthy, r*k + i*(k-1) after
// completion and i*(k-1) + r at a fixed rate, where r is the time a
// successful probe takes. With r = Timeout it is the worst case. i is the
// unhealthy interval when one is set, and includes the maximum jitter.
func (c *Timing) SuccessWindow(r time.Duration) time.Duration {
	if r > c.Timeout {
		r = c.Timeout
	}
	k := time.Duration(c.SuccessThreshold())
	if c.Cadence == FixedRate {
		return c.recoveryGap()*(k-1) + r
	}
	return r*k + c.recoveryGap()*(k-1)
}

// ProbeRate is the highest rate of probes, per second, that one target of this
// check receives: one per shortest gap the check can use (P6), reached at a
// fixed rate always and after completion when answers are instant.
func (c *Timing) ProbeRate() float64 {
	return float64(time.Second) / float64(c.shortestGap())
}

// TimeoutRate is the highest rate of probes, per second, that one target of
// this check receives while every probe times out (a hanging server): 1/i
// at a fixed rate, 1/(t+i) after completion, with i the shortest gap.
func (c *Timing) TimeoutRate() float64 {
	cycle := c.shortestGap()
	if c.Cadence == AfterCompletion {
		cycle += c.Timeout
	}
	return float64(time.Second) / float64(cycle)
}
