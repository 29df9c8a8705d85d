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
	st, ok := p.probes.get(id)
	if !ok || int(id) >= p.table.Len() {
		return probe.Result{}, verdictInvalid
	}
	ip, port := p.table.Endpoint16(id)
	if ip == nil {
		return probe.Result{}, verdictStale // a target removed since its probe
	}
	if *ip != r.remote || port != r.remotePort {
		return probe.Result{}, verdictInvalid
	}
	gen := st.gen.Load()
	sent := st.sent.Load()
	if sent == 0 || r.localPort != p.ports.Port(id, gen) {
		return probe.Result{}, verdictStale
	}
	if sent&answered != 0 {
		return probe.Result{}, verdictDuplicate
	}
	if !st.sent.CompareAndSwap(sent, sent|answered) {
		return probe.Result{}, verdictStale // a new probe left meanwhile
	}
	res := probe.Result{ID: id, Gen: gen, Latency: time.Duration(max(r.ktime-sent&^flagBits, 0)), Done: r.ktime}
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
