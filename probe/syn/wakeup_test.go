package syn

import "testing"

// TestWakeupBytes checks the eBPF capture's wake-up threshold: half the ring,
// so the reader is woken per record only when half the ring is unread (see
// wakeupBytes for what a lower threshold cost).
func TestWakeupBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ring, want int
	}{
		{"default ring", 0, defaultRingBytes / 2},
		{"1 MiB ring", 1 << 20, 512 << 10},
		{"64 MiB ring", 64 << 20, 32 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wakeupBytes(tt.ring); got != tt.want {
				t.Errorf("wakeupBytes(%d) = %d, want %d", tt.ring, got, tt.want)
			}
		})
	}
}
