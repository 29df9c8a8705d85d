// Package api holds the wire types of sonde's JSON API, its event stream
// and its event webhooks: what /api/v1/... answers, what a Server-Sent
// Events stream and a webhook batch carry. It imports nothing of the
// daemon, so a client (a webhook receiver, a load balancer driver) decodes
// sonde's documents with the types sonde encodes them with, without
// compiling the daemon.
package api

import "time"

// The kinds of events, in Event.Kind: a target's state change, and the
// route decisions of the pool policy (policy.RouteKind names).
const (
	KindState     = "state"     // a target's health state changed
	KindRoute     = "route"     // a pool member was removed, put back, or decided (routed, removed, pending)
	KindPreferred = "preferred" // a pool member entered or left the preferred set (E7)
	KindFailOpen  = "fail_open" // a pool started or stopped failing open (P2)
	KindPassive   = "passive"   // failed connections of this host to a target made a trigger (PA3)
)

// EventKinds are the kinds of events, in the order the documentation lists them.
var EventKinds = []string{KindState, KindRoute, KindPreferred, KindFailOpen, KindPassive}

// Event is one event as the API, the event stream and webhooks show it: a
// target's state change (kind "state") or a change of a pool's traffic
// decision (kinds "route", "preferred" and "fail_open"). From and To are
// states for "state"; routes (routed, removed, pending) for "route";
// not_preferred and preferred for "preferred"; normal and failing_open for
// "fail_open".
type Event struct {
	Seq     uint64    `json:"seq"` // position in the daemon's event stream, from 1
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Target  string    `json:"target"`         // address:port; for fail_open, the member whose change flipped it
	Host    string    `json:"host,omitempty"` // host name the target was given as
	Pools   []string  `json:"pools"`          // the target's pools for "state"; the pool decided for the others
	Check   string    `json:"check"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"`                // "state": outcome of the probe behind it; others: what moved the decision
	Status  int       `json:"status,omitempty"`      // "state": the probe's HTTP status
	Streak  int       `json:"consecutive,omitempty"` // "state": consecutive results of that kind
	Message string    `json:"error,omitempty"`       // "state": why the probe failed, when known; "passive": what the connections did
	// Passive marks a "state" change made by passive evidence (the
	// eject action) rather than by a probe.
	Passive bool `json:"passive,omitempty"`
}

// HookBatch is the JSON document a webhook receives: events in sequence
// order, oldest first. Lost counts the events this webhook wanted that were
// dropped before this batch — because its queue was full, or because the
// receiver refused the batches that held them: a receiver that sees it
// non-zero should read the current state from the API.
type HookBatch struct {
	Webhook string  `json:"webhook"` // the webhook's name
	Lost    uint64  `json:"lost"`
	Events  []Event `json:"events"`
}

// PoolJSON is a pool in /api/v1/pools.
type PoolJSON struct {
	Name                 string  `json:"name"`
	Check                string  `json:"check"`
	Protocol             string  `json:"protocol"`
	Targets              int     `json:"targets"`
	Disabled             int     `json:"disabled"`
	Healthy              int     `json:"healthy"`
	Unhealthy            int     `json:"unhealthy"`
	Unknown              int     `json:"unknown"`
	Unprobed             int     `json:"unprobed"`   // enabled members of a pool with health checks off: routed, never probed
	Unresolved           int     `json:"unresolved"` // targets without an address to probe yet (not in targets); listed by /api/v1/targets as unknown
	Removed              int     `json:"removed"`
	Routable             int     `json:"routable"`
	Preferred            int     `json:"preferred"`
	FailingOpen          bool    `json:"failing_open"`
	HealthChecks         bool    `json:"health_checks"`
	MaxUnhealthyPercent  int     `json:"max_unhealthy_percent"`
	FailOpen             bool    `json:"fail_open"`
	LatencyMarginSeconds float64 `json:"latency_margin_seconds"`
	Cadence              string  `json:"cadence"` // the check's: fixed_rate or after_completion
	FailureWindowSeconds float64 `json:"failure_window_seconds"`
	SuccessWindowSeconds float64 `json:"success_window_seconds"`
	OnsetWindowSeconds   float64 `json:"failure_window_from_onset_seconds"`
}

