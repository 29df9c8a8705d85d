package statefile

import (
	"net/netip"
	"time"

	"github.com/sondeprobe/sonde/config"
	"github.com/sondeprobe/sonde/scheduler"
)

// Targets that discovery finds come after the start, so the state file's
// records of them find no target when it is read. Those of pools that
// discover are kept as pending states: a target that discovery (or a host
// name's lookup) adds within pendingFor of the start, to a pool of the same
// name whose check sends the same probe, at the same address, port and host
// name, resumes its saved state instead of starting afresh. Saves write the
// pending states that no target took yet, so a restart in that time loses
// none of them.

// pendingFor is how long after the start saved states wait for their
// targets.
const pendingFor = 10 * time.Minute

// pendingKey is a target of a pool, as a saved record names it.
type pendingKey struct {
	addr netip.Addr
	port uint16
	host string // "" unless the host name changes the probe
}

// pendingState is a saved state waiting for its target.
type pendingState struct {
	check  string
	digest [8]byte
	st     scheduler.TargetStatus // Since and LastProbe in Unix ns
}

// Pending are the saved states waiting for their targets, by pool
// name. A restore ([Restore]) makes them; the daemon keeps them under the
// lock of its updates. The zero value holds none.
type Pending struct {
	until time.Time
	pools map[string]map[pendingKey]pendingState
	n     int

	// The probe digest of the check take last matched: an edit's targets
	// mostly share a check, and a digest costs a hash of its settings.
	digestOf *config.Check
	digest   [8]byte
}

// add keeps a saved state for a target of pool.
func (p *Pending) add(pool string, k pendingKey, s pendingState) {
	if p.pools == nil {
		p.pools = map[string]map[pendingKey]pendingState{}
	}
	m := p.pools[pool]
	if m == nil {
		m = map[pendingKey]pendingState{}
		p.pools[pool] = m
	}
	if _, ok := m[k]; !ok {
		p.n++
	}
	m[k] = s
}

// Expire forgets every pending state once their time is over.
func (p *Pending) Expire(now time.Time) {
	if p.n > 0 && now.After(p.until) {
		*p = Pending{}
	}
}

// Take returns, and forgets, the saved state of target n of next as the
// engine should resume it (times in clock's Nanotime), or nil. Called for
// the targets an edit adds.
func (p *Pending) Take(next *config.Config, n uint32, clock scheduler.Clock) *scheduler.TargetStatus {
	if p.n == 0 {
		return nil
	}
	t := next.Targets[n]
	c := next.Checks[t.Check]
	k := pendingKey{addr: t.Addr(), port: t.Port}
	if c.HostNameMatters() {
		k.host = next.Hostnames[n]
	}
	for _, pool := range next.Pools {
		m := p.pools[pool.Name]
		if m == nil || next.Checks[pool.CheckIndex] != c {
			continue
		}
		s, ok := m[k]
		if !ok || s.check != c.Name || !pool.HasMember(n) {
			continue
		}
		if p.digestOf != c {
			p.digestOf, p.digest = c, probeDigest(c)
		}
		if s.digest != p.digest {
			continue
		}
		delete(m, k)
		p.n--
		st := s.st
		now, mono := clock.Now().UnixNano(), clock.Nanotime()
		st.Since = mono - (now - st.Since)
		if st.LastProbe != 0 {
			st.LastProbe = mono - (now - st.LastProbe)
		}
		return &st
	}
	return nil
}

// Len returns the number of saved states waiting for their targets.
func (p *Pending) Len() int { return p.n }
