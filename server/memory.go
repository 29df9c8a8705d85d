package server

import (
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// minMemoryHeadroom is the least room the daemon leaves its heap above the
// live heap between two collections.
const minMemoryHeadroom = 32 << 20

// loadGCPercent is the GOGC while a configuration loads.
const loadGCPercent = 25

// memoryTuner keeps the daemon's resident memory near what its tables need.
//
// A large fleet makes most of the daemon's memory live and long-lived (about
// 130 bytes a target at ten million), and produces bursts of garbage: the
// configuration's expansion while loading, and the state changes of every
// target at start-up. With the Go runtime's defaults (GOGC=100) the heap may
// grow to twice its live size before a collection, and the pages it touched
// stay resident. So after a load the daemon sets the collector's goal to the
// live heap plus a sixty-fourth (at least minMemoryHeadroom): collections
// then come as often as garbage needs them, which costs little because the
// steady state makes almost none. The goal is a percentage of the live heap,
// not a fixed limit, so it follows the heap when it grows after a load (the
// first round of probes, the state a running fleet gathers): a limit fixed at
// the load's size would leave the collector running back to back, at up to
// half the CPU, once the live heap reached it. While a configuration loads
// the goal is a quarter of the live heap (loadGCPercent), enough room for the
// expansion's garbage without letting the heap double: at ten million
// targets the peak resident memory of the first load drops from 1670 MiB
// (GOGC=100) to the steady state's 1354 MiB, and the load is no slower
// (9.7 s against 11.2 s, one run each). The first load returns its garbage to the operating system
// (one forced collection, at start); a reload forces none: it reads the live
// heap the runtime measured at its last collection, so a flood of reloads
// costs no collections. GOGC or GOMEMLIMIT in the environment, or
// Options.NoMemoryTuning, leaves the runtime's settings alone.
type memoryTuner struct{ off bool }

func newMemoryTuner(opt *Options) memoryTuner {
	_, userGC := os.LookupEnv("GOGC")
	_, userLimit := os.LookupEnv("GOMEMLIMIT")
	return memoryTuner{off: opt.NoMemoryTuning || userGC || userLimit}
}

// beforeLoad sets the goal of a load while a configuration loads and is
// applied.
func (m memoryTuner) beforeLoad() {
	if !m.off {
		debug.SetGCPercent(loadGCPercent)
	}
}

// first returns the garbage of a load to the operating system: the first
// load's, and a discovery update's that brought most of the fleet.
func (m memoryTuner) first() { debug.FreeOSMemory() }

// afterLoad sets the collector's goal to the live heap plus headroom; it
// returns the percentage it set (GOGC), or 0 when it leaves the runtime
// alone.
func (m memoryTuner) afterLoad() int {
	if m.off {
		return 0
	}
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0 // not on this Go version: leave the default
	}
	percent := gcPercent(s[0].Value.Uint64())
	debug.SetGCPercent(percent)
	return percent
}

// gcPercent is the GOGC that lets a heap of live bytes grow by a
// sixty-fourth, and by at least minMemoryHeadroom, before a collection.
func gcPercent(live uint64) int {
	if live == 0 {
		return 100
	}
	room := max(live/64, minMemoryHeadroom)
	return int(min((room*100+live-1)/live, 100))
}
