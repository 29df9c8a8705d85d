// Package fleet builds private test fleets: sets of addresses whose answer to
// a probe is known in advance, inside network namespaces of their own, for
// benchmarks and for tests of the probers.
//
// A [Fleet] is two network namespaces joined by a veth pair: the prober side,
// which has one address, no default route and a route for the fleet prefixes
// via the veth, and the fleet side, which answers for whole prefixes through
// AnyIP local routes (`ip route add local PREFIX dev lo`). Firewall rules on the
// fleet side drop or reject known subsets of addresses, so the ground truth of
// every address is known: listening port → success, Reject → refused (TCP
// RST), Unreachable → unreachable (ICMP), Drop → timeout. [Fleet.SetDrop]
// makes more addresses go silent while the fleet runs, and with
// [Config.Impair] a third namespace between the two loses, duplicates and
// delays packets ([Fleet.Impair]). Nothing leaves the namespaces the fleet
// creates.
//
// With [Config.XDP] the fleet answers SYN probes in XDP instead (see
// responder.c): the same ground truth, without work for the fleet's TCP stack,
// so that a prober's own cost is what a benchmark measures. Such a fleet
// answers SYNs only: HTTP and connect() probes need the kernel's fleet.
//
// Building a fleet needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ip,
// ethtool and nft commands.
package fleet
