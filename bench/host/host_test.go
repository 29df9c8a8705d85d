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

func TestParseActiveOpens(t *testing.T) {
	t.Parallel()
	snmp := "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens\nTcp: 1 200 120000 -1 12345 678\nUdp: InDatagrams\nUdp: 5\n"
	n, err := parseActiveOpens([]byte(snmp))
	if err != nil || n != 12345 {
		t.Errorf("parseActiveOpens = %d, %v; want 12345", n, err)
	}
	for _, bad := range []string{"", "Tcp: RtoAlgorithm\nTcp: 1\n", "Tcp: ActiveOpens\nTcp: x\n"} {
		if n, err := parseActiveOpens([]byte(bad)); err == nil {
			t.Errorf("parseActiveOpens(%q) = %d, want an error", bad, n)
		}
	}
}
