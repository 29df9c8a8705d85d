package syn

import (
	"sync"
	"sync/atomic"
)

// probeState is what the prober keeps of a target's last probe, written by
// Launch and read by the reply reader.
type probeState struct {
	sent atomic.Int64  // CLOCK_MONOTONIC ns of the last probe's send
	gen  atomic.Uint32 // generation of the last probe
	done atomic.Uint32 // generation+1 of the last probe answered, 0 if none
}

// states holds a probeState per target id in blocks that are never moved,
// so the table of targets can grow while the prober runs: a block is added
// the first time an id beyond the last one is launched.
type states struct {
	dir atomic.Pointer[[]*stateBlock]
	mu  sync.Mutex // serialises growth, which is rare: once per block
}

const (
	stateShift = 10 // 1024 targets, 16 KiB, a block
	stateMask  = 1<<stateShift - 1
)

type stateBlock [1 << stateShift]probeState

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

// get returns id's state, or nil when no block holds it yet.
func (s *states) get(id uint32) *probeState {
	d := *s.dir.Load()
	if int(id>>stateShift) >= len(d) {
		return nil
	}
	return &d[id>>stateShift][id&stateMask]
}

// reserve returns id's state, adding blocks up to it when needed.
func (s *states) reserve(id uint32) *probeState {
	if st := s.get(id); st != nil {
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
	return &grown[id>>stateShift][id&stateMask]
}
