package syn

import (
	"time"

	"github.com/sondeprobe/sonde/probe"
)

// pacer spaces sends out to a fixed rate. It keeps an absolute schedule from
// its first call, so sleeping late never lowers the average rate, and it
// allocates nothing. A pacer is owned by one goroutine: give each sender its
// own with its share of the rate.
type pacer struct {
	perSec float64
	burst  float64
	start  int64 // first call, in now's nanoseconds; 0 before it
	issued float64

	now   func() int64        // monotonic nanoseconds
	sleep func(time.Duration) // blocks for a duration
}

// newPacer returns a pacer for rate probes per second that lets up to burst
// probes go at once. A rate of 0 or less means no limit.
func newPacer(rate float64, burst int) *pacer {
	return &pacer{perSec: rate, burst: float64(max(burst, 1)), now: probe.Nanotime, sleep: time.Sleep}
}

// wait blocks until n more probes may be sent and counts them as sent.
func (p *pacer) wait(n int) {
	if p.perSec <= 0 {
		return
	}
	now := p.now()
	if p.start == 0 {
		p.start = now
	}
	p.issued += float64(n)
	ahead := p.issued - p.burst - float64(now-p.start)/1e9*p.perSec
	if ahead > 0 {
		p.sleep(time.Duration(ahead / p.perSec * float64(time.Second)))
	}
}
