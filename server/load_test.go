package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
	"github.com/sondeprobe/sonde/server/web/api"
)

// TestDetectionUnderAPILoad runs the daemon's HTTP server under many
// concurrent list requests (limit=0 included), event polls, clients that
// never read their answers, more idle connections than it keeps, and
// reloads of a changed file through POST /-/reload (as with
// -web.enable-lifecycle) every 300 ms, while a backend starts failing: the
// failure must be detected within its window from the onset (W3), a
// healthy target must not move, the API must keep answering and every
// reload apply. It takes about ten seconds.
func TestDetectionUnderAPILoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	flaky, steady := newBackend(t), newBackend(t)
	config := func(round int) string {
		y := fmt.Sprintf(`
checks:
  web: {protocol: http, path: /, interval: 200ms, timeout: 500ms, rise: 1, fall: 3}
  idle: {protocol: tcp, tcp_mode: connect, port: 9, interval: %ds}
pools:
  - {name: api, check: web, targets: [%q, %q]}
  - {name: big, check: idle, targets: ["198.18.0.0/16"], disabled: ["198.18.0.0/16"]}
`, 60+round%7, flaky.addr(), steady.addr())
		if round%2 == 1 { // a pool that comes and goes, its targets with it
			y += `  - {name: extra, check: idle, targets: ["198.19.0.0/24"], disabled: ["198.19.0.0/24"]}` + "\n"
		}
		return y
	}
	td := startDaemonWith(t, config(0), func(o *Options) { o.Web.MaxConnections = 64 })
	td.waitEvent(t, flaky.addr(), "healthy", 0)
	td.waitEvent(t, steady.addr(), "healthy", 0)
	addr := served(t, td.d)
	base := "http://" + addr

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var lists, listErrs atomic.Int64
	for i := range 16 {
		path := "/api/v1/targets?limit=0"
		switch i % 4 {
		case 2:
			path = "/api/v1/events?limit=0"
		case 3:
			path = "/api/v1/pools"
		}
		wg.Go(func() {
			c := &http.Client{Timeout: 10 * time.Second}
			for ctx.Err() == nil {
				resp, err := c.Get(base + path)
				if err != nil {
					listErrs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lists.Add(1)
			}
		})
	}
	for i := range 4 { // clients that ask for a big page and never read it
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		path := "/api/v1/targets?limit=0"
		if i%2 == 1 {
			path = "/api/v1/events?limit=0"
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path)
	}
	// Reloads of a changed file, as an operator's tooling sends them.
	rctx, stopReloads := context.WithCancel(ctx)
	var reloads, reloadErrs, resets atomic.Int64
	var reloadErr atomic.Value // the first reload's failure, for the report
	failed := func(err error) {
		reloadErrs.Add(1)
		reloadErr.CompareAndSwap(nil, err.Error())
	}
	var lastApplied atomic.Int64 // the round of the last file a reload applied
	var rwg sync.WaitGroup
	rwg.Go(func() {
		// A connection of its own per reload, as curl from a deploy script
		// opens: an idle kept-alive one may be among those the server
		// evicts, and a POST sent on it as it closes is reset and not
		// retried by the client.
		// A reload waits its turn (one a second) and, under the race
		// detector on a busy machine, took over 10 s: the client waits 30.
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for round := 1; rctx.Err() == nil; round++ {
			tmp := td.path + ".new"
			if err := os.WriteFile(tmp, []byte(config(round)), 0o644); err != nil {
				failed(err)
				return
			}
			if err := os.Rename(tmp, td.path); err != nil {
				failed(err)
				return
			}
			// At the connection limit a connection whose request is not
			// yet read may be closed to make room; the client asks again,
			// as the limit's contract says (a reload is idempotent). It
			// sees the close as a reset, or as EOF when the close came
			// before its request did.
			resp, err := c.Post(base+"/-/reload", "", nil)
			for try := 1; err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) && try < 3; try++ {
				resets.Add(1)
				resp, err = c.Post(base+"/-/reload", "", nil)
			}
			if err != nil {
				failed(err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed(fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body)))
				continue
			}
			reloads.Add(1)
			lastApplied.Store(int64(round))
			select {
			case <-rctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
	defer func() { stopReloads(); rwg.Wait() }()
	for range 200 { // idle connections, more than the server keeps
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}

	// The failure starts once the load is on: lists answered, a reload
	// applied.
	testenv.Eventually(t, "list requests answered and a reload applied", func() (string, bool) {
		l, r := lists.Load(), reloads.Load()
		return fmt.Sprintf("%d lists (%d errors), %d reloads (%d errors)", l, listErrs.Load(), r, reloadErrs.Load()), l >= 16 && (r >= 1 || reloadErrs.Load() > 0)
	})
	before := td.d.events.Last()
	onset := time.Now()
	flaky.failing.Store(true)

	// The API answers throughout: a health check at every poll (every
	// 100 ms once the polls have slowed down).
	checker := &http.Client{Timeout: 5 * time.Second}
	ev := testenv.Eventually(t, "an unhealthy event of the failing target", func() (ev api.Event, found bool) {
		resp, err := checker.Get(base + "/-/healthy")
		if err != nil {
			t.Fatalf("the API stopped answering under load: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		evs, _, _ := logPage(td.d.events, before, 0)
		for _, e := range evs {
			switch {
			case e.Kind != api.KindState:
			case e.Target == steady.addr():
				t.Fatalf("the healthy target changed state under API load: %+v", e)
			case e.Target == flaky.addr() && e.To == "unhealthy":
				ev, found = e, true
			}
		}
		return ev, found
	})
	var w3 time.Duration
	for _, c := range td.d.cur.Load().cfg.Checks {
		if c.Name == "web" {
			w3 = c.FailureWindowFromOnset()
		}
	}
	if took := ev.Time.Sub(onset); took > w3 {
		t.Errorf("failure detected %v after its onset under API load, beyond W3 %v", took, w3)
	}
	if lists.Load() == 0 {
		t.Errorf("no list request completed (%d errors)", listErrs.Load())
	}
	// Reloads are one a second at most (DefaultReloadGap) and slow under
	// the race detector: give them time to reach three.
	testenv.Eventually(t, "three reloads, or a failed one", func() (int64, bool) {
		n := reloads.Load()
		return n, n >= 3 || reloadErrs.Load() != 0
	})
	stopReloads()
	rwg.Wait()
	if reloads.Load() < 3 || reloadErrs.Load() != 0 {
		t.Errorf("%d reloads answered 200, %d not (first failure: %v): want every one of at least 3 to succeed", reloads.Load(), reloadErrs.Load(), reloadErr.Load())
	}
	if n, want := len(td.d.cur.Load().cfg.Pools), 2+int(lastApplied.Load()%2); n != want {
		t.Errorf("%d pools after the last reload (of round %d), want %d: the reloads did not apply the file", n, lastApplied.Load(), want)
	}
	_, evicted, _, _ := td.d.conns.Load().Counts()
	if evicted == 0 {
		t.Error("no idle connection was evicted: the load did not reach the connection limit")
	}
	t.Logf("detected after %v (W3 %v); %d list requests, %d failed; %d reloads (%d connections reset or closed and asked again); %d idle connections evicted",
		ev.Time.Sub(onset).Round(time.Millisecond), w3, lists.Load(), listErrs.Load(), reloads.Load(), resets.Load(), evicted)
}
