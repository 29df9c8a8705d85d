//go:build ignore

// passive.c watches the TCP connections that any process on the host opens
// to the targets sonde knows, and counts per target how they fare: connected
// (with the handshake time), refused, timed out, unreachable, abandoned by
// the application, reset after establishment, and retransmissions. Failures
// go to user space through a ring buffer, rate-bounded per target; the exact
// counts are always in the per-target stats array.
//
// It attaches to two raw tracepoints (no fentry/fexit, no kprobes, and no
// tracefs: a raw tracepoint is attached by name through the bpf system
// call, so it works where tracefs is not mounted, as under ip netns exec):
//   - inet_sock_set_state (sk, oldstate, newstate), for every state change
//     of an inet socket;
//   - tcp_retransmit_skb (sk, skb, ...), for every retransmitted segment.
// Their first argument is the struct sock; its fields (family, peer
// address and port, protocol, sk_err, sk_err_soft, and tcp_sock's
// total_retrans and srtt_us) are read through CO-RE, relocated against the
// kernel's BTF (the declarations below name only what is read).
//
// No state is kept per connection: the outcome of a connection is read from
// the transition that ends its connect and from the socket itself, so the
// programs take no lock and allocate nothing for the host's connections
// (per-connection state in an LRU hash map cost the host several times the
// programs' own run time: its bucket and list locks disable interrupts).
// On a transition of a socket whose peer (address, port) is in watch4 or
// watch6:
//   - SYN_SENT -> ESTABLISHED: connected; the handshake time is the
//     kernel's round-trip sample of the SYN (tcp_sock.srtt_us, set from the
//     SYN-ACK before the state changes; none when the SYN was retransmitted
//     on a connection without TCP timestamps); the target's run of
//     consecutive failures ends (with an event when there was one, so user
//     space sees the run end);
//   - SYN_SENT -> CLOSE, classified by sk->sk_err, which the kernel sets
//     before it moves the socket to CLOSE on a reset, an ICMP error or a
//     timeout (or, when it is 0, by sk->sk_err_soft: an ICMP error that came
//     while the application held the socket, not yet read): ECONNREFUSED is
//     refused; ETIMEDOUT is timed out (SYN retries exhausted); EHOSTUNREACH,
//     ENETUNREACH, EHOSTDOWN and ENONET are unreachable. Any other value — 0
//     above all, the application closed the socket while connecting — is
//     timed out when the SYN was retransmitted at least once
//     (tcp_sock.total_retrans: it went unanswered for the initial RTO, how a
//     client with its own connect timeout, such as HAProxy's, sees a target
//     that drops), and abandoned otherwise (no evidence against the target:
//     a client aborting its own connects must trigger nothing). A soft ICMP
//     error the application read (SO_ERROR) before closing leaves no trace:
//     such an attempt counts as abandoned. It happens when the ICMP answer
//     comes back within the connect() call itself, from a target on the same
//     host;
//   - any other state -> CLOSE: ECONNRESET or EPIPE is a reset (counted, not
//     a failure); ETIMEDOUT and the unreachable errors are failures as
//     above; anything else is an ordinary close.
// Refused, timed out and unreachable are failures: each adds one to the
// target's run.
//
// sonde's own connects are not evidence. CLOSE -> SYN_SENT runs in the
// connect() caller's context: when the caller is sonde itself (cfg_self_*
// identify it by its pid namespace's device and inode and its tgid there,
// so the check holds inside containers) and the peer is watched, the socket
// goes into the LRU map own, and its later transitions are skipped (the
// last one removes it). Only sonde's own connects to watched targets pay
// for that map.
//
// The ring carries a record per failure while the run is at most the
// target's threshold, then at most one per RL_UNITS (about 25 ms) per
// target; the records left out are counted in dropped_rate, those lost to a
// full ring in dropped_ring.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// TCP states (include/net/tcp_states.h) and errno values, which the BPF
// target's headers do not carry.
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_CLOSE 7

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

#define EPIPE 32
#define ENONET 64
#define ENETUNREACH 101
#define ECONNRESET 104
#define ETIMEDOUT 110
#define ECONNREFUSED 111
#define EHOSTDOWN 112
#define EHOSTUNREACH 113

// Outcomes, in event.outcome; the Go side mirrors them (PassiveOutcome).
enum outcome {
	OUT_CONNECTED = 1,   // handshake completed
	OUT_REFUSED = 2,     // RST (or ICMP port unreachable) answered the SYN
	OUT_TIMED_OUT = 3,   // SYN unanswered, or an established connection timed out
	OUT_UNREACHABLE = 4, // ICMP host/network unreachable
	OUT_ABANDONED = 5,   // closed by the application while connecting, SYN never retransmitted
	OUT_RESET = 6        // reset by the peer after establishment
};

