package host

import "testing"

func TestParseCPU(t *testing.T) {
	t.Parallel()
	got, err := parseCPU("cpu  100 5 50 1000 20 3 7 9 0 0")
	if err != nil {
		t.Fatal(err)
	}
	// busy: user, nice, system, irq, softirq; steal and guest left out.
	if want := (CPU{Busy: 165, Total: 1185, IRQ: 10, Steal: 9}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if _, err := parseCPU(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
