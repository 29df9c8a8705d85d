// Package config loads sonde's YAML configuration: checks with presets of the
// health-check systems sonde models (docs/semantics.md), pools of targets, and the
// validation, target expansion and deduplication that turn them into the flat
// tables the scheduler runs. examples/sonde.yaml describes the format.
//
// Errors. [Load] and [Parse] return the first problem found, as an error that
// wraps [ErrInvalid] and names the field, its value and what is allowed
// ("checks.edge.fall: 11 is out of range 2..10 for preset globalaccelerator").
// The order is fixed: the YAML document in file order (syntax, unknown
// fields, types, durations), then the checks by name, then the pools in file
// order (each pool's settings, then its targets, targets_file and disabled
// entries), then the remediations in file order.
//
// Checks. A check is written as a [CheckSpec] (optional fields are
// pointers, so "not set" differs from zero) and resolved into a [Check]
// holding its effective settings in two structs: [Probe], what one probe
// sends and how its answer is judged, and scheduler.Timing, how often the
// check probes and how results decide a state. Everything else is derived
// from those two: the probers' options ([Probe.HTTPOptions],
// [Probe.TCPOptions]), the probe stream key ([Check.ProbeKey], every field
// of Probe and the timeout, walked by reflection so that no setting can be
// forgotten), the detection windows (methods of the Timing). [NewCheck]
// resolves one check without a file, as `sonde probe` does. How a check is
// shown to people (`sonde config check`, the status page) is package
// settings' view of it; the healthy codes are probe/http's StatusCodes.
//
// Presets. A check's preset ([LookupPreset]) gives its defaults, its
// system's cadence among them (fixed rate or after completion) and, for
// appgateway, the default probe's Host 127.0.0.1 and a probe port that wins
// over the targets' ([Check.TargetPort]); every value can be overridden in
// the check, within the ranges the preset's system documents. A check evaluates with rise/fall (E1) or with a window (E2):
// setting one replaces the preset's other, setting both is an error.
//
// Targets. A target entry is an IP address, an address with a port, a CIDR
// block (without host bits set) or a host name ([ParseTargetEntry]); a
// targets file holds one per line, with # comments. `sonde scan` reads its
// arguments with the same grammar and messages ([ParseTargetArgs]). A CIDR
// block stands for every address in it, including the network and broadcast
// addresses of an IPv4 block: probing a fleet means probing every address it
// owns. Host names are resolved when the config is loaded, to one address
// chosen by the check's ip_family. A target's port is its own, else its
// check's, else 80 for HTTP and 443 for HTTPS; with appgateway, a port set on
// the check is every target's ([Check.TargetPort]).
//
// Discovery. A pool's discovery lists ("static_configs", "*_sd_configs")
// are decoded by the kind registered for each with package discovery
// ([discovery.LookupKind]); package kinds registers Prometheus's when a
// program links it, as the daemon does. This package links no discovery
// client itself, so a program that reads configurations without package
// kinds compiles no Kubernetes client, and refuses every discovery list,
// as a build without a kind refuses that kind, naming it.
//
// Remediation (R1, R2). Each entry of "remediation" is a [Remediation]: an
// action and its budget over a set of pools. It is validated here; the
// daemon's server/remediate package decides when it fires.
//
// Deduplication (P4, P5). Each unique (address, port, check) is one
// [Target], shared by every pool that lists it. The table of targets and
// what works on it alone — deduplication, probe streams, pool memberships,
// shards, probe rates — is package fleet's; this package reads the files
// and decides what goes into it. Checks that differ only in
// timing and evaluation (equal [Check.ProbeKey]) form one probe class;
// targets of one class with the same address and port share one probe
// stream, which the engine probes at the highest rate its members want and
// evaluates for each member with its own check. For HTTP checks without a
// host setting, the target's host name is part of the probe (it becomes the
// Host header), so two names of one address are two targets.
//
// Shards. With [LoadOptions.Shard], a configuration keeps only the targets
// of one shard of N ([Shard.Owns]: rendezvous hashing of the endpoint,
// address and port), so N processes probe every target once between them.
// The endpoint is the key because it contains every probe stream; any other
// source of targets (discovery) must apply Owns the same way. Validation
// does not depend on the shard: every listed target is checked and counted.
// Pools keep their names and policies and hold the shard's members only.
package config