// The watched targets are two open-addressing hash tables with linear
// probing, one per family, each an array map (cell4 or cell6 cells) that
// user space builds whole and publishes through watch4 or watch6, an array
// of maps with one entry: a published table is never written again, so the
// program never sees one half-written, and the kernel frees a replaced one
// after the programs that use it are done. Cell 0 is the table's header;
// cells 1 to mask+1 hold the targets, a target at most WATCH_PROBES cells
// after its home cell 1 + (hash & mask) (user space picks another seed, or
// a bigger table, until they all are). A lookup stops at the target, at an
// empty cell, or after WATCH_PROBES cells. The hash is MurmurHash3's
// 64-bit finalizer over the key words, seeded per table; the Go side
// (watchtable.go) computes the same.
#define WATCH_PROBES 32

// cell4 is an IPv4 target. In the header (cell 0), key is the seed and
// slot the mask (cells - 1).
struct cell4 {
	__u64 key;       // address << 16 | port, both in network order read natively; 0: empty
	__u32 slot;      // index into stats
	__u16 threshold; // failures that make a trigger: every failure up to it is sent
	__u16 flags;     // reserved, zero
};

// cell6 is an IPv6 target. In the header (cell 0), hi is the seed and slot
// the mask (cells - 1).
struct cell6 {
	__u64 hi;        // address bytes 0 to 7, read natively
	__u64 lo;        // address bytes 8 to 15, read natively
	__u16 port;      // network order read natively; 0: empty
	__u16 threshold; // as in cell4
	__u32 slot;      // index into stats
};

// watch_val says where a watched target's evidence goes.
struct watch_val {
	__u32 slot;      // index into stats
	__u16 threshold; // failures that make a trigger: every failure up to it is sent
};

// stats are a target's counters, indexed by slot. The counters only grow;
// all are updated with atomic operations, as several CPUs may update one
// target at once.
struct stats {
	__u64 connected;    // handshakes completed
	__u64 refused;      // OUT_REFUSED
	__u64 timed_out;    // OUT_TIMED_OUT
	__u64 unreachable;  // OUT_UNREACHABLE
	__u64 abandoned;    // OUT_ABANDONED
	__u64 reset;        // OUT_RESET
	__u64 retransmits;  // retransmitted segments of followed connections
	__u64 handshake_ns; // sum of the handshake times of the handshakes below
	__u64 handshakes;   // connected with a round-trip sample of the SYN
	__u32 run;          // current run of consecutive failures
	__u32 rl_last;      // time of the latest record sent past the threshold, in RL_SHIFT units
};

// event is one record in the ring: a failure, or the first success after
// failures.
struct event {
	__u64 ktime;       // bpf_ktime_get_ns(): CLOCK_MONOTONIC nanoseconds
	__u32 slot;        // the target's slot
	__u32 run;         // consecutive failures including this one; for a success, the run it ended
	__u32 retransmits; // segments this connection retransmitted (tcp_sock.total_retrans)
	__u8 outcome;      // enum outcome
	__u8 pad[3];
};

// Force the event and cell types into BTF so that bpf2go emits their Go
// twins (and the cells' sizes are known where the tables' templates name
// them).
const struct event *unused_passive_event __attribute__((unused));
const struct cell4 *unused_passive_cell4 __attribute__((unused));
const struct cell6 *unused_passive_cell6 __attribute__((unused));

// Rate bound past the threshold: one record per RL_UNITS units of
// 2^RL_SHIFT ns (24 × 1.05 ms ≈ 25 ms, at most 4 per 100 ms).
#define RL_SHIFT 20
#define RL_UNITS 24

// watch4 and watch6 hold the published table of each family at index 0;
// none while the family has no target.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	// The template: each table is created with its own size
	// (BPF_F_INNER_MAP) and filled through mmap (BPF_F_MMAPABLE).
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, struct cell4);
	});
} watch4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	// The template: each table is created with its own size
	// (BPF_F_INNER_MAP) and filled through mmap (BPF_F_MMAPABLE).
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, struct cell6);
	});
} watch6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024); // set by user space before load
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

// own holds sonde's own connecting sockets to watched targets, keyed by
// their struct sock pointer.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536); // set by user space before load
	__type(key, __u64);
	__type(value, __u8);
} own SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18); // bytes; set by user space before load
} events SEC(".maps");

