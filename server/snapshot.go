package server

import (
	"net/http"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/config/discovery"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1"
	"github.com/sondeprobe/sonde/server/history"
	"github.com/sondeprobe/sonde/server/remediate"
	"github.com/sondeprobe/sonde/server/status"
	"github.com/sondeprobe/sonde/server/web/api"
)

// snapshot is the daemon's state as the status page (status.Snapshot) and
// the API's lists (apiv1.Snapshot) read it: the running generation, and
// the daemon around it.
type snapshot struct {
	d *Daemon
	g *generation
}

// statusSnapshot returns the daemon's state for one status page request;
// nil when no configuration runs.
func (d *Daemon) statusSnapshot() status.Snapshot {
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	return &snapshot{d: d, g: g}
}

// apiSnapshot returns the daemon's state for one list request; nil when no
// configuration runs.
func (d *Daemon) apiSnapshot() apiv1.Snapshot {
	g := d.cur.Load()
	if g == nil {
		return nil
	}
	return &snapshot{d: d, g: g}
}

func (s *snapshot) Layout() uint32                    { return s.g.layout }
func (s *snapshot) Summary(pi int) policy.PoolSummary { return s.g.router.Summary(pi) }
func (s *snapshot) Ranks(pi int) []uint32 {
	return s.g.rankCache[pi].Ranks(func() []uint32 { return s.g.router.Ranks(pi) })
}

func (s *snapshot) Config() *config.Config                    { return s.g.cfg }
func (s *snapshot) Pools() []*policy.Pool                     { return s.g.pools }
func (s *snapshot) PoolSummary(pi int) api.PoolJSON           { return apiv1.PoolJSON(s, pi) }
func (s *snapshot) Route(pi, m int) (policy.Route, bool)      { return s.g.router.Route(pi, m) }
func (s *snapshot) PoolsOf(id uint32, fn func(pi int))        { s.g.poolsOf(id, fn) }
func (s *snapshot) Status(id uint32) scheduler.TargetStatus   { return s.g.engine.Status(id) }
func (s *snapshot) Clock() scheduler.Clock                    { return s.g.engine.Clock() }
func (s *snapshot) LastError(id uint32) string                { return s.g.lastError(id) }
func (s *snapshot) CertExpiry(id uint32) int64                { return s.g.certExpiry(id) }
func (s *snapshot) Passive(id uint32) (api.PassiveJSON, bool) { return s.d.passive.Target(id) }
func (s *snapshot) Loaded() time.Time                         { return s.g.loaded }
func (s *snapshot) HistoryCapacity() int                      { return s.d.hist.Results() }
func (s *snapshot) Build() (version, revision string)         { return s.d.opt.Version, s.d.opt.Revision }
func (s *snapshot) Now() time.Time                            { return s.d.opt.Clock.Now() }
func (s *snapshot) LastEvent() uint64                         { return s.d.events.Last() }
func (s *snapshot) Discovery() []discovery.PoolStatus         { return s.d.discoveryStatus() }
func (s *snapshot) Events(n int, keep func(*api.Event) bool) []api.Event {
	return s.d.events.Newest(n, keep)
}

func (s *snapshot) TCPPath() string {
	tcp, _ := s.d.TCPPath()
	return string(tcp)
}

// History views target id's history (so it is kept from now on) and reads
// its results, oldest first.
func (s *snapshot) History(id uint32) ([]api.HistoryResult, bool) {
	clock := s.g.engine.Clock()
	recorded := s.d.hist.View(s.g.hist, id, clock.Nanotime())
	raw := s.d.hist.Read(s.g.hist, id, make([]history.Sample, 0, s.d.hist.Results()))
	out := make([]api.HistoryResult, len(raw))
	for i, r := range raw {
		out[i] = r.Result(clock)
	}
	return out, recorded
}

func (s *snapshot) StateAlert() string {
	if s.d.saves == nil {
		return ""
	}
	return saveAlert(s.d.saves, s.d.opt.StateFile, time.Now())
}

// feeds is the daemon as the API reads it apart from the running
// configuration (apiv1.Feeds): its event log and streams, its discovery
// and its remediations.
type feeds struct{ d *Daemon }

func (f feeds) Window(since uint64, limit int) (from, end, lost uint64) {
	return f.d.events.Window(since, limit)
}

func (f feeds) CopyRange(from, end uint64, buf []api.Event) ([]api.Event, bool) {
	return f.d.events.CopyRange(from, end, buf)
}

func (f feeds) ServeStream(w http.ResponseWriter, r *http.Request) { f.d.streams.ServeHTTP(w, r) }
func (f feeds) Discovery() []discovery.PoolStatus                  { return f.d.discoveryStatus() }
func (f feeds) Remediations() remediate.Status                     { return f.d.rem.Status(f.d.opt.Clock.Nanotime()) }
