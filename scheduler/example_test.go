package scheduler_test

import (
	"fmt"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
)

// scripted is a [probe.Launcher] whose probes end 10 ms after they are sent
// with the outcomes of a script, the last one repeated.
type scripted struct {
	script  []probe.Outcome
	sent    int
	pending []probe.Result
}

func (l *scripted) Launch(_ int, batch []probe.Request) {
	for _, r := range batch {
		o := l.script[min(l.sent, len(l.script)-1)]
		l.sent++
		l.pending = append(l.pending, probe.Result{ID: r.ID, Gen: r.Gen, Outcome: o,
			Latency: 10 * time.Millisecond, Done: r.Sent + int64(10*time.Millisecond)})
	}
}

// printer is a [scheduler.Observer] that prints each change of state.
type printer struct{}

func (printer) Result(uint32, probe.Result) {}

func (printer) Transition(e scheduler.Event) {
	fmt.Printf("at %v target %d: %v -> %v (%d × %v)\n", time.Duration(e.At), e.Target, e.From, e.To, e.Streak, e.Outcome)
}

// An engine on a simulated clock, driven step by step, as a test drives it:
// a target that answers twice, then refuses, rises after two successes and
// falls after three failures, one probe a second.
func Example() {
	clock := scheduler.NewSimClock(time.Unix(0, 0))
	l := &scripted{script: []probe.Outcome{probe.Success, probe.Success, probe.Refused}}
	checks := []scheduler.Check{{
		Timing:   scheduler.Timing{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3},
		Launcher: l,
	}}
	e, err := scheduler.New(checks, []scheduler.TargetSpec{{Leader: 0}}, scheduler.Options{Shards: 1, Clock: clock, Observer: printer{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for now := int64(0); now < int64(6*time.Second); now += int64(time.Millisecond) {
		clock.Set(now)
		for len(l.pending) > 0 && l.pending[0].Done <= now {
			e.Deliver(l.pending[0])
			l.pending = l.pending[1:]
		}
		e.Step(now)
	}
	fmt.Println("state:", e.Status(0).State)
	// Output:
	// at 1.02s target 0: unknown -> healthy (2 × success)
	// at 4.05s target 0: healthy -> unhealthy (3 × refused)
	// state: unhealthy
}