// Configuration, set by user space before the program is loaded.
volatile const __u8 cfg_exclude_self; // 1: ignore connects of the process below
volatile const __u64 cfg_self_dev;    // device of its pid namespace (kernel dev_t encoding)
volatile const __u64 cfg_self_ino;    // inode of its pid namespace
volatile const __u32 cfg_self_tgid;   // its process id in that namespace

// watch_ports has bit p set (word p / 64, bit p % 64) for every port p, in
// host order, that some watched target of either family has: a connection
// to any other port is no target's and is left at once, before its peer
// is read or looked up. User space sets the bits of a new watched set
// before it publishes the set's tables and clears the bits of the old one
// after, so a change never hides a target of the published tables.
volatile __u64 watch_ports[1024];

// Counters user space reads from the memory-mapped global data.
volatile __u64 dropped_rate; // failure records left out by the rate bound
volatile __u64 dropped_ring; // records lost to a full ring

// The kernel's socket, as far as this program reads it. Field offsets come
// from the kernel's BTF (CO-RE), not from these declarations; a field that
// the kernel keeps in an anonymous union (skc_daddr, skc_dport) is found
// there by name.
struct sonde_in6_addr {
	__u8 bytes[16];
};

struct sock_common {
	__u32 skc_daddr;                     // IPv4 peer, network order
	__u16 skc_dport;                     // peer port, network order
	unsigned short skc_family;           // AF_INET or AF_INET6
	struct sonde_in6_addr skc_v6_daddr;  // IPv6 peer; only with CONFIG_IPV6
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol; // a u16 of its own since Linux 5.6, a bit field before
	int sk_err;
	int sk_err_soft;
} __attribute__((preserve_access_index));

// tcp_sock starts with its struct sock (through inet_connection_sock and
// inet_sock): a TCP socket's pointer is both.
struct tcp_sock {
	__u32 srtt_us;       // smoothed RTT << 3, in µs
	__u32 total_retrans; // segments retransmitted, the SYN included
} __attribute__((preserve_access_index));

// peer is a connection's remote end, as peer_of reads it from the socket.
struct peer {
	__u16 family;   // AF_INET or AF_INET6
	__u16 port;     // host order
	__u8 addr4[4];  // AF_INET
	__u8 addr6[16]; // AF_INET6
};

// peer_of reads the remote end of sk into p. An AF_INET6 socket's address
// is not read on a kernel without IPv6 (no skc_v6_daddr): no IPv6 target
// matches a zero address.
static __always_inline void peer_of(const struct sock *sk, struct peer *p)
{
	__u16 port = 0;

	p->family = sk->__sk_common.skc_family;
	port = sk->__sk_common.skc_dport;
	p->port = bpf_ntohs(port);
	if (p->family == AF_INET) {
		__u32 a = sk->__sk_common.skc_daddr;
		__builtin_memcpy(p->addr4, &a, 4);
	} else if (p->family == AF_INET6 && bpf_core_field_exists(sk->__sk_common.skc_v6_daddr)) {
		__builtin_memcpy(p->addr6, &sk->__sk_common.skc_v6_daddr, 16);
	}
}

