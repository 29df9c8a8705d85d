// Package apiv1 answers the JSON API: the paged lists GET /api/v1/pools and
// GET /api/v1/targets (with cursors, encoded as they are read), and GET
// /api/v1/events (a poll, or a stream), /api/v1/discovery and
// /api/v1/remediations. It reads the daemon only through a Snapshot of the
// running configuration and the daemon's Feeds, both of which the daemon
// implements, so it is tested without one. The wire types are package
// server/web/api's.
package apiv1

import (
	"net/http"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/web/api"
)

// Snapshot is what the list endpoints read of the daemon while they answer
// one request: the configuration it runs and the engine's view of it. Its
// configuration stays the same for the request; states and routes are
// read as they are at each call.
type Snapshot interface {
	// Config is the configuration as the engine runs it: Targets and
	// Hostnames indexed by target id, pool members are target ids.
	Config() *config.Config
	// Pools are the engine's pools, in the configuration's order.
	Pools() []*policy.Pool
	// Layout identifies the pools' names and order: a cursor of another
	// layout is gone.
	Layout() uint32
	// Summary returns pool pi's counts, as of the latest decisions.
	Summary(pi int) policy.PoolSummary
	// Route returns the route of member m of pool pi, and whether it is
	// preferred.
	Route(pi, m int) (policy.Route, bool)
	// Ranks returns pool pi's latency ranks by member position (see
	// policy.Router.Ranks), at most a little old (see RankCache).
	Ranks(pi int) []uint32
	// Status returns target id's health state.
	Status(id uint32) scheduler.TargetStatus
	// Clock is the engine's clock, whose Nanotime the states' times are in.
	Clock() scheduler.Clock
	// LastError returns why target id's last probe failed; "" when it did
	// not or nobody said.
	LastError(id uint32) string
	// CertExpiry returns the Unix time at which the earliest certificate
	// target id last presented expires; 0 when none was seen.
	CertExpiry(id uint32) int64
	// Passive returns what this host's connections to target id did, false
	// when they are not watched.
	Passive(id uint32) (api.PassiveJSON, bool)
}

// Handler serves the API's endpoints from the daemon's snapshots and
// feeds.
type Handler struct {
	snapshot func() Snapshot
	feeds    Feeds
	enter    func(http.ResponseWriter) (http.ResponseWriter, func())
}

// New returns the API's handler. snapshot returns the daemon's state for
// one request, nil when no configuration runs (503 from the lists); feeds
// are the daemon's events, discovery and remediations; enter admits a list
// request (a list page, a poll of events): it returns the writer to use
// and a release, or a nil release when it answered the request itself.
func New(snapshot func() Snapshot, feeds Feeds, enter func(http.ResponseWriter) (http.ResponseWriter, func())) *Handler {
	return &Handler{snapshot: snapshot, feeds: feeds, enter: enter}
}

// Routes adds the API's endpoints to mux: GET /api/v1/pools,
// /api/v1/targets, /api/v1/events, /api/v1/discovery and
// /api/v1/remediations.
func (h *Handler) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/pools", h.handlePools)
	mux.HandleFunc("GET /api/v1/targets", h.handleTargets)
	mux.HandleFunc("GET /api/v1/events", h.handleEvents)
	mux.HandleFunc("GET /api/v1/discovery", h.handleDiscovery)
	mux.HandleFunc("GET /api/v1/remediations", h.handleRemediations)
}

// view is a snapshot being listed.
type view struct{ Snapshot }

// running returns a view of the daemon's state now, or answers 503.
func (h *Handler) running(w http.ResponseWriter) *view {
	s := h.snapshot()
	if s == nil {
		http.Error(w, "no configuration running", http.StatusServiceUnavailable)
		return nil
	}
	return &view{s}
}
