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
// [Timing] (cadence, intervals, timeout, thresholds or window, initial
// state), the launcher of its probes and the pace of its first probes. The
// cadence says what an interval is measured from: the previous probe's
// completion (answer or timeout, [AfterCompletion]) or its send
// ([FixedRate], with the timeout at most the interval, so one probe is out at
// a time either way). Both make the detection windows of
// [Timing.FailureWindow] (W1) and [Timing.SuccessWindow] (W2) exact.
//
// First probes leave when the engine starts, not somewhere inside the first
// interval: a pool that starts unhealthy is routable one probe round trip
// later. Only the check's [Pace] spreads them, for a launcher that cannot
// take them all at once. Every first probe, at start or of a target added
// later, is filed the same way.
//
// Passive evidence is what the host's other traffic to a target (its
// clients' connections, seen by eBPF) says about it. Two lock-free entry
// points take it, through the same ring as probe results, so probes' results
// travel as before and nothing is allocated. [Engine.Recheck] pulls the
// target's next probe forward (a fast re-check): it leaves at once, but not
// sooner than a gap after its stream's previous send, not while a probe is
// out, and not for a target already unhealthy; repeated rechecks coalesce, and
// a recheck of a target that shares a probe stream pulls the whole stream.
// [Engine.Evidence] counts a failure seen in that traffic as a failed probe of
// that one target: toward fall (E1) or in the window (E2), with the fast
// re-check gap (E4) for its next probe. Evidence never makes a target
// healthy, and what the probes say stays the verdict: evidence older than the
// latest probe result is ignored. The [Observer] sees evidence as a Result,
// and a state change it causes as an [Event], with Passive set. The bound
// this gives depends on traffic and is [Timing.RecheckWindow]: about fall ×
// max(recheck gap, probe time) after the evidence; without traffic W1–W3
// remain the guarantees.
//
// What pools do with these states — the pool policy's traffic decisions — is
// package [github.com/sondeprobe/sonde/scheduler/policy], built on this
// package's API: [Engine.Status], the [Clock] and the [Observer]'s state
// changes.
package scheduler
