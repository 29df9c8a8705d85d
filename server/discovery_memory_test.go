package server

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// What a discovered target costs, against a target a configuration lists:
// the same addresses, either as one CIDR block in a pool's targets or as a
// file_sd file of one group per target with two labels each (the usual
// output of an inventory tool: about 80 bytes of JSON a target). Both
// pools have health checks off, so the measure holds the tables and not the
// probes.

// targetMemory is what one daemon's targets cost: its live heap after the
// load, and its peak resident memory during it, above what the process
// held before.
type targetMemory struct {
	heap, peakRSS float64 // bytes per target
}

// measureTargets starts a daemon whose pool has the 2^bits addresses of
// 127.16.0.0/(32-bits), listed (discovered false) or discovered from a
// file_sd file, waits until they run, and returns what they cost.
func measureTargets(tb testing.TB, bits int, discovered bool) targetMemory {
	n := 1 << bits
	dir := tb.TempDir()
	pool := fmt.Sprintf(`{name: p, check: web, health_checks: false, targets: ["127.16.0.0/%d"]}`, 32-bits)
	if discovered {
		sd := filepath.Join(dir, "sd.json")
		writeLabeledSD(tb, sd, n)
		pool = fmt.Sprintf(`{name: p, check: web, health_checks: false, file_sd_configs: [{files: [%q]}]}`, sd)
	}
	yaml := `
checks:
  web: {protocol: tcp, port: 9, tcp_mode: connect, interval: 1h, timeout: 1s}
pools:
  - ` + pool + "\n"
	before := liveHeap()
	rssBefore := resetPeakRSS(tb)
	td := startDaemonWith(tb, yaml, func(o *Options) {
		o.NoMemoryTuning = true
		o.DiscoveryDebounce = time.Millisecond
	})
	testenv.Eventually(tb, fmt.Sprintf("pool p with %d members", n), func() (int, bool) {
		m := len(td.d.cur.Load().cfg.Pools[0].Members)
		return m, m == n
	})
	m := targetMemory{
		heap:    float64(liveHeap()-before) / float64(n),
		peakRSS: float64(peakRSS(tb)-rssBefore) / float64(n),
	}
	td.http.Close()
	if err := td.d.Stop(); err != nil {
		tb.Error(err)
	}
	return m
}

// writeLabeledSD writes a file_sd file of n targets in 127.16.0.0/12, a
// group each, labelled with a zone (7 values) and a rack (5,000).
func writeLabeledSD(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("[")
	for i := range n {
		if i > 0 {
			w.WriteString(",\n")
		}
		a := netip.AddrFrom4([4]byte{127, byte(16 + i>>16), byte(i >> 8), byte(i)})
		fmt.Fprintf(w, `{"targets":["%s:9"],"labels":{"zone":"zone-%d","rack":"rack-%d"}}`, a, i%7, i%5000)
	}
	w.WriteString("]\n")
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// liveHeap returns the heap in use after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// resetPeakRSS resets the process's peak resident memory (VmHWM) to its
// resident memory now, which it returns.
func resetPeakRSS(tb testing.TB) uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		testenv.Unavailable(tb, "cannot reset the peak RSS", err)
	}
	return procStatus(tb, "VmRSS")
}

// peakRSS returns the process's peak resident memory since the last reset.
func peakRSS(tb testing.TB) uint64 { return procStatus(tb, "VmHWM") }

func procStatus(tb testing.TB, field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestDiscoveredTargetMemory bounds what a discovered target costs at
// 131,072 targets: its live heap at most twice a listed target's, and at
// most 400 bytes (before discovery kept compact chunks, ~1,300).
func TestDiscoveredTargetMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("loads 131,072 targets twice, and measures memory, which the race detector changes")
	}
	static := measureTargets(t, 17, false)
	disc := measureTargets(t, 17, true)
	t.Logf("heap per target: listed %.0f B, discovered %.0f B; peak RSS per target: listed %.0f B, discovered %.0f B",
		static.heap, disc.heap, static.peakRSS, disc.peakRSS)
	if disc.heap > 2*static.heap || disc.heap > 400 {
		t.Errorf("a discovered target holds %.0f bytes of heap, a listed one %.0f: want at most twice as much, and at most 400", disc.heap, static.heap)
	}
}

// BenchmarkDiscoveredTargetMemory reports what a million targets cost,
// listed and discovered: heap per target after the load, and peak resident
// memory per target while loading (bytes above the process's before). Run
// it once:
//
//	go test -run '^$' -bench BenchmarkDiscoveredTargetMemory -benchtime 1x ./server/
func BenchmarkDiscoveredTargetMemory(b *testing.B) {
	for _, discovered := range []bool{false, true} {
		b.Run(map[bool]string{false: "listed", true: "discovered"}[discovered], func(b *testing.B) {
			var m targetMemory
			for b.Loop() {
				m = measureTargets(b, 20, discovered)
			}
			b.ReportMetric(m.heap, "heap-B/target")
			b.ReportMetric(m.peakRSS, "peak-rss-B/target")
		})
	}
}
