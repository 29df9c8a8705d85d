package main

import (
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/sondeprobe/sonde/internal/testenv"
)

func TestMain(m *testing.M) {
	// earlysignal's init catches SIGHUP, SIGINT and SIGTERM for package
	// main's func main, which a test binary does not run: give them their
	// defaults back, so Ctrl-C or a timeout's SIGTERM ends a test run.
	signal.Reset(syscall.SIGHUP, os.Interrupt, syscall.SIGTERM)
	testenv.Main(m)
}
