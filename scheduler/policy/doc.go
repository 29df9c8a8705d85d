// Package policy is the pool policy: it turns the health states that
// package scheduler keeps into each pool's traffic decisions.
//
// A [Router] applies the pool policy ([PoolPolicy]: P1 cap, P2 fail-open, E7
// preferred set) as states change: the engine's observer notifies it of each
// change through a lock-free ring, and its own goroutine updates the pools'
// decisions, publishes them for readers and reports each change as a
// [RouteEvent]. Probes cost it nothing.
//
// The router reads the engine only through its exported API: the state of a
// target ([scheduler.Engine.Status]), the number of targets and the engine's
// [scheduler.Clock]. A [Pool] names its members by the engine's target ids.
package policy
