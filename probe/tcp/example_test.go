package tcp_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/probe/tcp"
)

// connect() probes of a port with a listener and of one without, on
// loopback.
func Example() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	open := netip.MustParseAddrPort(l.Addr().String())
	// A port that was free a moment ago: nobody listens there now.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	closed := netip.MustParseAddrPort(free.Addr().String())
	free.Close()
	defer l.Close()

	p := tcp.New(tcp.Options{})
	for _, ap := range []netip.AddrPort{open, closed} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the probe's timeout
		r := p.Probe(ctx, probe.Target{Addr: ap.Addr(), Port: ap.Port()})
		cancel()
		fmt.Println(r.Outcome)
	}
	// Output:
	// success
	// refused
}