// mix is MurmurHash3's 64-bit finalizer.
static __always_inline __u64 mix(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

// lookup4 finds the IPv4 target key (as in cell4) and copies its entry to w.
static __always_inline int lookup4(__u64 key, struct watch_val *w)
{
	__u32 idx = 0;
	void *tab = bpf_map_lookup_elem(&watch4, &idx);
	if (!tab)
		return 0;
	struct cell4 *c = bpf_map_lookup_elem(tab, &idx);
	if (!c)
		return 0;
	__u32 mask = c->slot;
	__u64 pos = mix(key ^ c->key);
	for (__u32 i = 0; i < WATCH_PROBES; i++) {
		idx = 1 + ((__u32)(pos + i) & mask);
		c = bpf_map_lookup_elem(tab, &idx);
		if (!c || !c->key)
			return 0;
		if (c->key == key) {
			w->slot = c->slot;
			w->threshold = c->threshold;
			return 1;
		}
	}
	return 0;
}

// lookup6 finds the IPv6 target (hi, lo, port as in cell6) and copies its
// entry to w.
static __always_inline int lookup6(__u64 hi, __u64 lo, __u16 port, struct watch_val *w)
{
	__u32 idx = 0;
	void *tab = bpf_map_lookup_elem(&watch6, &idx);
	if (!tab)
		return 0;
	struct cell6 *c = bpf_map_lookup_elem(tab, &idx);
	if (!c)
		return 0;
	__u32 mask = c->slot;
	__u64 pos = mix(mix(mix(hi ^ c->hi) ^ lo) ^ port);
	for (__u32 i = 0; i < WATCH_PROBES; i++) {
		idx = 1 + ((__u32)(pos + i) & mask);
		c = bpf_map_lookup_elem(tab, &idx);
		if (!c || !c->port)
			return 0;
		if (c->hi == hi && c->lo == lo && c->port == port) {
			w->slot = c->slot;
			w->threshold = c->threshold;
			return 1;
		}
	}
	return 0;
}

// lookup finds the watch entry of p and copies it to w; it reports whether
// p is watched. An IPv4-mapped IPv6 peer (an AF_INET6 socket connecting to
// IPv4) is looked up among the IPv4 targets.
static __always_inline int lookup(const struct peer *p, struct watch_val *w)
{
	__u16 port = bpf_htons(p->port);
	__u32 a4;

	if (p->family == AF_INET) {
		__builtin_memcpy(&a4, p->addr4, 4);
		return lookup4((__u64)a4 << 16 | port, w);
	}
	if (p->family != AF_INET6)
		return 0;
	const __u8 *a = p->addr6;
	if (!(a[0] | a[1] | a[2] | a[3] | a[4] | a[5] | a[6] | a[7] | a[8] | a[9]) && a[10] == 0xff && a[11] == 0xff) {
		__builtin_memcpy(&a4, a + 12, 4);
		return lookup4((__u64)a4 << 16 | port, w);
	}
	__u64 hi, lo;
	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	return lookup6(hi, lo, port, w);
}

// is_self reports whether the current task belongs to sonde's own process.
static __always_inline int is_self(void)
{
	struct bpf_pidns_info ns = {};

	if (!cfg_exclude_self)
		return 0;
	// Fails (and so is not sonde) when the task is in another pid namespace.
	if (bpf_get_ns_current_pid_tgid(cfg_self_dev, cfg_self_ino, &ns, sizeof(ns)))
		return 0;
	return ns.tgid == cfg_self_tgid;
}

static __always_inline void emit(__u32 slot, __u8 outcome, __u32 run, __u32 retransmits, __u64 now)
{
	struct event ev = {.ktime = now, .slot = slot, .run = run, .retransmits = retransmits, .outcome = outcome};

	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), 0))
		__sync_fetch_and_add(&dropped_ring, 1);
}

// fail counts a failure of outcome against st and sends its record unless
// the rate bound holds it back.
static __always_inline void fail(struct stats *st, const struct watch_val *w, __u8 outcome, __u32 retransmits)
{
	__u64 now = bpf_ktime_get_ns();

	switch (outcome) {
	case OUT_REFUSED:
		__sync_fetch_and_add(&st->refused, 1);
		break;
	case OUT_TIMED_OUT:
		__sync_fetch_and_add(&st->timed_out, 1);
		break;
	default:
		__sync_fetch_and_add(&st->unreachable, 1);
		break;
	}
	__u32 run = __sync_fetch_and_add(&st->run, 1) + 1;
	if (run > w->threshold) {
		__u32 t = (__u32)(now >> RL_SHIFT);
		__u32 last = st->rl_last;
		// Two CPUs may both pass here at once: the bound is approximate.
		if (t - last < RL_UNITS) {
			__sync_fetch_and_add(&dropped_rate, 1);
			return;
		}
		st->rl_last = t;
	}
	emit(w->slot, outcome, run, retransmits, now);
}

// unreachable reports whether err says the target could not be reached.
static __always_inline int unreachable(int err)
{
	return err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN || err == ENONET;
}

// retransmits returns the segments sk retransmitted.
static __always_inline __u32 retransmits(const struct sock *sk)
{
	__u32 n = 0;

	bpf_core_read(&n, sizeof(n), &((const struct tcp_sock *)sk)->total_retrans);
	return n;
}

static __always_inline void connected(struct stats *st, const struct watch_val *w, const struct sock *sk)
{
	__u32 srtt = 0;

	__sync_fetch_and_add(&st->connected, 1);
	bpf_core_read(&srtt, sizeof(srtt), &((const struct tcp_sock *)sk)->srtt_us);
	if (srtt) {
		__sync_fetch_and_add(&st->handshake_ns, (__u64)(srtt >> 3) * 1000);
		__sync_fetch_and_add(&st->handshakes, 1);
	}
	// The run ends; only the success that ends one is sent.
	if (st->run == 0)
		return;
	__u32 run = __sync_lock_test_and_set(&st->run, 0);
	if (run)
		emit(w->slot, OUT_CONNECTED, run, retransmits(sk), bpf_ktime_get_ns());
}

