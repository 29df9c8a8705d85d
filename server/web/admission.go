package web

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Admission of HTTP requests. Two limits, one per resource, keep the
// daemon's own endpoints — /metrics, /-/healthy and /-/ready — answering
// whatever other clients do:
//
//   - Slots, per class of request that can take long: a request holds one
//     of its class while it works, and is refused at once (503 with
//     Retry-After) when its class has none free; it never waits for one,
//     so refused requests do not pile up on connections. /metrics has
//     slots of its own that nothing else takes; /-/healthy and /-/ready
//     need none and are never refused.
//   - Connections ([ConnLimiter], conns.go): at the connection limit a new
//     connection takes the place of one that is not in a handler (idle,
//     or still sending its request), else of one busy in a handler of
//     anything but /metrics and the /-/ endpoints. Only connections
//     serving those are never taken, and they are few (the scrape slots)
//     or brief.
//
// So a flood of requests that hang (a /probe of a target that never
// answers, an event stream, a client that does not read) can hold at most
// its class's slots, and a new connection for /-/healthy or /metrics
// always finds room.

// Request classes with slots, and their defaults.
const (
	scrapeRequests = 4 // /metrics: with per-target series, a scrape of a large fleet is heavy
	listRequests   = 4 // list endpoints and the status pages that walk pools
)

// Slots bound the requests of one class that run at once. Safe for
// concurrent use.
type Slots struct {
	class   string        // the class's name, in metrics
	what    string        // what its requests are, in refusals
	max     int64         // slots
	retry   time.Duration // Retry-After of a refusal
	stall   time.Duration // how long one write to a client in a slot may block (the daemon's WriteStall)
	n       atomic.Int64  // in use
	refused atomic.Uint64 // requests refused for want of a slot
}

// NewSlots returns n slots of class (its name in metrics) for what (its
// requests, in refusals); a refusal says to retry after retry, and a write
// to a client in a slot may block at most stall.
func NewSlots(class, what string, n int, retry, stall time.Duration) *Slots {
	return &Slots{class: class, what: what, max: int64(n), retry: retry, stall: stall}
}

// Enter takes a slot and returns the writer to answer through and the
// slot's release, or answers w with 503 and Retry-After and returns a nil
// release when none is free. Through the writer returned, a client that
// stops reading for the slots' stall ends the request, which frees the
// slot.
func (s *Slots) Enter(w http.ResponseWriter) (http.ResponseWriter, func()) {
	if s.n.Add(1) > s.max {
		s.n.Add(-1)
		s.refused.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(int(max(s.retry/time.Second, 1))))
		http.Error(w, fmt.Sprintf("too many %s at once (at most %d); retry", s.what, s.max), http.StatusServiceUnavailable)
		return w, nil
	}
	return stalling(w, s.stall), func() { s.n.Add(-1) }
}

// stallWriter is a ResponseWriter whose every write may block at most
// stall: a client that stops reading cannot hold a slot until the server's
// whole-response timeout, while one that reads slowly keeps going.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func stalling(w http.ResponseWriter, stall time.Duration) http.ResponseWriter {
	return &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall}
}

func (s *stallWriter) Write(b []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall)) // unsupported only on writers without a connection (tests)
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// InUse returns the slots taken.
func (s *Slots) InUse() int64 { return s.n.Load() }

// Max returns the number of slots.
func (s *Slots) Max() int64 { return s.max }

// Refused returns the requests refused for want of a slot.
func (s *Slots) Refused() uint64 { return s.refused.Load() }

// Admit runs h in a slot, for handlers with nothing to check before.
func (s *Slots) Admit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, release := s.Enter(w)
		if release == nil {
			return
		}
		defer release()
		h.ServeHTTP(w, r)
	})
}

// Admission holds the slots of the request classes.
type Admission struct {
	Scrape *Slots // /metrics
	Probe  *Slots // /probe
	List   *Slots // /api/v1/pools, /api/v1/targets, polls of /api/v1/events, the overview and pool pages
	Stream *Slots // event streams
}

// NewAdmission returns the slots of the request classes: probes for /probe
// and streams for event streams; a write to a client in a slot may block
// at most stall.
func NewAdmission(probes, streams int, stall time.Duration) Admission {
	return Admission{
		Scrape: NewSlots("scrape", "/metrics scrapes", scrapeRequests, time.Second, stall),
		Probe:  NewSlots("probe", "/probe requests", probes, time.Second, stall),
		List:   NewSlots("list", "list requests", listRequests, time.Second, stall),
		Stream: NewSlots("stream", "event streams", streams, 10*time.Second, stall),
	}
}

// All returns the slots of every class.
func (a *Admission) All() [4]*Slots { return [4]*Slots{a.Scrape, a.Probe, a.List, a.Stream} }

// Collector returns the collector of the slots' metrics, read at scrape
// time.
func (a *Admission) Collector() prometheus.Collector { return &admissionCollector{a: a} }

// Vital marks the request's connection as serving one of the daemon's own
// endpoints, which the connection limit never takes away (see [ConnLimiter]):
// /metrics, /-/healthy, /-/ready, and /-/reload, an operator's reload that
// a flood of API clients must not cut off (reloads are coalesced, so those
// waiting cost one reload).
func Vital(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
			lc.l.setVital(lc)
		}
		h.ServeHTTP(w, r)
	})
}

// desc returns the descriptor of a metric without constant labels.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descRequestsBusy    = desc("sonde_http_requests_in_flight", "Requests holding a slot of their class: scrape (/metrics), probe (/probe), list (API lists, overview and pool pages), stream (event streams).", "class")
	descRequestsMax     = desc("sonde_http_requests_max", "Slots of a class of requests: more at once are refused with 503.", "class")
	descRequestsRefused = desc("sonde_http_requests_refused_total", "Requests refused with 503 because every slot of their class was taken.", "class")
)

// admissionCollector produces the slots' metrics at scrape time.
type admissionCollector struct{ a *Admission }

// Describe sends every descriptor the collector may produce.
func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRequestsBusy
	ch <- descRequestsMax
	ch <- descRequestsRefused
}

// Collect reads the slots.
func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.a.All() {
		ch <- prometheus.MustNewConstMetric(descRequestsBusy, prometheus.GaugeValue, float64(s.InUse()), s.class)
		ch <- prometheus.MustNewConstMetric(descRequestsMax, prometheus.GaugeValue, float64(s.max), s.class)
		ch <- prometheus.MustNewConstMetric(descRequestsRefused, prometheus.CounterValue, float64(s.refused.Load()), s.class)
	}
}
