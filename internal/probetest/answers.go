package probetest

import (
	"container/heap"

	"github.com/sondeprobe/sonde/probe"
)

// Answers are a fake prober's answers waiting for their time, for
// simulations on a simulated clock: earliest Done first, then lowest ID,
// so that a simulated run is the same every time.
type Answers struct{ h answerHeap }

// Add makes r wait until r.Done.
func (a *Answers) Add(r probe.Result) { heap.Push(&a.h, r) }

// Next returns the Done of the earliest waiting answer; false when none
// waits.
func (a *Answers) Next() (int64, bool) {
	if len(a.h) == 0 {
		return 0, false
	}
	return a.h[0].Done, true
}

// Due hands every answer whose Done is at or before at to deliver, earliest
// first.
func (a *Answers) Due(at int64, deliver func(probe.Result)) {
	for len(a.h) > 0 && a.h[0].Done <= at {
		deliver(heap.Pop(&a.h).(probe.Result))
	}
}

// answerHeap is the heap behind Answers.
type answerHeap []probe.Result

func (h answerHeap) Len() int { return len(h) }
func (h answerHeap) Less(i, j int) bool {
	if h[i].Done != h[j].Done {
		return h[i].Done < h[j].Done
	}
	return h[i].ID < h[j].ID
}
func (h answerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *answerHeap) Push(x any)   { *h = append(*h, x.(probe.Result)) }
func (h *answerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
