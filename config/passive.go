package config

import (
	"time"

	"github.com/sondeprobe/sonde/scheduler/passive"
)

// PassiveSpec is a check's passive block as written: evidence about its
// targets from the TCP connections other processes on this host open to
// them, seen by the kernel (see package passive). Its presence turns it
// on; every field has a default.
type PassiveSpec struct {
	Failures   *int      `yaml:"failures"`    // failed connections in a row that make a trigger
	Window     *Duration `yaml:"window"`      // the first and the last of them at most this far apart
	Action     *string   `yaml:"action"`      // recheck, eject or observe
	RecheckGap *Duration `yaml:"recheck_gap"` // least time between two probes a trigger pulls forward
}

// Defaults of a passive block.
const (
	DefaultPassiveFailures = 3
	DefaultPassiveWindow   = 10 * time.Second
	// DefaultRecheckGap is the recheck gap of a check without a fast
	// re-check interval: three rechecks of a refusing target fit in a
	// second, and a target is probed at most four times a second however
	// much traffic fails.
	DefaultRecheckGap = 250 * time.Millisecond
)

var (
	passiveFailures = intRange{1, passive.MaxFailures}
	passiveWindow   = durRange{time.Millisecond, time.Hour}
	recheckGap      = durRange{10 * time.Millisecond, MaxDuration}
)

// resolvePassive fills c.Passive from the passive block, nil when there is
// none.
func (c *Check) resolvePassive(s *CheckSpec) error {
	ps := s.Passive
	if ps == nil {
		return nil
	}
	r := passive.Rule{
		Failures: pick(ps.Failures, DefaultPassiveFailures),
		Window:   pickDur(ps.Window, DefaultPassiveWindow),
		Gap:      pickDur(ps.RecheckGap, DefaultRecheckGap),
	}
	if ps.RecheckGap == nil && c.FastRecheck > 0 {
		r.Gap = max(c.FastRecheck, recheckGap.lo)
	}
	if ps.Action != nil {
		a, err := passive.ParseAction(*ps.Action)
		if err != nil {
			return checkEnum(c.field("passive.action"), *ps.Action, []string{"recheck", "eject", "observe"}, "")
		}
		r.Action = a
	}
	if err := checkInt(c.field("passive.failures"), r.Failures, passiveFailures, ""); err != nil {
		return err
	}
	if err := checkDur(c.field("passive.window"), r.Window, passiveWindow, ""); err != nil {
		return err
	}
	if err := checkDur(c.field("passive.recheck_gap"), r.Gap, recheckGap, ""); err != nil {
		return err
	}
	c.Passive = &r
	return nil
}
