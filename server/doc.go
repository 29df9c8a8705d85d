// Package server runs sonde as a daemon: it turns a configuration into probers
// and a scheduler, changes them in place on every reload without losing the
// state of unchanged targets or their probes in flight, keeps states across
// restarts (a state file), and serves Prometheus metrics, a JSON API and
// sonde's own health endpoints.
//
// The daemon has one scheduler engine and one set of probers for its life:
// one prober per check, chosen by [prober.New] (the same choice `sonde probe`
// makes), one SYN prober shared by the TCP checks that run on it, one set
// of HTTP event loops (probe/http.Loops) with a launcher per plain-HTTP
// check, and a probe.Workers pool per other check. Each loaded configuration is a
// generation, the configuration as the engine runs it (its targets at their
// engine ids), published for readers; a reload, or a change that service
// discovery or a host name's new DNS answer brings (a config/discovery
// Runner follows them, see discovery.go), matches the new targets with the
// running ones and turns the difference into an edit of the engine
// (scheduler.Edit). Reloads are coalesced and paced ([Options.ReloadGap]).
// Edits keep the ids of the targets they keep, so the API's paging cursors,
// which name ids, outlive reloads that keep the pools.
//
// Targets that share a probe stream (P4) are probed under the stream's
// leader; what a probe tells beyond its result (the error behind a failure,
// HTTP phase timings) is kept under the leader and shown for every member,
// in every pool that lists one.
//
// Decisions leave the daemon as events: the engine's state changes and the
// route decisions of each generation's policy.Router (removed, put back,
// preferred, fail-open) are numbered in one event log (server/events), a
// ring that the API pages, that event streams (Server-Sent Events) follow
// by cursor, and that feeds each event webhook's bounded queue, delivered
// in order by server/webhook with retries. Nothing in that path waits for a reader: a
// slow stream is dropped, a full webhook queue drops its oldest events, and
// both are counted. /probe answers one-off probes the way blackbox_exporter
// does, with probers of their own and bounded concurrency.
//
// The status page (server/status, its assets in server/ui) reads the same
// state as the API, through a snapshot of the running generation
// (snapshot.go), and renders it on the server; its pool view lists members a
// page at a time in one pass, with cursors that name the row
// a page ends at (not an id), and its timelines come from a fixed budget of
// per-target result rings (server/history) that the probe path fills
// without locks. Rings are kept by engine id: an edit keeps those of the
// targets it keeps and frees those of the targets it removes.
//
// The concerns around the engine have packages of their own, which know
// nothing of the daemon: server/statefile (the state file's codec, save,
// restore and lock; save.go decides when), server/events (event log,
// streams, webhooks), server/history (the result rings), server/apiv1 (the
// JSON API's handlers, which read the daemon through snapshot.go's Snapshot
// and Feeds), server/status (the status page), server/web (HTTP
// middleware: Host check, lifecycle and same-origin guards, admission
// slots, the connection limit, the route prefix) and server/web/api (the
// wire types of the API, the stream and the webhooks, for clients too).
package server
