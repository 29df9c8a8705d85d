package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestTLSLoop(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	}))
	srv.Config.SetKeepAlivesEnabled(false)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	target := netip.MustParseAddrPort(srv.Listener.Addr().String())
	res, err := TLSLoop(t.Context(), TLSLoopConfig{Targets: []netip.AddrPort{target}, Concurrency: 4, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK == 0 || res.Failed != 0 || res.FirstErr != nil {
		t.Errorf("result %+v: want requests, none failed", res)
	}
	if res.Elapsed < 200*time.Millisecond || res.CPU <= 0 {
		t.Errorf("elapsed %v, cpu %v: want at least the duration, and some CPU", res.Elapsed, res.CPU)
	}

	for _, tc := range []struct {
		name string
		cfg  TLSLoopConfig
		want string
	}{
		{"no targets", TLSLoopConfig{Concurrency: 1, Duration: time.Second}, "no targets"},
		{"no concurrency", TLSLoopConfig{Targets: []netip.AddrPort{target}, Duration: time.Second}, "concurrency 0 is below 1"},
		{"no duration", TLSLoopConfig{Targets: []netip.AddrPort{target}, Concurrency: 1}, "duration 0s is not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := TLSLoop(t.Context(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}
