package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/events"
	"github.com/sondeprobe/sonde/server/status"
	"github.com/sondeprobe/sonde/server/web"
	"github.com/sondeprobe/sonde/server/web/api"
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
//	GET  /probe            one probe of target= with the check module=, answered like blackbox_exporter (see probeaccess.go)
//	GET  /api/v1/remediations  remediations, their budgets and recent firings
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
// With Options.Web.RoutePrefix, every path is under the prefix.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", web.Vital(d.adm.Scrape.Admit(promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{Registry: d.metrics.reg}))))
	apiv1.New(d.apiSnapshot, d.adm.List.Enter).Routes(mux)
	mux.HandleFunc("GET /api/v1/discovery", d.handleDiscovery)
	mux.HandleFunc("GET /api/v1/events", d.handleEvents)
	mux.Handle("GET /probe", d.probeEndpoint())
	mux.HandleFunc("GET /api/v1/remediations", d.handleRemediations)
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

// maxEventsPage is the most events one poll of /api/v1/events returns.
const maxEventsPage = 10000

// eventsChunk is how many events a poll copies from the ring at a time: a
// page is written as it is read, so its memory is the chunk's and the
// writer's buffer, whatever the page's length and the client's pace.
const eventsChunk = 256

// handleEvents answers a poll with a page of events or, for a client that
// accepts text/event-stream, streams them (see events.Streams). A
// poll is a list request: it takes a list slot, or is refused at once
// (server/web, admission.go), and is encoded as it is read.
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request) {
	if events.WantsStream(r) {
		d.streams.ServeHTTP(w, r)
		return
	}
	q := r.URL.Query()
	var since uint64
	limit := 1000
	if s := q.Get("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("since=%q: want an event sequence number", s), http.StatusBadRequest)
			return
		}
		since = n
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxEventsPage {
			http.Error(w, fmt.Sprintf("limit=%q: want a whole number 1..%d, or 0 for the most", s, maxEventsPage), http.StatusBadRequest)
			return
		}
		limit = n
	}
	if limit == 0 {
		limit = maxEventsPage
	}
	w, release := d.adm.List.Enter(w)
	if release == nil {
		return
	}
	defer release()
	from, end, lost := d.events.Window(since, limit)
	next := from - 1
	buf := make([]api.Event, 0, eventsChunk)
	web.StreamList(w, "events", func(emit func(any) error) error {
		for s := from; s < end; {
			evs, ok := d.events.CopyRange(s, end, buf)
			if !ok {
				// The ring went past the page while it was written: it
				// ends here, and the next poll counts what fell out lost.
				return nil
			}
			for i := range evs {
				if err := emit(&evs[i]); err != nil {
					return err
				}
			}
			s += uint64(len(evs))
			next = s - 1
		}
		return nil
	}, func(field func(string, any) error) error {
		if err := field("next", next); err != nil {
			return err
		}
		return field("lost", lost)
	})
}

// handleDiscovery lists the pools' discovery sources and host names: how
// each source is doing, the targets it gives, and the names that do not
// resolve.
func (d *Daemon) handleDiscovery(w http.ResponseWriter, _ *http.Request) {
	st := d.discoveryStatus()
	if st == nil {
		st = []discovery.PoolStatus{}
	}
	web.WriteJSON(w, struct {
		Pools []discovery.PoolStatus `json:"pools"`
	}{st})
}

// handleRemediations lists the remediations with their budgets and the
// instances they watch, and the recent firings and withheld firings.
func (d *Daemon) handleRemediations(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, d.rem.Status(d.opt.Clock.Nanotime()))
}
