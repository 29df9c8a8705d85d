package status

import (
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/web/api"
)

// Snapshot is what the status page reads of the daemon while it answers
// one request: the configuration it runs and the engine's view of it, and
// the daemon's build, clock, events, discovery and history. The daemon
// implements it over its running generation; tests implement it without a
// daemon. A Snapshot's configuration stays the same for the request;
// states, routes and events are read as they are at each call.
type Snapshot interface {
	// Config is the configuration as the engine runs it: Targets and
	// Hostnames indexed by target id, pool members are target ids.
	Config() *config.Config
	// Pools are the engine's pools, in the configuration's order.
	Pools() []*policy.Pool
	// PoolSummary describes pool pi with its counts, as the API does.
	PoolSummary(pi int) api.PoolJSON
	// Route returns the route of member m of pool pi, and whether it is
	// preferred.
	Route(pi, m int) (policy.Route, bool)
	// PoolsOf calls fn for every pool that lists target id.
	PoolsOf(id uint32, fn func(pi int))
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
	// Loaded is when the configuration was loaded.
	Loaded() time.Time
	// History returns target id's kept results, oldest first, and whether
	// they are being recorded. Asking for them keeps them from now on.
	History(id uint32) (results []api.HistoryResult, recorded bool)
	// HistoryCapacity is how many results a target's history keeps.
	HistoryCapacity() int

	// Build returns the version and the commit sonde was built from.
	Build() (version, revision string)
	// TCPPath names how TCP checks are probed ("raw", "connect"…).
	TCPPath() string
	// Now is the daemon's wall-clock time.
	Now() time.Time
	// LastEvent is the sequence number of the newest event.
	LastEvent() uint64
	// Events returns the newest events that keep selects (all for nil), at
	// most n, newest first.
	Events(n int, keep func(*api.Event) bool) []api.Event
	// Discovery returns the status of every pool's discovery.
	Discovery() []discovery.PoolStatus
	// StateAlert says what is wrong with saving the state file; "" when
	// nothing is.
	StateAlert() string
}
