package remediate

import "time"

// The budget's caps, in the order of limits and of the reasons named.
const (
	capHour = iota
	capPeriod
	capDay
	numCaps
)

// reasons name the caps: the reasons a firing is withheld.
var reasons = [numCaps]string{"max_per_hour", "max_per_12h", "max_per_day"}

// Spans of the hour and day windows, and length of a 12-hour period.
const (
	hourSpan   = int64(time.Hour)
	periodSpan = int64(12 * time.Hour)
	daySpan    = int64(24 * time.Hour)
)

// budget counts one remediation's firings: in sliding windows of 1 h and
// 24 h, and in fixed 12-hour periods (App Service's per-scale-unit count,
// which resets every 12 hours). A period begins with the first firing made
// when none is open and ends 12 h later, when its count resets. It is owned
// by the [Manager] and guarded by its mutex.
type budget struct {
	fired    []int64 // Nanotime of each firing of the last 24 h, oldest first
	period   int64   // Nanotime the current 12-hour period began
	inPeriod int     // firings in that period; 0 when none is open
}

// limits holds the caps in the order capHour, capPeriod, capDay; 0 is no cap.
type limits [numCaps]int

// prune drops firings older than the day window, and closes a period
// that has ended.
func (b *budget) prune(now int64) {
	i := 0
	for i < len(b.fired) && b.fired[i] <= now-daySpan {
		i++
	}
	b.fired = b.fired[i:]
	if b.inPeriod > 0 && now >= b.period+periodSpan {
		b.inPeriod = 0
	}
}

// used returns the firings in the window of length span ending at now.
func (b *budget) used(now, span int64) int {
	n := 0
	for _, t := range b.fired {
		if t > now-span {
			n++
		}
	}
	return n
}

// periodUsed returns the firings of the 12-hour period open at now and
// when it ends; 0 firings when none is open.
func (b *budget) periodUsed(now int64) (n int, ends int64) {
	if b.inPeriod == 0 || now >= b.period+periodSpan {
		return 0, 0
	}
	return b.inPeriod, b.period + periodSpan
}

// exhausted returns the reason a firing at now is withheld, "" when the
// budget allows it. Of several full caps it names the one that frees a
// slot last (the longer one on a tie).
func (b *budget) exhausted(now int64, lim limits) string {
	b.prune(now)
	reason, frees := "", int64(0)
	full := func(c int, at int64) {
		if reason == "" || at >= frees { // called shortest cap first: on a tie, the longer
			reason, frees = reasons[c], at
		}
	}
	// A window's slot frees when the oldest firing that counts leaves it.
	if n := b.used(now, hourSpan); lim[capHour] > 0 && n >= lim[capHour] {
		full(capHour, b.fired[len(b.fired)-n]+hourSpan)
	}
	// A period's count resets when the period ends.
	if n, ends := b.periodUsed(now); lim[capPeriod] > 0 && n >= lim[capPeriod] {
		full(capPeriod, ends)
	}
	if n := b.used(now, daySpan); lim[capDay] > 0 && n >= lim[capDay] {
		full(capDay, b.fired[len(b.fired)-n]+daySpan)
	}
	return reason
}

// take books a firing at now, opening a 12-hour period if none is open.
func (b *budget) take(now int64) {
	b.prune(now)
	if b.inPeriod == 0 {
		b.period = now
	}
	b.inPeriod++
	b.fired = append(b.fired, now)
}
