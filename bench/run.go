package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/sondeprobe/sonde/bench/fleet"
	"github.com/sondeprobe/sonde/bench/host"
)

// Scenarios are the names of the scenarios [Run] knows, in the order it runs
// them.
var Scenarios = []string{"sweep", "steady", "detect", "http", "compare", "faults", "passive"}

// DefaultScenarios are those [Run] runs when none is named: all but faults,
// which measures trust rather than speed and takes about ten minutes, and
// passive, which waits minutes for active detection at a 30 s interval.
var DefaultScenarios = Scenarios[:5]

// Options configure [Run]. Binary is required; the zero value of every other
// field means its default.
type Options struct {
	// Scenarios to run, by name (see Scenarios); empty means all. They run
	// in the order of Scenarios whatever the order given.
	Scenarios []string
	// Binary is the sonde executable that runs `sonde scan` and `sonde run`
	// inside the prober namespace (usually the running one).
	Binary string
	// Version is sonde's version, for the report.
	Version string
	// Quick shrinks every scenario to a few seconds on a small part of the
	// fleet: a smoke run, not a measurement. Goals are still checked.
	Quick bool
	// Keep leaves the fleet's namespaces and the run's files in place after
	// the run, for a look around; the report names them. The fleet's
	// listeners and HTTP server end with the process.
	Keep bool
	// Runs is how many times the sweeps are repeated (medians are
	// reported); default 3, 1 with Quick.
	Runs int
	// Steady sets the steady scenario's size; zero fields take the defaults
	// (1,000,000 targets at 10 s for 60 s; 20,000 at 1 s for 2 s with Quick).
	Steady SteadyOptions
	// HTTPDuration is how long each HTTP and connect() measurement runs;
	// default 5 s (1 s with Quick).
	HTTPDuration time.Duration
	// Fleet selects the fleets of sweep, steady and compare; detect and
	// http always run on the kernel's fleet.
	Fleet FleetChoice
	// XDP is the mode of the XDP-answered fleet; default fleet.XDPGeneric.
	XDP fleet.XDPMode
	// Faults are the faults the faults scenario runs, by name (see
	// [FaultNames]); empty means all.
	Faults []string
	// FaultDuration is how long each fault is measured before the outage;
	// default 60 s (10 s with Quick).
	FaultDuration time.Duration
	// Progress, when not nil, is told what the run is doing.
	Progress func(msg string, args ...any)
}

// SteadyOptions size the steady scenario.
type SteadyOptions struct {
	Targets  int           // (address, port) targets
	Interval time.Duration // each target's probe interval
	Duration time.Duration // how long the steady state is measured
}

// FleetChoice selects the fleets that sweep, steady and compare run on.
type FleetChoice uint8

// The fleet choices.
const (
	FleetDefault FleetChoice = iota // both for sweep and compare, the XDP fleet for steady
	FleetXDP                        // the XDP-answered fleet only
	FleetKernel                     // the kernel's fleet only
	FleetBoth                       // both fleets
)

var fleetChoiceNames = []string{"", "xdp", "kernel", "both"}

// ParseFleetChoice parses "xdp", "kernel" or "both".
func ParseFleetChoice(s string) (FleetChoice, error) {
	for i, n := range fleetChoiceNames {
		if n != "" && n == s {
			return FleetChoice(i), nil
		}
	}
	return 0, fmt.Errorf("fleet %q: want xdp, kernel or both", s)
}

// String names the choice as ParseFleetChoice reads it ("default" for the
// zero value).
func (c FleetChoice) String() string {
	if c == FleetDefault || int(c) >= len(fleetChoiceNames) {
		return "default"
	}
	return fleetChoiceNames[c]
}

// xdpNone stands for "no shared fleet" in fleetsOf: the scenario builds its
// own.
const xdpNone fleet.XDPMode = 255

// fleetsOf returns the fleets scenario name runs on, in order: the XDP
// fleet's mode, fleet.XDPOff for the kernel's, or xdpNone.
func (o *Options) fleetsOf(name string) []fleet.XDPMode {
	switch name {
	case "sweep", "compare", "steady":
	case "faults":
		return []fleet.XDPMode{xdpNone} // a fleet of its own, built by the scenario
	default:
		return []fleet.XDPMode{fleet.XDPOff} // HTTP and connect() need a TCP stack
	}
	switch o.Fleet {
	case FleetXDP:
		return []fleet.XDPMode{o.XDP}
	case FleetKernel:
		return []fleet.XDPMode{fleet.XDPOff}
	case FleetBoth:
		return []fleet.XDPMode{o.XDP, fleet.XDPOff}
	}
	if name == "steady" {
		return []fleet.XDPMode{o.XDP}
	}
	return []fleet.XDPMode{o.XDP, fleet.XDPOff}
}