// TargetJSON is a target in /api/v1/targets, as a member of one pool.
type TargetJSON struct {
	ID                     uint32     `json:"id"`
	Target                 string     `json:"target"`
	Host                   string     `json:"host,omitempty"`
	Pool                   string     `json:"pool"`
	Check                  string     `json:"check"`
	Protocol               string     `json:"protocol"`
	State                  string     `json:"state"` // healthy, unhealthy, unknown, disabled or unprobed
	Route                  string     `json:"route"` // routed, removed, pending or excluded
	Preferred              bool       `json:"preferred"`
	LatencyRank            int        `json:"latency_rank,omitempty"`
	LastOutcome            string     `json:"last_outcome,omitempty"`
	LastStatus             int        `json:"last_status,omitempty"`
	LastCause              string     `json:"last_cause,omitempty"`       // why the last probe could not run, when its outcome is local_error
	LastRetransmits        int        `json:"last_retransmits,omitempty"` // SYNs the last probe sent again (syn_retransmit)
	LastError              string     `json:"last_error,omitempty"`
	Consecutive            int        `json:"consecutive"`
	LatencySeconds         *float64   `json:"latency_seconds"`
	SmoothedLatencySeconds *float64   `json:"smoothed_latency_seconds"`
	StateSince             time.Time  `json:"state_since"`
	LastProbe              *time.Time `json:"last_probe"`
	CertExpiry             *time.Time `json:"cert_expiry,omitempty"` // HTTPS: when the earliest certificate of the last handshake expires
	FailureWindowSeconds   float64    `json:"failure_window_seconds"`
	SuccessWindowSeconds   float64    `json:"success_window_seconds"` // W2 with the target's measured latency
	// Labels are the target's labels in this pool: the pool's own, and
	// those its discovery gave.
	Labels map[string]string `json:"labels,omitempty"`
	// Unresolved is set for a target the pool cannot probe yet (a host name
	// without an address, a discovered target without a usable port): its
	// state is unknown, last_error says why, and its id (≥ 2^31) is only a
	// place in the listing.
	Unresolved bool `json:"unresolved,omitempty"`
	// Passive is what this host's connections to the target did, while
	// its check watches them (passive evidence); absent otherwise.
	Passive *PassiveJSON `json:"passive,omitempty"`
}

// PassiveJSON is what the connections other processes on this host opened
// to a target did, while its check watches them (passive evidence).
type PassiveJSON struct {
	Connected   uint64 `json:"connected"`
	Refused     uint64 `json:"refused"`
	TimedOut    uint64 `json:"timed_out"`
	Unreachable uint64 `json:"unreachable"`
	Abandoned   uint64 `json:"abandoned"` // closed by the client while connecting: no evidence
	Reset       uint64 `json:"reset"`     // reset after the handshake: not a failure
	Retransmits uint64 `json:"retransmits"`
	// HandshakeSeconds is the mean handshake time (the round trip of the SYN)
	// of the connected ones.
	HandshakeSeconds *float64 `json:"handshake_seconds"`
	// FailuresInARow is the current run of failed connections.
	FailuresInARow uint32 `json:"failures_in_a_row"`
}

// EventsPage is the answer of a poll of /api/v1/events.
type EventsPage struct {
	Events []Event `json:"events"` // the oldest events after since, oldest first
	Next   uint64  `json:"next"`   // ask with since=next for the events after these
	// Lost counts the events after since that fell out of the ring of
	// recent events before they were asked for: a client that sees it
	// non-zero missed them and should read the current state.
	Lost uint64 `json:"lost"`
}

// HistoryResult is one probe result of a target's history.
type HistoryResult struct {
	Time           time.Time `json:"time"`
	Outcome        string    `json:"outcome"`
	Status         int       `json:"status,omitempty"` // HTTP status
	LatencySeconds float64   `json:"latency_seconds"`  // how long the probe took, whatever its outcome
	State          string    `json:"state"`            // the target's state after this result
	// Passive marks failed connections of this host to the target that made
	// a trigger (passive evidence), not a probe.
	Passive bool `json:"passive,omitempty"`
}

// HistoryJSON is the answer of /api/v1/history.
type HistoryJSON struct {
	Target string `json:"target"`
	Pool   string `json:"pool"`
	Check  string `json:"check"`
	// Recorded tells whether the target's results were kept before this
	// request; if not, they are from now on (for a while after the last
	// request), and Results holds what there is.
	Recorded bool            `json:"recorded"`
	Capacity int             `json:"capacity"` // results kept at most
	State    string          `json:"state"`
	Results  []HistoryResult `json:"results"` // oldest first
}

// TargetsPage is a page of /api/v1/targets.
type TargetsPage struct {
	Targets []TargetJSON `json:"targets"`
	Total   int          `json:"total"`          // targets matching the filters
	Limit   int          `json:"limit"`          // the page's size
	Next    string       `json:"next,omitempty"` // ask with after=next for the next page; empty on the last
}

// PoolsPage is a page of /api/v1/pools.
type PoolsPage struct {
	Pools  []PoolJSON `json:"pools"`
	Shard  int        `json:"shard"`          // this process's shard i (sonde run -shard i/N)
	Shards int        `json:"shards"`         // N; each pool's numbers are those of this shard's slice
	Next   string     `json:"next,omitempty"` // ask with after=next for the next page; empty on the last
}
