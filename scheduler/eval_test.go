package scheduler

import (
	"strings"
	"testing"
	"time"
)

// run feeds results given as a string ('+' success, '-' failure) and returns
// the state after each, as a string of 'U' unknown, 'H' healthy, 'X' unhealthy.
func runEval(c Timing, results string) string {
	st := evalState{state: c.Initial}
	var b strings.Builder
	for _, r := range results {
		c.observe(&st, r == '+')
		b.WriteByte("UHX"[st.state])
	}
	return b.String()
}

func TestObserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		check   Timing
		results string
		want    string
	}{
		{"E1 fall 3 rise 2 from unknown", Timing{Rise: 2, Fall: 3}, "++---+-++", "UHHHXXXXH"},
		{"E1 rise 1 is healthy at once (App Gateway)", Timing{Rise: 1, Fall: 3, Initial: Unhealthy}, "-+--+", "XHHHH"},
		{"E1 interrupted failures do not add up", Timing{Rise: 1, Fall: 3, Initial: Healthy}, "--+--+---", "HHHHHHHHX"},
		{"E1 unknown decided by failures too", Timing{Rise: 3, Fall: 2}, "--", "UX"},
		{"E2 window 4/2 from unknown", Timing{Window: Window{Size: 4, Required: 2}}, "-+-+---++", "UUUHHXXXH"},
		{"E2 window 4/2 needs 3 failures after successes", Timing{Window: Window{Size: 4, Required: 2}}, "++++---", "UHHHHHX"},
		{"E2 window 3/3 strict", Timing{Window: Window{Size: 3, Required: 3}}, "+++-+++", "UUHXXXH"},
		{"E2 window 1/1", Timing{Window: Window{Size: 1, Required: 1}}, "+-+", "HXH"},
		{"E3 initial healthy", Timing{Rise: 2, Fall: 2, Initial: Healthy}, "-", "H"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runEval(tt.check, tt.results); got != tt.want {
				t.Fatalf("results %s: states %s, want %s", tt.results, got, tt.want)
			}
		})
	}
}

func TestObserveStreakSaturates(t *testing.T) {
	t.Parallel()
	c := Timing{Rise: 1, Fall: 1}
	st := evalState{}
	for range 70000 {
		c.observe(&st, true)
	}
	if st.streak != ^uint16(0) {
		t.Fatalf("streak = %d, want saturation at %d", st.streak, ^uint16(0))
	}
}

func TestGap(t *testing.T) {
	t.Parallel()
	s := time.Second
	c := Timing{Interval: 10 * s, FastRecheck: s, UnhealthyInterval: 30 * s, Rise: 2, Fall: 3}
	tests := []struct {
		name string
		st   evalState
		want time.Duration
	}{
		{"healthy after success", evalState{state: Healthy, info: infoLastOK, streak: 5}, 10 * s},
		{"healthy confirming a failure (E4)", evalState{state: Healthy, streak: 1}, s},
		{"unknown confirming a failure", evalState{state: Unknown, streak: 2}, s},
		{"unhealthy", evalState{state: Unhealthy, streak: 9}, 30 * s},
		{"unhealthy recovering", evalState{state: Unhealthy, info: infoLastOK, streak: 1}, 30 * s},
		{"before any result", evalState{}, 10 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.gap(&tt.st); got != tt.want {
				t.Fatalf("gap = %v, want %v", got, tt.want)
			}
		})
	}
	plain := Timing{Interval: 10 * s, Rise: 1, Fall: 1}
	if got := plain.gap(&evalState{state: Unhealthy}); got != 10*s {
		t.Fatalf("without unhealthy interval: gap = %v, want the interval", got)
	}
}
