// Package bpf holds sonde's eBPF programs, their bpf2go-generated bindings and
// the loaders that attach them.
//
// The one program today, capture.c, catches the replies to SYN probes on the
// probing interface's ingress and pushes them to a BPF ring buffer; [Capture]
// loads it, attaches it and reads the ring. Minimum kernels:
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
// Loading needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN). Regenerate the
// bindings with `go generate ./bpf` (clang, libbpf-dev and linux-libc-dev).
package bpf
