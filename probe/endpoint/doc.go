// Package endpoint is the one path from a name or an address to the
// endpoints sonde probes, shared by the configuration, discovery, the daemon,
// `sonde probe`, `sonde scan` and /probe:
//
//   - [ParseEntry] reads a target entry (address, host name or CIDR block,
//     with an optional port), the grammar of every target sonde reads;
//   - [Family] is the address families a host name is probed over
//     (ip_family: any, ip4, ip6);
//   - [Family.ForSource] and [Reachable] are the source-address rule: probes
//     leave from the source address, so only its family can reach a target;
//   - [Resolver] looks names up (tests inject a fake; [DNSResolver] also
//     tells how long an answer holds), and [Lookup] applies the one rule that
//     picks a name's addresses ([Pick]): of each family wanted, the lowest
//     address of the answer, IPv4 first;
//   - [OneShot] is the address a single probe goes to: the first of those.
//
// The package never logs and holds no state; a DNSResolver reads its files
// on every lookup.
package endpoint
