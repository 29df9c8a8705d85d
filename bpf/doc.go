// Package bpf holds sonde's eBPF programs, their bpf2go-generated bindings and
// the loaders that attach them.
//
// Two programs live here. capture.c catches the replies to SYN probes on the
// probing interface's ingress and pushes them to a BPF ring buffer; [Capture]
// loads it, attaches it and reads the ring. passive.c watches the TCP
// connections any process on the host opens to watched targets, on the raw
// tracepoints inet_sock_set_state and tcp_retransmit_skb, and counts how
// they fare; [Passive] loads it (see [OpenPassive]). Minimum kernels for
// capture:
//
//   - 5.8: BPF ring buffer and bpf_ringbuf_query (required).
//   - 6.6: TCX links ([AttachTCX]); older kernels use a clsact qdisc with a
//     cls_bpf filter in direct-action mode ([AttachTC], clsact since 4.5).
//     Each TC attachment is a filter of its own (named sonde_capture, with a
//     handle holding the process id), so a reload attaches the new one
//     before it detaches the old one; filters left by a process that died
//     are removed by the next attachment to the interface. TCX links go
//     away with the process.
//   - 5.11: memory accounting through memory cgroups; before it the
//     RLIMIT_MEMLOCK limit is lifted by [NewCapture].
//
// Loading capture needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN).
//
// Passive observation needs kernel BTF (/sys/kernel/btf/vmlinux: the
// socket's fields are read through CO-RE), 5.12 (atomic fetch-and-add and
// exchange on map values), and CAP_BPF with CAP_PERFMON (or CAP_SYS_ADMIN);
// [PassiveAvailable] says which is missing. It does not need tracefs: raw
// tracepoints are attached through the bpf system call alone, so it works
// under ip netns exec and in containers that do not mount tracefs.
// Its memory: the watched targets are an open-addressing hash table per
// address family (an array map, built whole by [Passive.Watch] and swapped
// in), with a power of two of at least twice the family's targets as cells,
// 16 B per cell for IPv4 and 24 B for IPv6, and none for a family without
// targets; 72 B per [PassiveOptions.MaxTargets] for the stats array. A
// million IPv4 targets take 32 MiB of table (64 MiB for a moment while
// Watch replaces it) and 69 MiB of stats. A lookup reads at most 32 cells;
// Watch places every target within them (at a load factor of 1/2, the
// furthest lies about 10 cells from its home).
//
// Regenerate the bindings with `go generate ./bpf` (clang, libbpf-dev and
// linux-libc-dev).
package bpf
