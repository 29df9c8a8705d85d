// Package bpf holds sonde's eBPF programs, their bpf2go-generated bindings and
// the loaders that attach them.
//
// Two programs live here. capture.c catches the replies to SYN probes on the
// probing interface's ingress and pushes them to a BPF ring buffer; [Capture]
// loads it, attaches it and reads the ring. passive.c watches the TCP
// connections any process on the host opens to watched targets, on the
// tracepoints sock/inet_sock_set_state and tcp/tcp_retransmit_skb, and counts
// how they fare; [Passive] loads it (see [OpenPassive]). Minimum kernels for
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
// tracepoint records and sk_err are read through CO-RE), 5.12 (atomic
// fetch-and-add and exchange on map values), tracefs, and CAP_BPF with
// CAP_PERFMON (or CAP_SYS_ADMIN); [PassiveAvailable] says which is missing.
// Its memory: for each of watch4 and watch6, 16 B per MaxTargets rounded up
// to a power of two (the buckets, allocated at load) and 72 B per watched
// target (the kernel's hash element with key and value); 72 B per
// [PassiveOptions.MaxTargets] for the stats array. A million IPv4 targets
// take 85 MiB in watch4, 16 MiB in the empty watch6 and 69 MiB of stats.
//
// Regenerate the bindings with `go generate ./bpf` (clang, libbpf-dev and
// linux-libc-dev).
package bpf
