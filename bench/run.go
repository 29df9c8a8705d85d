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
)

// Scenarios are the names of the scenarios [Run] knows, in the order it runs
// them.
var Scenarios = []string{"sweep", "steady", "detect", "http", "compare"}

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
	// Progress, when not nil, is told what the run is doing.
	Progress func(msg string, args ...any)
}

// SteadyOptions size the steady scenario.
type SteadyOptions struct {
	Targets  int           // (address, port) targets
	Interval time.Duration // each target's probe interval
	Duration time.Duration // how long the steady state is measured
}

// ErrUnknownScenario is returned by [Run] for a scenario name it does not
// know.
var ErrUnknownScenario = errors.New("unknown scenario")

// maxSteadyTargets bounds the steady scenario: 64 ports over the fleet.
const maxSteadyTargets = 64 << 17

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
		o.Scenarios = Scenarios
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
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return nil
}

// env is what the scenarios of one run share.
type env struct {
	opt   Options
	fleet *Fleet
	dir   string // temporary files: configs, outputs
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
		return nil, ErrNotRoot
	}
	rep = &Report{Machine: DescribeMachine(opt.Version)}
	dir, err := os.MkdirTemp("", "sonde-bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if !opt.Keep {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}()
	ports := (opt.Steady.Targets + fleetSize() - 1) / fleetSize()
	opt.Progress("building the fleet", "prefix", BenchPrefix, "steady_ports", ports)
	f, err := NewFleet(benchFleetConfig(ports))
	if err != nil {
		return nil, fmt.Errorf("build fleet: %w", err)
	}
	rep.Fleet = FleetInfo{Prefix: f.Prefix.String(), ProberNS: f.ProberNS, FleetNS: f.FleetNS, Kept: opt.Keep, Dir: dir}
	defer func() {
		if !opt.Keep {
			if cerr := f.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("remove fleet: %w", cerr))
			}
		}
	}()
	e := &env{opt: opt, fleet: f, dir: dir}
	for _, name := range Scenarios {
		if !slices.Contains(opt.Scenarios, name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("bench interrupted: %w", err)
		}
		opt.Progress("scenario", "name", name)
		start := time.Now()
		s := &Scenario{Name: name}
		if err := e.run(ctx, name, s); err != nil {
			s.Status, s.Error = StatusFailed, err.Error()
		}
		s.finish()
		s.Seconds = time.Since(start).Seconds()
		rep.Scenarios = append(rep.Scenarios, s)
		opt.Progress("scenario done", "name", name, "status", s.Status, "seconds", int(s.Seconds))
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("bench interrupted: %w", err)
	}
	return rep, nil
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
