// Command sonde is a health prober for large fleets. See README.md.
//
// Usage:
//
//	sonde run -config FILE [-listen ADDR] [-shard i/N] | -demo
//	sonde probe [flags] URL...
//	sonde config check [-json] [-shard i/N] FILE
//	sonde scan -port P[,P2…] [-rate PPS] [-timeout D] [-json] TARGET…
//	sonde bench [-scenario NAME…] [-json] [-keep]
//	sonde version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sondeprobe/sonde/internal/earlysignal"
)

// Exit codes shared by every subcommand.
const (
	exitOK      = 0 // success; for probe: every target healthy
	exitFailure = 1 // the command ran and found something unhealthy, or failed at run time
	exitUsage   = 2 // bad usage, bad flags or an invalid configuration
)

// exitError carries the exit code a subcommand wants; its message goes to stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as a usage or configuration error (exit 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// silentExit ends the command with code without printing anything more.
type silentExit int

func (s silentExit) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

const usage = `sonde is a health prober for large fleets.

Usage:
  sonde run -config FILE [-listen ADDR]   probe a fleet: metrics, JSON API, reload when FILE changes or on SIGHUP
  sonde run -demo                   probe built-in demo backends on loopback
  sonde probe [flags] URL...        probe tcp://, connect://, syn://, http(s):// URLs once; exit 0 when all healthy
  sonde config check [-json] FILE   validate a config and print its effective settings and windows
  sonde scan -port P[,P…] TARGET…   sweep addresses once with the SYN prober (needs CAP_NET_RAW)
  sonde bench [-scenario NAME…]     measure sweep rate, scale, detection and HTTP rate on a private fleet (root)
  sonde version                     print version, capabilities and the TCP probe path

Run "sonde COMMAND -h" for a command's flags.
`

// main runs a command until it ends or SIGINT or SIGTERM cancels its
// context. The signals are caught from the process's first moments
// (package earlysignal); only sonde run reloads on SIGHUP, the other
// commands end on it.
// newFlagSet returns the flag set of subcommand name: errors and help go to
// out, and the help is usage followed by the flags' defaults.
func newFlagSet(name, usage string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usage)
		fs.PrintDefaults()
	}
	return fs
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		earlysignal.ReleaseHangup()
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		<-earlysignal.Stops()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// report prints err (when it has a message to show) and returns the exit code.
func report(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var s silentExit
	if errors.As(err, &s) {
		return int(s)
	}
	fmt.Fprintln(stderr, "sonde:", err)
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitFailure
}

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return silentExit(exitUsage)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runRun(ctx, rest, stdout, stderr)
	case "probe":
		return runProbe(ctx, rest, stdout, stderr)
	case "config":
		return runConfig(ctx, rest, stdout, stderr)
	case "scan":
		return runScan(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "version":
		return runVersion(rest, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError(fmt.Errorf("unknown command %q", cmd))
	}
}
