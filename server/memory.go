package server

import (
	"math"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// minMemoryHeadroom is the least room the daemon's memory limit leaves above
// the memory in use after a load.
const minMemoryHeadroom = 32 << 20

// memoryTuner keeps the daemon's resident memory near what its tables need.
//
// A large fleet makes most of the daemon's memory live and long-lived (about
// 160 bytes a target at a million), and produces bursts of garbage: the
// configuration's expansion while loading, and the state changes of every
// target at start-up. With the Go runtime's defaults the heap may grow to
// twice its live size before a collection, and the pages it touched stay
// resident: about 300 MiB at a million targets, where the tables need 175.
// So the daemon sets a soft memory limit of the memory in use plus an eighth
// (at least minMemoryHeadroom): collections then come as often as garbage
// needs them, which costs little because the steady state makes almost none.
// The limit is lifted while a configuration loads, and set again after. The
// first load returns its garbage to the operating system (one forced
// collection, at start); a reload forces none: it computes the memory in use
// from the live heap the runtime measured at its last collection, so a flood
// of reloads costs no collections. A GOMEMLIMIT in the environment, or
// Options.NoMemoryLimit, leaves the runtime's limit alone.
type memoryTuner struct{ off bool }

func newMemoryTuner(opt *Options) memoryTuner {
	_, userLimit := os.LookupEnv("GOMEMLIMIT")
	return memoryTuner{off: opt.NoMemoryLimit || userLimit}
}

// beforeLoad lifts the limit while a configuration loads and is applied.
func (m memoryTuner) beforeLoad() {
	if !m.off {
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// first returns the garbage of the first load to the operating system, once.
func (m memoryTuner) first() { debug.FreeOSMemory() }

// afterLoad sets the limit to the memory in use plus headroom; it returns
// the limit, or 0 when it leaves the limit alone. The memory in use is what
// the runtime holds, less what it released, less the heap objects beyond the
// live heap of the last collection (garbage not yet collected).
func (m memoryTuner) afterLoad() int64 {
	if m.off {
		return 0
	}
	s := []rtmetrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	rtmetrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != rtmetrics.KindUint64 {
			return 0 // not on this Go version: leave the default
		}
	}
	total, released, objects, live := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64()
	used := int64(total - released)
	if live > 0 && live < objects {
		used -= int64(objects - live)
	}
	limit := used + max(used/8, minMemoryHeadroom)
	debug.SetMemoryLimit(limit)
	return limit
}
