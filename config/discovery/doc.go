// Package discovery follows the targets of pools that do not list them all in
// their files: the sources of Prometheus service discovery (file, HTTP, DNS,
// Kubernetes, Consul, and static groups with labels), their targets
// relabeled by the pool's relabel_configs, and the host names a pool lists,
// resolved again when their DNS answers expire.
//
// A [Runner] runs the sources of every pool: file_sd, http_sd and static
// groups with readers of its own (bounded in size, regular files only, JSON
// read as a stream; see fileFeed and httpFeed), the others with the
// discoverers their configurations bring ([DiscovererConfig]: Prometheus's,
// for dns, kubernetes and consul).
//
// Kinds. Which "*_configs" lists a pool may have is decided by the kinds
// registered ([RegisterKind], [Kinds]): package kinds registers
// Prometheus's when it is linked in, Kubernetes and Consul unless build
// tags leave them out. This package itself links neither the Kubernetes
// client nor Prometheus's discovery, so that package config, which decodes
// a pool's lists through the kinds registered, does not either. A source keeps what it sent last as chunks, compact storage
// of target groups (see chunk). The runner's worker relabels the sources
// whose content or rules changed — outside the runner's lock, within a time
// budget, given up for a newer update of the same source or when the runner
// closes — and puts each pool's targets together: the pool's labels, the
// group's and the target's, relabeled, "__address__" giving the address
// (an IP address, or a host name that the runner resolves), labels starting
// with "__" removed. It publishes them under a new version and tells its
// owner through Options.Changed; the owner takes them with [Runner.Found]
// and applies them, so a burst of updates is applied once.
//
// What a source found is only ever replaced by what it finds next: a source
// that fails (an HTTP error, an unreadable file, a lost Kubernetes watch)
// keeps its last targets and is reported as failing in [Runner.Status],
// with the error; so does one whose update is refused — more than half of
// its targets invalid, or its relabeling over its budget. A host name that
// stops resolving keeps its last addresses; one that never resolved is
// reported as unresolved, and retried with backoff.
//
// Relabel rules are checked when a configuration loads ([CheckRule]): a
// regex that can keep many states of its automaton alive at once costs a
// step per state for every byte of label it reads, and is refused.
//
// The package logs only through Options.Logger, where the discoverers' own
// messages go too.
package discovery
