package fleet

import (
	"cmp"
	"net/netip"
	"slices"
)

// Streams returns the number of probe streams the engine runs for
// targets: leaders with at least one member that is not disabled
// everywhere.
func Streams(targets []Target) int {
	n := 0
	for id, t := range targets {
		if t.Leader() == uint32(id) && !t.Disabled() {
			n++
		}
	}
	return n
}

// EndpointRate is the probe rate sonde puts on one endpoint (P6).
type EndpointRate struct {
	Endpoint netip.AddrPort
	Rate     float64 // probes per second, at most
}

// RateSummary sums up the probe rates over all endpoints (P6).
type RateSummary struct {
	Endpoints   int            // endpoints that receive probes
	Max         float64        // highest rate on one endpoint, probes per second
	MaxEndpoint netip.AddrPort // an endpoint with the highest rate (the lowest such)
	Total       float64        // sum over all endpoints: every probe sonde sends per second
}

// EndpointRates returns the probe rate of every endpoint (address and port)
// of targets that receives probes, sorted by endpoint; rates gives the
// probe rate of each check index. An endpoint's rate is the sum over its
// streams of the stream's rate, the highest rate among the stream's members
// that are not disabled.
func EndpointRates(targets []Target, rates []float64) []EndpointRate {
	var out []EndpointRate
	eachEndpointRate(targets, rates, func(ep netip.AddrPort, rate float64) {
		out = append(out, EndpointRate{Endpoint: ep, Rate: rate})
	})
	return out
}

// ProbeRates summarises [EndpointRates] without building the list.
func ProbeRates(targets []Target, rates []float64) RateSummary {
	var s RateSummary
	eachEndpointRate(targets, rates, func(ep netip.AddrPort, rate float64) {
		s.Endpoints++
		s.Total += rate
		if rate > s.Max {
			s.Max, s.MaxEndpoint = rate, ep
		}
	})
	return s
}

// eachEndpointRate calls fn for every probed endpoint in endpoint order.
func eachEndpointRate(targets []Target, rates []float64, fn func(netip.AddrPort, float64)) {
	streamRate := make([]float64, len(targets)) // by leader id
	var leaders []uint32
	for _, t := range targets {
		if t.Disabled() {
			continue
		}
		if streamRate[t.Leader()] == 0 {
			leaders = append(leaders, t.Leader())
		}
		streamRate[t.Leader()] = max(streamRate[t.Leader()], rates[t.Check])
	}
	slices.SortFunc(leaders, func(a, b uint32) int {
		return cmp.Or(targets[a].AddrPort().Compare(targets[b].AddrPort()), cmp.Compare(a, b))
	})
	for i := 0; i < len(leaders); {
		ep := targets[leaders[i]].AddrPort()
		sum := 0.0
		for ; i < len(leaders) && targets[leaders[i]].AddrPort() == ep; i++ {
			sum += streamRate[leaders[i]]
		}
		fn(ep, sum)
	}
}
