package linkstat

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseNetDev(t *testing.T) {
	t.Parallel()
	text := `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
spab12:  123456    1000    0    0    0     0          0         0   654321    2000    0    0    0     0       0          0
`
	rx, tx, err := parseNetDev([]byte(text), "spab12")
	if err != nil || rx != 1000 || tx != 2000 {
		t.Errorf("parseNetDev = %d, %d, %v; want 1000, 2000, nil", rx, tx, err)
	}
	if _, _, err := parseNetDev([]byte(text), "missing"); err == nil {
		t.Error("parseNetDev of a missing interface succeeded")
	}
}

func TestSendWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []Sample{
		{At: at(0), TxPkts: 100, RxPkts: 50, Busy: 10},
		{At: at(2), TxPkts: 101, RxPkts: 50, Busy: 10}, // noise
		{At: at(4), TxPkts: 101, RxPkts: 50, Busy: 10},
		{At: at(6), TxPkts: 1101, RxPkts: 550, Busy: 11},
		{At: at(8), TxPkts: 2101, RxPkts: 1050, Busy: 12},
		{At: at(10), TxPkts: 2102, RxPkts: 1051, Busy: 12}, // noise
		{At: at(12), TxPkts: 2102, RxPkts: 1051, Busy: 12},
	}
	w, ok := SendWindow(samples)
	if !ok {
		t.Fatal("no window")
	}
	want := Window{Start: at(4), End: at(8), Tx: 2000, Rx: 1000, CPU: 0.02}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("SendWindow (-want +got):\n%s", diff)
	}
	if _, ok := SendWindow(samples[:3]); ok {
		t.Error("noise alone makes a window")
	}
}