// closed classifies the close of a connection to a watched target;
// connecting says the socket was still connecting (SYN_SENT).
static __always_inline void closed(struct stats *st, const struct watch_val *w, const struct sock *sk, int connecting)
{
	int err = sk->sk_err;

	if (!err && connecting)
		err = sk->sk_err_soft;
	if (connecting) {
		__u32 rtx = retransmits(sk);
		if (err == ECONNREFUSED)
			fail(st, w, OUT_REFUSED, rtx);
		else if (err == ETIMEDOUT)
			fail(st, w, OUT_TIMED_OUT, rtx);
		else if (unreachable(err))
			fail(st, w, OUT_UNREACHABLE, rtx);
		else if (rtx)
			fail(st, w, OUT_TIMED_OUT, rtx);
		else
			__sync_fetch_and_add(&st->abandoned, 1);
		return;
	}
	if (err == ECONNRESET || err == EPIPE)
		__sync_fetch_and_add(&st->reset, 1);
	else if (err == ETIMEDOUT)
		fail(st, w, OUT_TIMED_OUT, retransmits(sk));
	else if (unreachable(err))
		fail(st, w, OUT_UNREACHABLE, retransmits(sk));
}

// watched_tcp finds the watch entry of sk's peer when sk is a TCP socket.
static __always_inline int watched_tcp(const struct sock *sk, struct watch_val *w)
{
	struct peer p = {};
	__u16 port = bpf_ntohs(sk->__sk_common.skc_dport);

	if (!(watch_ports[port >> 6] & (1ULL << (port & 63))))
		return 0;
	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	peer_of(sk, &p);
	return lookup(&p, w);
}

// passive_state runs on every state change of an inet socket (TCP, and
// others, which it leaves alone).
SEC("tp_btf/inet_sock_set_state")
int passive_state(__u64 *ctx)
{
	const struct sock *sk = (const struct sock *)ctx[0];
	int oldstate = (int)ctx[1], newstate = (int)ctx[2];
	struct watch_val w = {};
	__u64 key = (__u64)sk;

	if (!(oldstate == TCP_CLOSE && newstate == TCP_SYN_SENT) &&
	    !(oldstate == TCP_SYN_SENT && newstate == TCP_ESTABLISHED) && newstate != TCP_CLOSE)
		return 0;
	if (!watched_tcp(sk, &w))
		return 0;
	if (newstate == TCP_SYN_SENT) {
		if (is_self()) {
			__u8 one = 1;
			bpf_map_update_elem(&own, &key, &one, BPF_ANY);
		}
		return 0;
	}
	if (cfg_exclude_self && bpf_map_lookup_elem(&own, &key)) {
		if (newstate == TCP_CLOSE)
			bpf_map_delete_elem(&own, &key);
		return 0;
	}
	__u32 slot = w.slot;
	struct stats *st = bpf_map_lookup_elem(&stats, &slot);
	if (!st)
		return 0;
	if (newstate == TCP_ESTABLISHED)
		connected(st, &w, sk);
	else
		closed(st, &w, sk, oldstate == TCP_SYN_SENT);
	return 0;
}

// passive_retransmit counts a retransmission of a connection to a watched
// target. Linux 6.12 added a third argument (err); only the first is read.
SEC("tp_btf/tcp_retransmit_skb")
int passive_retransmit(__u64 *ctx)
{
	const struct sock *sk = (const struct sock *)ctx[0];
	struct watch_val w = {};
	__u64 key = (__u64)sk;

	if (!watched_tcp(sk, &w))
		return 0;
	if (cfg_exclude_self && bpf_map_lookup_elem(&own, &key))
		return 0;
	__u32 slot = w.slot;
	struct stats *st = bpf_map_lookup_elem(&stats, &slot);
	if (!st)
		return 0;
	__sync_fetch_and_add(&st->retransmits, 1);
	return 0;
}

// passive_lookup runs lookup for tests (BPF_PROG_TEST_RUN; user space never
// attaches it): the packet, past its Ethernet header, is a struct peer; the
// result is 0 when the peer is not watched, threshold << 24 | slot when it
// is (thresholds are 1 to 255, slots below 2^24).
SEC("socket")
int passive_lookup(struct __sk_buff *skb)
{
	struct peer p = {};
	struct watch_val w = {};

	if (bpf_skb_load_bytes(skb, 0, &p, sizeof(p)))
		return 0;
	if (!lookup(&p, &w))
		return 0;
	return (__u32)w.threshold << 24 | (w.slot & 0xffffff);
}
