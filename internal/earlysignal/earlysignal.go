// Package earlysignal catches the signals sonde acts on (SIGHUP, SIGINT,
// SIGTERM) from the first moments of the process: its initialisation runs
// among the binary's first packages, milliseconds before package main's,
// which waits for every package to initialise (some take milliseconds).
// Until a program asks for a signal, the Go runtime ends the process on it,
// so a SIGHUP sent to a daemon that had just been started (a reload right
// after a start, by hand or by systemd's ExecReload) killed it. Only a
// signal that comes before the runtime itself runs can still end the
// process. It imports nothing but the standard library's signal plumbing,
// so it is initialised as soon as that is: Go initialises packages in
// import-path order once their imports are, and only a few small packages
// (about a millisecond in all) come first.
//
// The channels are the process's: package main reads them, and a command
// that does not reload gives SIGHUP back its default with [ReleaseHangup].
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

var (
	hangups = make(chan os.Signal, 1)
	stops   = make(chan os.Signal, 1)
	// hupIgnored: the process started with SIGHUP ignored (nohup).
	hupIgnored bool
)

func init() {
	hupIgnored = signal.Ignored(syscall.SIGHUP)
	signal.Notify(hangups, syscall.SIGHUP)
	signal.Notify(stops, os.Interrupt, syscall.SIGTERM)
}

// Hangups receives SIGHUP, from the process's start; one that arrives
// before it is read waits in the channel, and more arriving meanwhile are
// one.
func Hangups() <-chan os.Signal { return hangups }

// Stops receives SIGINT and SIGTERM, from the process's start, as Hangups
// does SIGHUP.
func Stops() <-chan os.Signal { return stops }

// ReleaseHangup gives SIGHUP the action it had when the process started
// back (it ends the process, unless the process started with it ignored),
// for commands that do not reload. A SIGHUP caught before ends the process
// now, as it would have ended it then.
func ReleaseHangup() {
	signal.Reset(syscall.SIGHUP)
	select {
	case <-hangups:
		if hupIgnored {
			return
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		for {
			time.Sleep(time.Hour) // until its default action ends the process
		}
	default:
	}
}
