package probetest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sondeprobe/sonde/probe"
)

// Chan is a [probe.Sink] that sends every result to the channel.
type Chan chan probe.Result

// Deliver sends r.
func (c Chan) Deliver(r probe.Result) { c <- r }

// CPU is the process's user and system CPU time at a benchmark's start.
type CPU struct{ user, sys time.Duration }

// StartCPU reads the process's CPU time now.
func StartCPU(b *testing.B) CPU {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return CPU{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

// Report reports the process's user and system CPU per operation since c:
// the prober's, the benchmark's and a test server's together, so only the
// difference between two variants against the same server is the
// prober's.
func (c CPU) Report(b *testing.B) {
	now := StartCPU(b)
	n := float64(b.N)
	b.ReportMetric(float64((now.user-c.user).Microseconds())/n, "user-µs/op")
	b.ReportMetric(float64((now.sys-c.sys).Microseconds())/n, "sys-µs/op")
}

// BenchInFlight runs b's probes through l, inFlight at a time: a new
// request as each result of results comes back, every one a success (each
// with its own id and generation from 1 up; the launcher's target function
// must answer for them). It reports allocations, CPU per probe and probes
// a second.
func BenchInFlight(b *testing.B, l probe.Launcher, results <-chan probe.Result, inFlight int) {
	batch := make([]probe.Request, 1)
	var gen uint32
	launch := func() {
		gen++
		now := probe.Nanotime()
		batch[0] = probe.Request{ID: gen, Gen: gen, Sent: now, Deadline: now + int64(5*time.Second)}
		l.Launch(0, batch)
	}
	for range inFlight {
		launch()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := StartCPU(b)
	for b.Loop() {
		if r := <-results; r.Outcome != probe.Success {
			b.Fatalf("outcome %v", r.Outcome)
		}
		launch()
	}
	cpu.Report(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
	b.StopTimer()
	for range inFlight {
		<-results
	}
}
