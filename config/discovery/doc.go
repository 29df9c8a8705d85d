// Package discovery follows the targets of pools that do not list them all in
// their files: the sources of Prometheus service discovery (file, HTTP, DNS,
// Kubernetes, Consul, and static groups with labels), their targets
// relabeled by the pool's relabel_configs, and the host names a pool lists,
// resolved again when their DNS answers expire.
//
// A [Runner] runs the sources of every pool with Prometheus's own
// discoverers, keeps the target groups each one sent last, and turns them
// into a pool's targets when asked ([Runner.Found]): the pool's labels, the
// group's and the target's, relabeled, "__address__" giving the address
// (an IP address, or a host name that the runner resolves), labels starting
// with "__" removed. It tells its owner that something may have changed
// through Options.Changed, debounced; the owner then asks for the targets
// and applies them, so a burst of updates is applied once.
//
// What a source found is only ever replaced by what it finds next: a source
// that fails (an HTTP error, an unreadable file, a lost Kubernetes watch)
// keeps its last target groups and is reported as failing in [Runner.Status],
// with the error. A host name that stops resolving keeps its last addresses;
// one that never resolved is reported as unresolved, and retried with
// backoff.
//
// The package logs only through Options.Logger, where the discoverers' own
// messages go too.
package discovery
