// Package history keeps recent probe results of some targets, for the
// status page's timelines and /api/v1/history.
//
// A ring of results per target would cost a million targets hundreds of
// megabytes for pages nobody opens, so the daemon keeps rings for a fixed
// number of targets (the daemon's HistoryTargets) and hands them out by need:
//
//   - while rings are free, to every target that reports a result: a fleet
//     no larger than the budget has the history of every target;
//   - then to a target whose probe fails, in place of a target that has
//     neither failed nor been viewed for historyKeep (the targets people
//     look at in an incident are the failing ones);
//   - and to a target whose page is opened, in place of the one kept the
//     shortest, so an operator always gets a timeline from then on.
//
// A probe result costs a target without a ring one atomic load (plus one
// when it failed); a target with one, a few atomic stores into its ring.
// Neither takes a lock or allocates: a ring is claimed under a mutex that
// the probe path only tries, and allocated once, at its first claim.
package history
