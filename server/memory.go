package server

import (
	"math"
	"os"
	"runtime"
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
// resident: about 300 MiB at a million targets, where the tables need
// 175. So after every load the daemon returns free memory to the operating
// system and sets a soft memory limit of the memory in use plus an eighth (at
// least minMemoryHeadroom): collections then come as often as garbage needs
// them, which costs little because the steady state makes almost none. The
// limit is lifted while a configuration loads (two generations are alive
// then). A GOMEMLIMIT in the environment, or Options.NoMemoryLimit, leaves the
// runtime's limit alone.
type memoryTuner struct{ off bool }

func newMemoryTuner(opt *Options) memoryTuner {
	_, userLimit := os.LookupEnv("GOMEMLIMIT")
	return memoryTuner{off: opt.NoMemoryLimit || userLimit}
}

// beforeLoad lifts the limit while a configuration loads and its generation
// is built.
func (m memoryTuner) beforeLoad() {
	if !m.off {
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// loaded collects the garbage of a configuration's loading, so the
// generation built next reuses that memory instead of adding to it.
func (m memoryTuner) loaded() { runtime.GC() }

// afterLoad returns free memory to the operating system and sets the limit;
// it returns the limit, or 0 when it leaves the limit alone.
func (m memoryTuner) afterLoad() int64 {
	debug.FreeOSMemory()
	if m.off {
		return 0
	}
	s := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 || s[1].Value.Kind() != rtmetrics.KindUint64 {
		return 0 // not on this Go version: leave the default
	}
	used := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	limit := used + max(used/8, minMemoryHeadroom)
	debug.SetMemoryLimit(limit)
	return limit
}
