package probe_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"github.com/sondeprobe/sonde/probe"
)

// A dial's error says how the probe ended: the kernel's answer, or none.
func ExampleNetOutcome() {
	for _, err := range []error{
		nil,
		syscall.ECONNREFUSED, // a RST answered the SYN
		syscall.EHOSTUNREACH, // an ICMP unreachable did
		os.ErrDeadlineExceeded,
		errors.New("something else"),
	} {
		fmt.Println(probe.NetOutcome(err))
	}
	// Output:
	// success
	// refused
	// unreachable
	// timeout
	// error
}

// A table gives each endpoint an id, which probe requests and results carry
// instead of the endpoint.
func ExampleTable() {
	t := probe.NewTable(2)
	web := t.Add(netip.MustParseAddrPort("192.0.2.10:80"))
	db := t.Add(netip.MustParseAddrPort("[2001:db8::5]:5432"))
	fmt.Println(t.Len(), web, t.Endpoint(web), db, t.Endpoint(db))
	// Output:
	// 2 0 192.0.2.10:80 1 [2001:db8::5]:5432
}