// ErrUnknownScenario is returned by [Run] for a scenario name it does not
// know.
var ErrUnknownScenario = errors.New("unknown scenario")

// maxSteadyTargets bounds the steady scenario: 128 ports over the fleet,
// 16,777,216 targets.
const maxSteadyTargets = 128 << 17

// defaults fills in the defaults and checks the options.
func (o *Options) defaults() error {
	if o.Binary == "" {
		return errors.New("bench: Options.Binary is required")
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("%w %q; want %s", ErrUnknownScenario, s, strings.Join(Scenarios, ", "))
		}
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = DefaultScenarios
	}
	for _, f := range o.Faults {
		if !slices.Contains(FaultNames(), f) {
			return fmt.Errorf("bench: unknown fault %q; want %s", f, strings.Join(FaultNames(), ", "))
		}
	}
	if o.FaultDuration == 0 {
		o.FaultDuration = time.Minute
		if o.Quick {
			o.FaultDuration = 10 * time.Second
		}
	}
	if o.FaultDuration < 5*time.Second || o.FaultDuration > time.Hour {
		return fmt.Errorf("bench: fault duration %v out of range 5s-1h", o.FaultDuration)
	}
	if o.Runs <= 0 {
		o.Runs = 3
		if o.Quick {
			o.Runs = 1
		}
	}
	st := &o.Steady
	if st.Targets == 0 {
		st.Targets = 1_000_000
		if o.Quick {
			st.Targets = 20_000
		}
	}
	if st.Interval == 0 {
		st.Interval = 10 * time.Second
		if o.Quick {
			st.Interval = time.Second
		}
	}
	if st.Duration == 0 {
		st.Duration = 60 * time.Second
		if o.Quick {
			st.Duration = 2 * time.Second
		}
	}
	switch {
	case st.Targets < 1 || st.Targets > maxSteadyTargets:
		return fmt.Errorf("bench: steady targets %d out of range 1-%d", st.Targets, maxSteadyTargets)
	case st.Interval < time.Second || st.Interval > time.Hour:
		return fmt.Errorf("bench: steady interval %v out of range 1s-1h", st.Interval)
	case st.Duration < time.Second || st.Duration > time.Hour:
		return fmt.Errorf("bench: steady duration %v out of range 1s-1h", st.Duration)
	}
	if o.HTTPDuration == 0 {
		o.HTTPDuration = 5 * time.Second
		if o.Quick {
			o.HTTPDuration = time.Second
		}
	}
	if o.HTTPDuration < time.Second || o.HTTPDuration > 10*time.Minute {
		return fmt.Errorf("bench: HTTP duration %v out of range 1s-10m", o.HTTPDuration)
	}
	if o.XDP == fleet.XDPOff {
		o.XDP = fleet.XDPGeneric
	}
	if o.XDP > fleet.XDPNative || o.Fleet > FleetBoth {
		return fmt.Errorf("bench: XDP mode %d or fleet choice %d unknown", o.XDP, o.Fleet)
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return nil
}

// env is what the scenarios of one run share.
type env struct {
	opt    Options
	fleets map[fleet.XDPMode]*fleet.Fleet // by who answers: fleet.XDPOff for the kernel's fleet
	fleet  *fleet.Fleet                   // the fleet of the scenario being run
	dir    string                         // temporary files: configs, outputs
	// sweepCPU is sonde scan's median CPU per probe (µs) on each fleet, for
	// steady's comparison.
	sweepCPU map[fleet.XDPMode]float64
	// extra lists the fleets scenarios built for themselves (faults).
	extra []FleetInfo
}

