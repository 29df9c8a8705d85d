package syn

import (
	"time"

	"github.com/sondeprobe/sonde/bpf"
	"github.com/sondeprobe/sonde/probe"
)

// handle validates a decoded reply and delivers its result.
func (p *Prober) handle(r *reply) {
	res, v := p.match(r)
	switch v {
	case verdictOK:
		p.rc.kinds[r.kind&3].Add(1)
		p.sink.Deliver(res)
	case verdictInvalid:
		p.rc.invalid.Add(1)
	case verdictStale:
		p.rc.stale.Add(1)
	case verdictDuplicate:
		p.rc.duplicate.Add(1)
	}
}

type verdict uint8

const (
	verdictOK verdict = iota
	verdictInvalid
	verdictStale
	verdictDuplicate
)

// match checks a reply against its cookie and the target's state.
func (p *Prober) match(r *reply) (probe.Result, verdict) {
	id := p.key.id(r.seq, &r.local, &r.remote, r.localPort, r.remotePort)
	st := p.probes.get(id)
	if st == nil || int(id) >= p.table.Len() || *p.table.IP16(id) != r.remote || p.table.Port(id) != r.remotePort {
		return probe.Result{}, verdictInvalid
	}
	gen := st.gen.Load()
	sent := st.sent.Load()
	if sent == 0 || r.localPort != p.ports.Port(id, gen) {
		return probe.Result{}, verdictStale
	}
	if st.done.Swap(gen+1) == gen+1 {
		return probe.Result{}, verdictDuplicate
	}
	res := probe.Result{ID: id, Gen: gen, Latency: time.Duration(max(r.ktime-sent, 0)), Done: r.ktime}
	switch r.kind {
	case bpf.KindSynAck:
		res.Outcome = probe.Success
	case bpf.KindRST:
		res.Outcome = probe.Refused
	default:
		res.Outcome = probe.Unreachable
	}
	return res, verdictOK
}
