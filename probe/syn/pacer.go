package syn

import "time"

// Pacer spaces sends out to a fixed rate. It keeps an absolute schedule from
// its first call, so sleeping late never lowers the average rate, and it
// allocates nothing. A Pacer is owned by one goroutine: give each sender its
// own with its share of the rate.
type Pacer struct {
	perSec float64
	burst  float64
	start  time.Time
	issued float64
}

// NewPacer returns a pacer for rate probes per second that lets up to burst
// probes go at once. A rate of 0 or less means no limit.
func NewPacer(rate float64, burst int) *Pacer {
	return &Pacer{perSec: rate, burst: float64(max(burst, 1))}
}

// Wait blocks until n more probes may be sent and counts them as sent.
func (p *Pacer) Wait(n int) {
	if p.perSec <= 0 {
		return
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.issued += float64(n)
	ahead := p.issued - p.burst - time.Since(p.start).Seconds()*p.perSec
	if ahead > 0 {
		time.Sleep(time.Duration(ahead / p.perSec * float64(time.Second)))
	}
}
