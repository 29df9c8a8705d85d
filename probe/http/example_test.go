package http_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/probe"
	probehttp "github.com/sondeprobe/sonde/probe/http"
)

// A prober that wants 200–299 and "ok" in the body, against a server that
// answers /health with 200 "ok" and anything else with 503.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	target := probe.Target{Addr: ap.Addr(), Port: ap.Port()}

	ctx := context.Background()
	for _, path := range []string{"/health", "/"} {
		p, err := probehttp.New(ctx, probehttp.Options{Path: path, Body: "ok"})
		if err != nil {
			fmt.Println(err)
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the probe's timeout
		rep := p.Report(pctx, target)
		cancel()
		fmt.Printf("%s: %v, status %d\n", path, rep.Outcome, rep.Status)
	}
	// Output:
	// /health: success, status 200
	// /: http_status, status 503
}
