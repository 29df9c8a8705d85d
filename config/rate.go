package config

import "github.com/sondeprobe/sonde/config/fleet"

// Streams returns the number of probe streams the engine runs
// ([fleet.Streams]).
func (c *Config) Streams() int { return fleet.Streams(c.Targets) }

// EndpointRates returns the probe rate of every endpoint that receives
// probes, sorted by endpoint ([fleet.EndpointRates]): a stream probes at
// the highest [scheduler.Timing.ProbeRate] of its members that are not
// disabled.
func (c *Config) EndpointRates() []fleet.EndpointRate {
	return fleet.EndpointRates(c.Targets, c.probeRates())
}

// ProbeRates summarises [Config.EndpointRates] without building the list.
func (c *Config) ProbeRates() fleet.RateSummary { return fleet.ProbeRates(c.Targets, c.probeRates()) }

// probeRates returns the probe rate of each check, by index.
func (c *Config) probeRates() []float64 {
	rates := make([]float64, len(c.Checks))
	for i, ch := range c.Checks {
		rates[i] = ch.ProbeRate()
	}
	return rates
}
