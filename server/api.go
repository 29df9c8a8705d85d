package server

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/status"
	"github.com/sondeprobe/sonde/server/web"
)

// Handler returns the daemon's HTTP endpoints:
//
//	GET  /                 status page: overview; /pool, /target, /events and /discovery pages (see server/status)
//	GET  /api/v1/history   a target's recent results (pool=, target=)
//	GET  /metrics          Prometheus metrics
//	GET  /api/v1/pools     pools with counts and policy (paging limit=, after=)
//	GET  /api/v1/targets   targets (filters pool=, state=, label=NAME=VALUE; paging limit=, after=)
//	GET  /api/v1/discovery the pools' discovery sources and host names: state, targets, errors
//	GET  /api/v1/events    recent events (since=SEQ, limit=), or a stream of them (Accept: text/event-stream)
//	GET  /api/v1/remediations  remediations, their budgets and recent firings
//	GET  /probe            one probe of target= with the check module=, answered like blackbox_exporter (see probeaccess.go)
//	GET  /-/healthy        200 while the process runs
//	GET  /-/ready          200 once a configuration is running
//	POST /-/reload         reload the configuration (see web.Lifecycle)
//
// State-changing endpoints answer 403 unless Options.Web.EnableLifecycle is
// set, and refuse cross-site browser requests; new ones must be wrapped in
// lifecycle too. /probe, whose GET sends a probe, refuses cross-site
// requests as well, and answers 403 when Options.Web.DisableProbe is set.
//
// Requests that can take long hold a slot of their class and are refused
// at once when none is free; /metrics and the /-/ endpoints keep capacity
// whatever the others do (see server/web, admission.go).
//
// Every response carries X-Content-Type-Options: nosniff (withHeaders).
//
// The /api/v1/ endpoints are server/apiv1's, which read the daemon through
// apiSnapshot and feeds (snapshot.go); the status page's are server/status's.
//
// With Options.Web.RoutePrefix, every path is under the prefix.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", web.Vital(d.adm.Scrape.Admit(promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{Registry: d.metrics.reg}))))
	apiv1.New(d.apiSnapshot, feeds{d}, d.adm.List.Enter).Routes(mux)
	mux.Handle("GET /probe", d.probeEndpoint())
	mux.Handle("GET /-/healthy", web.Vital(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") })))
	mux.Handle("GET /-/ready", web.Vital(http.HandlerFunc(d.handleReady)))
	mux.Handle("POST /-/reload", web.Vital(web.Lifecycle(d.opt.Web.EnableLifecycle, d.handleReload)))
	status.New(d.statusSnapshot, d.adm.List.Enter).Routes(mux)
	if d.opt.Web.RoutePrefix != "" {
		return web.WithHeaders(web.WithPrefix(d.opt.Web.RoutePrefix, mux))
	}
	return web.WithHeaders(mux)
}

// probeEndpoint returns the handler of /probe: refused with 403 when
// Options.Web.DisableProbe is set, and for cross-site browser requests.
func (d *Daemon) probeEndpoint() http.Handler {
	if d.opt.Web.DisableProbe {
		return web.SwitchedOff("/probe is disabled; start sonde run without -web.enable-probe=false")
	}
	return web.SameOrigin(http.HandlerFunc(d.handleProbe))
}

func (d *Daemon) handleReady(w http.ResponseWriter, _ *http.Request) {
	if d.cur.Load() == nil {
		http.Error(w, "no configuration running", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "OK")
}

func (d *Daemon) handleReload(w http.ResponseWriter, _ *http.Request) {
	if err := d.Reload(); err != nil {
		http.Error(w, "reload rejected, previous configuration still running: "+err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintln(w, "OK")
}

// running returns the current generation or answers 503.
func (d *Daemon) running(w http.ResponseWriter) *generation {
	g := d.cur.Load()
	if g == nil {
		http.Error(w, "no configuration running", http.StatusServiceUnavailable)
	}
	return g
}
