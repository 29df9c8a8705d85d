package remediate

import "time"

// The budget windows, in the order reasons are named.
var windows = [...]struct {
	reason string
	span   int64
}{
	{"max_per_hour", int64(time.Hour)},
	{"max_per_12h", int64(12 * time.Hour)},
	{"max_per_day", int64(24 * time.Hour)},
}

// budget counts one remediation's firings in sliding windows of 1 h, 12 h
// and 24 h. It is owned by the [Manager] and guarded by its mutex.
type budget struct {
	fired []int64 // Nanotime of each firing of the last 24 h, oldest first
}

// limits holds the caps of the windows in the order of windows; 0 is no cap.
type limits [len(windows)]int

// prune drops firings older than the longest window.
func (b *budget) prune(now int64) {
	i := 0
	for i < len(b.fired) && b.fired[i] <= now-windows[len(windows)-1].span {
		i++
	}
	b.fired = b.fired[i:]
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

// exhausted returns the reason a firing at now is withheld, "" when the
// budget allows it. Of several full windows it names the one that frees a
// slot last (the longer one on a tie).
func (b *budget) exhausted(now int64, lim limits) string {
	b.prune(now)
	reason, frees := "", int64(0)
	for i, w := range windows {
		if lim[i] == 0 {
			continue
		}
		if n := b.used(now, w.span); n >= lim[i] {
			// The slot frees when the oldest firing that counts leaves.
			at := b.fired[len(b.fired)-n] + w.span
			if reason == "" || at >= frees { // on a tie, the longer window
				reason, frees = w.reason, at
			}
		}
	}
	return reason
}

// take books a firing at now.
func (b *budget) take(now int64) { b.fired = append(b.fired, now) }
