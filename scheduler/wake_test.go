package scheduler

import (
	"testing"
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// TestDeliverWakes checks when a result wakes its parked shard: always when
// the shard sleeps longer than a tick, never when its timer fires within the
// tick (it takes the result then), and always when the result overflows the
// ring, whatever the shard's timer.
func TestDeliverWakes(t *testing.T) {
	t.Parallel()
	checks := []Check{{Timing: Timing{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}, Launcher: silentLauncher{}}}
	e, err := New(checks, []TargetSpec{{Leader: 0}}, Options{Shards: 1, RingSize: 2, Clock: NewSimClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	s := e.shards[0]
	woken := func() bool {
		select {
		case <-s.wake:
			return true
		default:
			return false
		}
	}
	park := func(soon bool) {
		s.soon.Store(soon)
		s.parked.Store(true)
	}
	r := probe.Result{ID: 0}

	park(false)
	if s.deliver(&r, 0) || !woken() {
		t.Fatal("a result did not wake a shard parked for longer than a tick")
	}
	if s.parked.Load() {
		t.Fatal("woken shard still marked parked")
	}

	park(true)
	if s.deliver(&r, 0) || woken() {
		t.Fatal("a result woke a shard whose timer fires within the tick")
	}
	if !s.parked.Load() {
		t.Fatal("unwoken shard no longer marked parked")
	}

	// The ring of two is full now; the next result overflows and must
	// wake the shard although its timer is near.
	if !s.deliver(&r, 0) {
		t.Fatal("a third result fitted a ring of two")
	}
	if !woken() {
		t.Fatal("an overflowing result did not wake the shard")
	}
	s.step(0)
	if !s.ring.Empty() || s.overflowed.Load() {
		t.Fatal("step left results in the ring or the overflow list")
	}
}