// Run builds the bench fleet, runs the scenarios and removes the fleet
// (unless Options.Keep). It needs root. The report holds every scenario
// that ran, also when ctx is cancelled part way; a scenario's failure is in
// its Error, not in Run's error, which is for a run that could not start or
// was interrupted.
func Run(ctx context.Context, opt Options) (rep *Report, err error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fleet.ErrNotRoot
	}
	rep = &Report{Machine: host.Describe(opt.Version)}
	dir, err := os.MkdirTemp("", "sonde-bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if !opt.Keep {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}()
	e := &env{opt: opt, fleets: map[fleet.XDPMode]*fleet.Fleet{}, dir: dir, sweepCPU: map[fleet.XDPMode]float64{}}
	defer func() {
		if opt.Keep {
			return
		}
		for _, f := range e.fleets {
			if cerr := f.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("remove fleet: %w", cerr))
			}
		}
	}()
	if err := e.buildFleets(rep); err != nil {
		return nil, err
	}
	for _, name := range Scenarios {
		if !slices.Contains(opt.Scenarios, name) {
			continue
		}
		for _, mode := range opt.fleetsOf(name) {
			if err := ctx.Err(); err != nil {
				return rep, fmt.Errorf("bench interrupted: %w", err)
			}
			e.fleet = e.fleets[mode]
			opt.Progress("scenario", "name", name, "fleet", mode)
			start := time.Now()
			s := &Scenario{Name: name, Fleet: mode.String()}
			if name == "faults" {
				s.Fleet = "kernel+impairment"
			}
			err := e.run(ctx, name, s)
			rep.Fleets, e.extra = append(rep.Fleets, e.extra...), nil
			if err != nil {
				s.Status, s.Error = StatusFailed, err.Error()
			}
			s.finish()
			s.Seconds = time.Since(start).Seconds()
			rep.Scenarios = append(rep.Scenarios, s)
			opt.Progress("scenario done", "name", name, "fleet", mode, "status", s.Status, "seconds", int(s.Seconds))
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("bench interrupted: %w", err)
	}
	return rep, nil
}

// buildFleets builds the fleets the chosen scenarios run on, each with a
// listening port per fleetSize() steady targets, and lists them in rep.
func (e *env) buildFleets(rep *Report) error {
	ports := (e.opt.Steady.Targets + fleetSize() - 1) / fleetSize()
	for _, mode := range []fleet.XDPMode{e.opt.XDP, fleet.XDPOff} {
		needed := false
		for _, name := range e.opt.Scenarios {
			needed = needed || slices.Contains(e.opt.fleetsOf(name), mode)
		}
		if !needed {
			continue
		}
		e.opt.Progress("building a fleet", "prefix", BenchPrefix, "answered_by", mode, "steady_ports", ports)
		cfg := benchFleetConfig(ports)
		cfg.XDP = mode
		f, err := fleet.New(cfg)
		if err != nil {
			return fmt.Errorf("build the %s fleet: %w", mode, err)
		}
		e.fleets[mode] = f
		rep.Fleets = append(rep.Fleets, FleetInfo{Prefix: f.Prefix.String(), AnsweredBy: mode.String(),
			ProberNS: f.ProberNS, FleetNS: f.FleetNS, Kept: e.opt.Keep, Dir: e.dir})
	}
	return nil
}

// fleetSize is the number of addresses of BenchPrefix.
func fleetSize() int { return 1 << (32 - BenchPrefix.Bits()) }

func (e *env) run(ctx context.Context, name string, s *Scenario) error {
	switch name {
	case "sweep":
		return e.runSweep(ctx, s)
	case "steady":
		return e.runSteady(ctx, s)
	case "detect":
		return e.runDetect(ctx, s)
	case "http":
		return e.runHTTP(ctx, s)
	case "compare":
		return e.runCompare(ctx, s)
	case "faults":
		return e.runFaults(ctx, s)
	case "passive":
		return e.runPassive(ctx, s)
	}
	return fmt.Errorf("%w %q", ErrUnknownScenario, name)
}

// command returns a command that runs name with args in the prober
// namespace. It is stopped by SIGTERM when ctx is done, and killed if it
// has not exited 5 s later.
func (e *env) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", e.fleet.ProberNS, name}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// commandLine formats a command for the report, without the namespace
// wrapper, which the reader would spell differently.
func commandLine(cmd *exec.Cmd) string {
	args := cmd.Args
	if len(args) > 4 && args[0] == "ip" && args[1] == "netns" && args[2] == "exec" {
		args = args[4:]
	}
	return "ip netns exec PROBER_NS " + strings.Join(args, " ")
}

// tail returns the last n bytes of b as a string, for error messages.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
