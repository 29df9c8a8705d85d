package http

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/probetest"
	"github.com/sondeprobe/sonde/probe"
)

// benchServer starts a loopback server answering "ok"; with tls it serves
// HTTPS with a certificate for 127.0.0.1.
func benchServer(b *testing.B, tls bool) probe.Target {
	b.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	b.Cleanup(srv.Close)
	return probe.Target{
		Addr: netip.MustParseAddr("127.0.0.1"),
		Port: uint16(srv.Listener.Addr().(*net.TCPAddr).Port),
	}
}

// benchProbe runs probes of tg with p, one goroutine per GOMAXPROCS times
// parallel (1 = sequential), and reports probes per second. Each probe
// opens a new connection (H8) and closes it with an RST.
func benchProbe(b *testing.B, p *Prober, tg probe.Target, parallel bool) {
	ctx := context.Background()
	one := func() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r := p.Probe(pctx, tg)
		cancel()
		if r.Outcome != probe.Success {
			b.Fatalf("outcome %v", r.Outcome)
		}
	}
	b.ReportAllocs()
	if !parallel {
		for b.Loop() {
			one()
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
		return
	}
	start, cpu := time.Now(), probetest.StartCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			one()
		}
	})
	cpu.Report(b)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "probes/s")
}

func BenchmarkHTTPProbe(b *testing.B) {
	tg := benchServer(b, false)
	b.Run("sequential", func(b *testing.B) { benchProbe(b, mustNew(b, Options{Body: "ok"}), tg, false) })
	b.Run("parallel", func(b *testing.B) { benchProbe(b, mustNew(b, Options{Body: "ok"}), tg, true) })
}

func BenchmarkHTTPSProbe(b *testing.B) {
	tg := benchServer(b, true)
	p := mustNew(b, Options{Scheme: "https", Body: "ok", TLS: TLSOptions{InsecureSkipVerify: true}})
	b.Run("sequential", func(b *testing.B) { benchProbe(b, p, tg, false) })
	b.Run("parallel", func(b *testing.B) { benchProbe(b, p, tg, true) })
}

// benchLoops runs probes of tg on loops, inFlight at a time, and reports
// probes per second. Each probe opens a new connection (H8) and closes it
// with an RST.
func benchLoops(b *testing.B, e engine, p *Prober, tg probe.Target, inFlight int) {
	results := make(probetest.Chan, inFlight)
	ls := startLoops(b, e, 0, tg, results, nil)
	probetest.BenchInFlight(b, mustLauncher(b, ls, p), results, inFlight)
}

func BenchmarkLoopHTTPProbe(b *testing.B) {
	tg := benchServer(b, false)
	for _, e := range engines {
		b.Run(e.name+"/sequential", func(b *testing.B) { benchLoops(b, e, mustNew(b, Options{Body: "ok"}), tg, 1) })
		b.Run(e.name+"/parallel", func(b *testing.B) { benchLoops(b, e, mustNew(b, Options{Body: "ok"}), tg, 64) })
	}
}

// BenchmarkProbePaths compares the two paths against a server that costs
// little (quietServer), so the profile is the prober's.
func BenchmarkProbePaths(b *testing.B) {
	tg := quietServer(b)
	b.Run("oneshot", func(b *testing.B) { benchProbe(b, mustNew(b, Options{Body: "ok"}), tg, true) })
	for _, e := range engines {
		b.Run("loops/"+e.name, func(b *testing.B) { benchLoops(b, e, mustNew(b, Options{Body: "ok"}), tg, 64) })
	}
}
