package apiv1

import (
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/sondeprobe/sonde/probe"
	"github.com/sondeprobe/sonde/scheduler"
	"github.com/sondeprobe/sonde/scheduler/policy"
	"github.com/sondeprobe/sonde/server/apiv1/targetsel"
	"github.com/sondeprobe/sonde/server/web/api"
)

// PoolJSON describes pool pi, with its counts as of the router's latest
// decisions.
func PoolJSON(g Snapshot, pi int) api.PoolJSON {
	s := g.Summary(pi)
	cp := g.Config().Pools[pi]
	c := g.Config().Checks[cp.CheckIndex]
	return api.PoolJSON{
		Name: cp.Name, Check: c.Name, Protocol: c.Protocol.String(),
		Targets: s.Members, Disabled: s.Disabled, Healthy: s.Healthy, Unhealthy: s.Unhealthy,
		Unknown: s.Unknown, Unprobed: s.Unprobed, Unresolved: len(cp.Unresolved), Removed: s.Removed, Routable: s.Routable, Preferred: s.Preferred, FailingOpen: s.FailingOpen,
		HealthChecks: cp.HealthChecks, MaxUnhealthyPercent: cp.MaxUnhealthyPercent, FailOpen: cp.FailOpen,
		LatencyMarginSeconds: cp.LatencyMargin.Seconds(),
		Cadence:              c.Cadence.String(),
		FailureWindowSeconds: c.FailureWindow().Seconds(),
		SuccessWindowSeconds: c.SuccessWindow(c.Timeout).Seconds(),
		OnsetWindowSeconds:   c.FailureWindowFromOnset().Seconds(),
	}
}

// labelMap returns ls as a map, nil when empty.
func labelMap(ls labels.Labels) map[string]string {
	if ls.IsEmpty() {
		return nil
	}
	return ls.Map()
}

// UnresolvedBase is the first id of the listing's unresolved entries: they
// follow a pool's members, UnresolvedBase + their index.
const UnresolvedBase = 1 << 31

// unresolvedJSON describes the i-th unresolved target of pool pi.
func unresolvedJSON(g Snapshot, pi, i int) api.TargetJSON {
	cp := g.Config().Pools[pi]
	u := cp.Unresolved[i]
	c := g.Config().Checks[cp.CheckIndex]
	return api.TargetJSON{
		ID: UnresolvedBase + uint32(i), Target: targetsel.Unresolved(&u), Host: u.Host, Pool: cp.Name, Check: c.Name, Protocol: c.Protocol.String(),
		State: "unknown", Route: policy.Excluded.String(), LastOutcome: "unresolved", LastError: u.Err, StateSince: u.Since,
		FailureWindowSeconds: c.FailureWindow().Seconds(), SuccessWindowSeconds: c.SuccessWindow(c.Timeout).Seconds(),
		Labels: labelMap(u.Labels), Unresolved: true,
	}
}

func targetJSON(g Snapshot, pi, pos int, m policy.MemberRoute, state string, clock scheduler.Clock) api.TargetJSON {
	t := g.Config().Targets[m.ID]
	c := g.Config().Checks[t.Check]
	st := m.Status
	r := c.Timeout
	if st.Smoothed > 0 {
		r = st.Smoothed
	}
	j := api.TargetJSON{
		ID: m.ID, Target: t.AddrPort().String(), Host: g.Config().Hostnames[m.ID],
		Pool: g.Pools()[pi].Name, Check: c.Name, Protocol: c.Protocol.String(),
		State: state, Route: m.Route.String(), Preferred: m.Preferred, LatencyRank: m.Rank,
		Consecutive:          st.Streak,
		StateSince:           scheduler.WallTime(clock, st.Since),
		FailureWindowSeconds: c.FailureWindow().Seconds(),
		SuccessWindowSeconds: c.SuccessWindow(r).Seconds(),
		Labels:               labelMap(g.Config().Pools[pi].MemberLabels(pos)),
	}
	if st.Probed {
		j.LastOutcome = st.LastOutcome.String()
		j.LastStatus = int(st.LastStatus)
		j.LastRetransmits = st.LastRetransmits
		if st.LastOutcome == probe.LocalError {
			j.LastCause = st.LastCause.String()
		}
		if !st.LastOutcome.Healthy() {
			j.LastError = g.LastError(m.ID)
		}
		lp := scheduler.WallTime(clock, st.LastProbe)
		j.LastProbe = &lp
	}
	if exp := g.CertExpiry(m.ID); exp != 0 {
		t := time.Unix(exp, 0).UTC()
		j.CertExpiry = &t
	}
	if p, ok := g.Passive(m.ID); ok {
		j.Passive = &p
	}
	if st.Latency > 0 {
		l, s := st.Latency.Seconds(), st.Smoothed.Seconds()
		j.LatencySeconds, j.SmoothedLatencySeconds = &l, &s
	}
	return j
}
