package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/sondeprobe/sonde/bench"
)

const benchUsage = `Usage: sonde bench [-scenario NAME[,NAME…]] [-json] [-keep] [-quick] [flags]

Builds a private test fleet (two network namespaces joined by a veth; the
fleet side answers for 198.18.0.0/15, with known subsets dropped and
rejected), runs the scenarios against it and prints what they measured, with
the machine they ran on. Nothing leaves the two namespaces. The fleet is
removed at the end, also on Ctrl-C, unless -keep. Needs root.

Scenarios (default: all, in this order):
  sweep    sonde scan of the whole fleet as fast as it stays exact
  steady   sonde run with -targets TCP targets at -interval for -duration
  detect   a slice of the fleet starts dropping; time to unhealthy vs W1/W3
  http     HTTP probes/s (new connection per probe) and connect() probes/s
  compare  zmap, masscan and blackbox_exporter on the same fleet, if installed

Flags:
`

// runBench implements `sonde bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		scenarios []string
		asJSON    bool
		opt       bench.Options
		quiet     bool
		binary    string
	)
	fs.Func("scenario", "scenario `names` to run, comma-separated or repeated (default all)", func(s string) error {
		for _, n := range strings.Split(s, ",") {
			if n = strings.TrimSpace(n); n != "" {
				scenarios = append(scenarios, n)
			}
		}
		return nil
	})
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&opt.Keep, "keep", false, "keep the fleet's namespaces and the run's files (configs, outputs) after the run; the report names them")
	fs.BoolVar(&opt.Quick, "quick", false, "a smoke run of a few seconds per scenario on a small part of the fleet")
	fs.IntVar(&opt.Runs, "runs", 0, "repetitions of each sweep, and rounds of compare; medians are reported (default 3, 1 with -quick)")
	fs.IntVar(&opt.Steady.Targets, "targets", 0, "steady: TCP targets, (address, port) pairs over the fleet (default 1000000)")
	fs.DurationVar(&opt.Steady.Interval, "interval", 0, "steady: probe interval of every target (default 10s)")
	fs.DurationVar(&opt.Steady.Duration, "duration", 0, "steady: how long the steady state is measured (default 60s)")
	fs.DurationVar(&opt.HTTPDuration, "http-duration", 0, "http and compare: length of each rate measurement (default 5s)")
	fs.BoolVar(&quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&binary, "sonde", "", "sonde `binary` that runs the scans and daemons (default: this one)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return silentExit(exitOK)
		}
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("bench: unexpected argument %q", fs.Arg(0)))
	}
	for _, n := range scenarios {
		if !slices.Contains(bench.Scenarios, n) {
			return usageError(fmt.Errorf("bench: unknown scenario %q; want %s", n, strings.Join(bench.Scenarios, ", ")))
		}
	}
	opt.Scenarios = scenarios
	if os.Geteuid() != 0 {
		return errors.New("sonde bench needs root: it creates network namespaces, a veth pair, routes and firewall rules, and runs the SYN prober (run it with sudo)")
	}
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find the sonde binary: %w", err)
		}
		binary = exe
	}
	opt.Binary, opt.Version = binary, buildVersion()
	if !quiet {
		log := slog.New(slog.NewTextHandler(stderr, nil))
		opt.Progress = func(msg string, args ...any) { log.Info(msg, args...) }
	}
	rep, runErr := bench.Run(ctx, opt)
	if rep != nil {
		var werr error
		if asJSON {
			werr = rep.WriteJSON(stdout)
		} else {
			werr = rep.WriteTable(stdout)
		}
		if werr != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", werr))
		}
	}
	if runErr != nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	for _, s := range rep.Scenarios {
		if s.Status == bench.StatusFailed {
			return fmt.Errorf("bench: scenario %s failed: %s", s.Name, s.Error)
		}
	}
	return nil
}
