// Package bench measures sonde against private test fleets (package
// bench/fleet): the scenarios of `sonde bench` (sweep, steady, detect, http,
// faults, compare, passive) and their report. Package bench/ceiling is the
// same-run ceiling the sweeps are compared with. The scenarios measure with
// bench/connload (the client load), bench/host (the machine, its and a
// process's CPU and memory), bench/linkstat (an interface's packets on the
// wire), bench/bpfobjs (the BPF objects' memory and run time) and
// bench/promtext (a daemon's /metrics).
//
// [Run] builds the bench fleet: [BenchPrefix] with the static subsets whose
// outcome [Truth] gives, answered by the kernel or by the XDP responder
// ([Options].XDP), and runs the scenarios on it. Running needs root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ip, ethtool and nft commands.
package bench
