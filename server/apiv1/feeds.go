package apiv1

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/server/remediate"
	"github.com/sondeprobe/sonde/server/web"
	"github.com/sondeprobe/sonde/server/web/api"
)

// EventLog is the daemon's ring of recent events as a poll of
// /api/v1/events reads it (events.Log implements it).
type EventLog interface {
	// Window returns where a poll's page lies: the events from from to
	// end (excluded), the oldest after sequence number since, at most
	// limit of them (0: every one kept); lost counts those after since
	// that fell out of the ring. end-1 is the sequence number to ask for
	// next.
	Window(since uint64, limit int) (from, end, lost uint64)
	// CopyRange copies into buf the events from sequence number from on,
	// before end, as many as fit; false when event from is no longer kept.
	CopyRange(from, end uint64, buf []api.Event) ([]api.Event, bool)
}

// Feeds is what the API reads of the daemon apart from the running
// configuration: its events, how its discovery is doing and its
// remediations. Unlike a Snapshot it is there for the daemon's whole
// life, whether a configuration runs or not.
type Feeds interface {
	EventLog
	// ServeStream streams events to a client that asked for
	// text/event-stream (events.Streams).
	ServeStream(w http.ResponseWriter, r *http.Request)
	// Discovery returns how the pools' discovery sources and host names
	// are doing; none when no pool discovers.
	Discovery() []discovery.PoolStatus
	// Remediations returns the remediations' state and their recent
	// records, as of now.
	Remediations() remediate.Status
}

// MaxEventsPage is the most events one poll of /api/v1/events returns.
const MaxEventsPage = 10000

// eventsChunk is how many events a poll copies from the ring at a time: a
// page is written as it is read, so its memory is the chunk's and the
// writer's buffer, whatever the page's length and the client's pace.
const eventsChunk = 256

// handleEvents answers a poll with a page of events or, for a client that
// accepts text/event-stream, streams them (Feeds.ServeStream). A poll is a
// list request: it takes a list slot, or is refused at once, and is
// encoded as it is read.
func (h *Handler) handleEvents(w http.ResponseWriter, r *http.Request) {
	if web.WantsStream(r) {
		h.feeds.ServeStream(w, r)
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
		if err != nil || n < 0 || n > MaxEventsPage {
			http.Error(w, fmt.Sprintf("limit=%q: want a whole number 1..%d, or 0 for the most", s, MaxEventsPage), http.StatusBadRequest)
			return
		}
		limit = n
	}
	if limit == 0 {
		limit = MaxEventsPage
	}
	w, release := h.enter(w)
	if release == nil {
		return
	}
	defer release()
	from, end, lost := h.feeds.Window(since, limit)
	next := from - 1
	buf := make([]api.Event, 0, eventsChunk)
	web.StreamList(w, "events", func(emit func(any) error) error {
		for s := from; s < end; {
			evs, ok := h.feeds.CopyRange(s, end, buf)
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
func (h *Handler) handleDiscovery(w http.ResponseWriter, _ *http.Request) {
	st := h.feeds.Discovery()
	if st == nil {
		st = []discovery.PoolStatus{}
	}
	web.WriteJSON(w, struct {
		Pools []discovery.PoolStatus `json:"pools"`
	}{st})
}

// handleRemediations lists the remediations with their budgets and the
// instances they watch, and the recent firings and withheld firings.
func (h *Handler) handleRemediations(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, h.feeds.Remediations())
}
