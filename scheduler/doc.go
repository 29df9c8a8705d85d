// Package scheduler turns probe results into health states on time, for up to
// millions of targets.
//
// An [Engine] splits its targets over shards (one per CPU by default). A shard
// is the single owner of its targets' compact state, indexed by uint32 id, and
// of a hierarchical timing wheel that holds each target's next send or its
// probe's deadline: there is no goroutine or timer per target. Due probes go
// to a [probe.Launcher] in batches; results come back through
// [Engine.Deliver] into a lock-free ring per shard. Each result feeds the
// target's evaluator (consecutive rise/fall E1, or sliding window E2), and a
// state change is reported to the [Observer]. Readers see each target through
// atomics ([Engine.Status]), never by stopping a shard.
//
// A running engine is changed in place by an [Edit]: targets added (probed at
// once), removed, disabled or enabled, checks retimed. The editor builds each
// shard's part as a batch of commands and pushes it onto the shard's
// lock-free inbox; the shard applies it between two steps. Targets an edit
// does not name keep their state, streak, schedule and probe in flight.
// Records live in blocks that are never moved, so the tables grow while
// shards and readers use them. An id keeps its shard and record for the
// engine's life and is given out again only after its shard applied the
// removal; it keeps its probe generation, and timers, which cannot be
// cancelled, count only when they find their record waiting for that very
// tick, so nothing of a removed target reaches the one that takes its id.
//
// A [Check] is what the engine runs for the targets of one check: its
// [Timing] (intervals, timeout, thresholds or window, initial state) and the
// launcher of its probes. The interval is the gap from a probe's completion
// (answer or timeout) to the next send, which makes the detection windows of
// [Timing.FailureWindow] (W1) and [Timing.SuccessWindow] (W2) exact.
package scheduler
