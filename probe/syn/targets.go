package syn

import (
	"sync"
	"sync/atomic"
)

// probeState is what the prober keeps of a target's last probe, written by
// Launch and Resend and read by the reply reader: the time of its latest
// send, whose three lowest bits say whether it was answered and whether this
// host let the probe down (a send time has them clear; 8 ns are not worth
// 4 bytes a target), and its generation. 12 bytes a target, in two arrays
// of the target's block.
type probeState struct {
	sent *atomic.Int64  // CLOCK_MONOTONIC ns of the last probe's latest send | flag bits; 0 before any
	gen  *atomic.Uint32 // generation of the last probe
}

// The low bits of probeState.sent.
const (
	answered  = 1      // the probe has its answer
	sentLate  = 1 << 1 // a send left after half the probe's time had passed
	resendErr = 1 << 2 // a retransmission could not be sent for lack of buffers
	flagBits  = answered | sentLate | resendErr
)

// states holds a probeState per target id in blocks that are never moved,
// so the table of targets can grow while the prober runs: a block is added
// the first time an id beyond the last one is launched.
type states struct {
	dir atomic.Pointer[[]*stateBlock]
	mu  sync.Mutex // serialises growth, which is rare: once per block
}

const (
	stateShift = 10 // 1024 targets, 12 KiB, a block
	stateMask  = 1<<stateShift - 1
)

type stateBlock struct {
	sent [1 << stateShift]atomic.Int64
	gen  [1 << stateShift]atomic.Uint32
}

func newStates(n int) *states {
	mem := make([]stateBlock, (n+stateMask)>>stateShift) // one allocation for the first targets
	blocks := make([]*stateBlock, len(mem))
	for i := range mem {
		blocks[i] = &mem[i]
	}
	s := &states{}
	s.dir.Store(&blocks)
	return s
}

// get returns id's state, or false when no block holds it yet.
func (s *states) get(id uint32) (probeState, bool) {
	d := *s.dir.Load()
	if int(id>>stateShift) >= len(d) {
		return probeState{}, false
	}
	b := d[id>>stateShift]
	return probeState{&b.sent[id&stateMask], &b.gen[id&stateMask]}, true
}

// reserve returns id's state, adding blocks up to it when needed.
func (s *states) reserve(id uint32) probeState {
	if st, ok := s.get(id); ok {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := *s.dir.Load()
	grown := append([]*stateBlock(nil), d...)
	for len(grown) <= int(id>>stateShift) {
		grown = append(grown, new(stateBlock))
	}
	s.dir.Store(&grown)
	b := grown[id>>stateShift]
	return probeState{&b.sent[id&stateMask], &b.gen[id&stateMask]}
}
