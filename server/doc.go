// Package server runs sonde as a daemon: it turns a configuration into probers
// and a scheduler, reloads it without losing the state of unchanged targets,
// and serves Prometheus metrics, a JSON API and sonde's own health endpoints.
//
// Each loaded configuration is a generation: one prober per check, chosen by
// [NewProber] (the same choice `sonde probe` makes), one SYN prober shared by
// the TCP checks that run on it, a probe.Workers pool per other check, and
// one scheduler engine. Targets that share a probe stream (P4) are probed
// under the stream's leader; what a probe tells beyond its result (the error
// behind a failure, HTTP phase timings) is kept under the leader and shown
// for every member, in every pool that lists one.
package server
