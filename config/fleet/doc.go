// Package fleet is the compiled target table a configuration becomes: each
// unique (address, port, check) one [Target] of 24 bytes without pointers,
// numbered densely in file order; the pools' members as sorted ids with
// their labels ([Membership]); the probe streams that targets of one probe
// class on one endpoint share (P4, P5), each led by one target; and the
// shard a target belongs to ([Shard]).
//
// A [Builder] takes the targets as the pools list them, one entry each, and
// [Builder.Build] deduplicates them by sorting one flat slice: no map is
// keyed by every target, so ten million targets cost what their entries
// do. Package config reads the files and drives the Builder: which entries
// a pool has, which it disables, which shard keeps them. The package knows
// nothing of checks beyond their index and probe class.
package fleet
