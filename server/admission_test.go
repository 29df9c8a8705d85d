package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sondeprobe/sonde/internal/testenv"
)

// hangingProbeDaemon runs a daemon whose check "hang" probes a target that
// accepts connections and never answers, with a 20 s timeout.
func hangingProbeDaemon(t *testing.T, set func(*Options)) (td *testDaemon, probePath string) {
	silent := silentServer(t)
	td = startDaemonWith(t, fmt.Sprintf(`
checks:
  hang: {protocol: http, path: /, interval: 1h, timeout: 20s}
pools:
  - {name: api, check: hang, targets: [%q], health_checks: false}
`, silent), set)
	return td, "/probe?" + url.Values{"module": {"hang"}, "target": {silent}}.Encode()
}

// hold sends GET url in the background until the test ends, ignoring the
// answer.
func hold(t *testing.T, c *http.Client, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// TestProbeSlotsRefuseAtOnce is the regression test of /probe requests
// that waited for a slot as long as their probe's timeout, each holding a
// connection: with every slot taken by probes of a target that hangs, the
// next /probe is refused at once with 503 and Retry-After while they still
// hang, and /metrics, /-/healthy and /-/ready answer.
func TestProbeSlotsRefuseAtOnce(t *testing.T) {
	t.Parallel()
	td, path := hangingProbeDaemon(t, func(o *Options) { o.ProbeConcurrency = 2 })
	for range 2 {
		hold(t, &http.Client{}, td.http.URL+path)
	}
	testenv.Eventually(t, "both probe slots taken", func() (int64, bool) { n := td.d.adm.Probe.InUse(); return n, n == 2 })
	// A waiting request would answer after the 20 s timeout: the client
	// gives up well before.
	c := &http.Client{Timeout: 8 * time.Second}
	resp, err := c.Get(td.http.URL + path)
	if err != nil {
		t.Fatalf("a /probe beyond the slots is not refused at once: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("beyond the slots: %s, Retry-After %q: %s; want 503 with Retry-After 1", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	if n := td.d.adm.Probe.InUse(); n != 2 {
		t.Errorf("%d probe slots taken after the refusal, want the 2 hanging ones", n)
	}
	for _, p := range []string{"/metrics", "/-/healthy", "/-/ready"} {
		if code, _ := td.scrape(t, p, nil); code != http.StatusOK {
			t.Errorf("GET %s while /probe hangs: %d", p, code)
		}
	}
	if code, text := td.scrape(t, "/metrics", nil); code != http.StatusOK || !strings.Contains(text, "sonde_http_requests_refused_total{class=\"probe\"} 1\n") {
		t.Errorf("sonde_http_requests_refused_total{class=probe} is not 1:\n%s", text)
	}
}

// getFresh GETs url on a connection of its own and fails the test unless
// the answer is 200.
func getFresh(t *testing.T, url, when string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("GET %s %s: %v", url, when, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s %s: %s", url, when, resp.Status)
	}
}

// TestVitalEndpointsUnderProbeFlood is the regression test of 600
// concurrent /probe requests of a target that hangs (timeout 20 s) taking
// every connection, so that /metrics and /-/healthy were refused and a
// liveness probe would restart the pod. Two ways: every connection the
// limit allows busy in a hanging /probe; and 600 /probe requests at once
// against 64 connections and 16 probe slots. Either way /-/healthy,
// /-/ready and /metrics answer 200 on new connections, and no more than
// the slots' worth of probes run.
func TestVitalEndpointsUnderProbeFlood(t *testing.T) {
	vitals := []string{"/-/healthy", "/-/ready", "/metrics"}
	t.Run("every connection in a hanging probe", func(t *testing.T) {
		const conns = 8
		td, path := hangingProbeDaemon(t, func(o *Options) {
			o.Web.MaxConnections = conns
			o.ProbeConcurrency = conns
		})
		base := "http://" + served(t, td.d)
		for range conns {
			hold(t, &http.Client{Transport: &http.Transport{}}, base+path)
		}
		testenv.Eventually(t, "every connection holding a hanging probe", func() (int64, bool) {
			n := td.d.adm.Probe.InUse()
			return n, n == conns
		})
		for _, p := range vitals {
			getFresh(t, base+p, "with every connection in a hanging /probe")
		}
		if _, _, shed, _ := td.d.conns.Load().Counts(); shed == 0 {
			t.Error("no busy connection was shed: the vital requests did not need the room")
		}
	})
	t.Run("600 at once", func(t *testing.T) {
		const conns, probes, flood = 64, 16, 600
		td, path := hangingProbeDaemon(t, func(o *Options) {
			o.Web.MaxConnections = conns
			o.ProbeConcurrency = probes
		})
		base := "http://" + served(t, td.d)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flood}}
		for range flood {
			hold(t, client, base+path)
		}
		// Each flood request beyond the slots is refused, or its
		// connection makes room for another.
		testenv.Eventually(t, "the flood arrived: its requests refused or their connections closed", func() (uint64, bool) {
			_, evicted, shed, _ := td.d.conns.Load().Counts()
			n := td.d.adm.Probe.Refused() + evicted + shed
			return n, n >= flood-probes
		})
		for _, p := range vitals {
			getFresh(t, base+p, "with 600 /probe requests of a hanging target")
		}
		if n := td.d.adm.Probe.InUse(); n > probes {
			t.Errorf("%d probes running, more than the %d slots", n, probes)
		}
		if open, _, _, _ := td.d.conns.Load().Counts(); open > conns {
			t.Errorf("%d connections open, more than the limit %d", open, conns)
		}
	})
}

// TestTrickledRequestsCannotStarveHealth checks the other way to hold
// connections: clients that send a request's first bytes and never the
// rest. They hold no handler, so a connection for /-/healthy takes the
// place of one of them.
func TestTrickledRequestsCannotStarveHealth(t *testing.T) {
	t.Parallel()
	const conns = 8
	td := startDaemonWith(t, oneTargetConfig(t), func(o *Options) { o.Web.MaxConnections = conns })
	addr := served(t, td.d)
	for range 3 * conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /-/healthy HTTP/1.1\r\n") // and never the rest
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/-/healthy among %d trickling clients: %v %v", 3*conns, resp, err)
	}
}
