// Package prober is where a check meets its prober, for the daemon and for
// one-shot probes alike: [New] chooses the prober of a check (the one
// choice the daemon, `sonde probe` and /probe share), [Probers] holds the
// probers of a set of one-shot probes, [ParseProbeTarget] reads the target
// of a one-shot probe asked for from outside the configuration (/probe's
// target=), and [Address] and [CheckTarget] say where a one-shot probe of
// a target entry goes, with the rules of package endpoint that the
// configuration follows. It imports nothing of the daemon, so `sonde probe`
// runs without it.
package prober
