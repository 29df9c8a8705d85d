//go:build ignore

// capture.c keeps the replies to sonde's TCP SYN probes and hands them to user
// space through a BPF ring buffer.
//
// It runs on the probing interface's ingress (TCX, or a clsact/cls_bpf filter
// in direct-action mode) and looks at IPv4 and IPv6 packets without extension
// headers or VLAN tags:
//   - TCP SYN-ACK and RST addressed to sonde's source address and source-port
//     range (the answers to probes);
//   - ICMP destination unreachable and ICMPv6 destination unreachable that
//     quote a TCP packet sent from sonde's address and port range (a probe that
//     a router or host refused).
// Every packet continues to the stack (TC_ACT_UNSPEC, which is TCX_NEXT for a
// TCX program), except, with cfg_answer, a SYN-ACK to sonde's address and
// port range: the program turns it in place into the RST the kernel would
// send (seq = the SYN-ACK's ack, no options), sends it back out of the
// interface it came in on (bpf_redirect to its egress) and the SYN-ACK never
// reaches the stack. The half-open connection on the target is closed as
// promptly, and the host's TCP does no socket lookup, RST build or route
// lookup per reply. A SYN-ACK the program cannot answer so (IP options, a
// device without an Ethernet header, a helper that fails) goes to the stack,
// which answers it.
//
// Records are submitted without waking the reader (BPF_RB_NO_WAKEUP), which
// drains the ring on its own short period; the record that takes the ring past
// cfg_wakeup_bytes wakes the reader at once. A full ring is counted, never
// silent.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/icmpv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// Kinds of reply in event.kind.
enum reply_kind {
	KIND_SYNACK = 1, // TCP SYN-ACK: the port is open
	KIND_RST = 2,    // TCP RST: the port is closed
	KIND_UNREACH = 3 // ICMP/ICMPv6 destination unreachable quoting a probe
};

// event is one reply, in the orientation of the probe: "remote" is the probed
// target, "local" is sonde. For ICMP the addresses, ports and sequence number
// come from the quoted probe.
struct event {
	__u64 ktime;       // bpf_ktime_get_ns() at ingress: CLOCK_MONOTONIC nanoseconds
	__u8 remote[16];   // target address; IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d)
	__u8 local[16];    // sonde's address the probe came from, same form
	__u32 seq;         // TCP sequence number of the reply; for ICMP the quoted probe's (host order)
	__u32 ack;         // TCP acknowledgment number of the reply; for ICMP the quoted probe's (host order)
	__u16 remote_port; // target port (host order)
	__u16 local_port;  // sonde's source port of the probe (host order)
	__u8 kind;         // enum reply_kind
	__u8 tcp_flags;    // TCP flags of the reply, or of the quoted probe for ICMP
	__u8 family;       // 4 or 6
	__u8 icmp_code;    // ICMP or ICMPv6 code for KIND_UNREACH, else 0
};

// Force the event type into BTF so that bpf2go emits its Go twin.
const struct event *unused_event __attribute__((unused));

// Indexes of the per-CPU counters.
enum counter {
	CNT_SEEN = 0,     // packets the program looked at
	CNT_MATCHED = 1,  // replies to sonde's probes pushed (or pushed at) the ring
	CNT_RINGFULL = 2, // replies lost because the ring buffer was full
	CNT_ANSWERED = 3, // SYN-ACKs answered with an RST by the program (cfg_answer)
	CNT_MAX = 4
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 23); // bytes; user space may resize before load
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Configuration, set by user space before the program is loaded.
volatile const __u8 cfg_want4;          // 1: capture IPv4 replies to cfg_local4
volatile const __u8 cfg_want6;          // 1: capture IPv6 replies to cfg_local6
volatile const __u32 cfg_local4;        // sonde's IPv4 source address (network order)
volatile const __u8 cfg_local6[16];     // sonde's IPv6 source address
volatile const __u16 cfg_port_lo;       // first source port of sonde's range (host order)
volatile const __u16 cfg_port_hi;       // last source port of sonde's range (host order)
volatile const __u64 cfg_wakeup_bytes;  // wake the reader when the ring holds more than this
volatile const __u8 cfg_answer;         // 1: answer SYN-ACKs with an RST here, not in the stack

// Replies lost to a full ring, for user space to tell which probes may have
// lost their answer on this host: it reads both from the memory-mapped
// global data without a system call, and when lost_total has grown since
// its last look, the losses lie between that look and lost_ktime.
volatile __u64 lost_total; // replies lost to a full ring, all CPUs
volatile __u64 lost_ktime; // ingress time (bpf_ktime_get_ns) of the latest

// The ICMP header. <linux/icmp.h> pulls in libc headers that do not build for
// the BPF target, so the eight bytes are spelled out here.
struct icmp4hdr {
	__u8 type;
	__u8 code;
	__be16 checksum;
	__be32 rest;
};

#define ICMP_DEST_UNREACH 3

#define TCP_FL_FIN 0x01
#define TCP_FL_SYN 0x02
#define TCP_FL_RST 0x04
#define TCP_FL_ACK 0x10

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1; // per-CPU: no atomic needed
}

static __always_inline int in_range(__u16 port)
{
	return port >= cfg_port_lo && port <= cfg_port_hi;
}

static __always_inline void map4(__u8 dst[16], __u32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

static __always_inline int is_local6(const struct in6_addr *a)
{
	const __u8 *b = (const __u8 *)a;
#pragma unroll
	for (int i = 0; i < 16; i++)
		if (b[i] != cfg_local6[i])
			return 0;
	return 1;
}

// emit pushes ev to the ring without waking the reader, which drains the
// ring on its own period, except for the record that takes the backlog past
// cfg_wakeup_bytes: that one wakes the reader at once. Waking only on the
// crossing, not with every record above it, spares an interrupt per record
// while the reader is already busy draining.
static __always_inline void emit(struct event *ev)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);

	count(CNT_MATCHED);
	if (avail <= cfg_wakeup_bytes && avail + sizeof(*ev) > cfg_wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&events, ev, sizeof(*ev), flags)) {
		count(CNT_RINGFULL);
		lost_ktime = ev->ktime;
		__sync_fetch_and_add(&lost_total, 1);
	}
}

// tcp_kind classifies the flags of a reply: 0 when it is neither an RST nor a
// SYN-ACK.
static __always_inline __u8 tcp_kind(__u8 flags)
{
	if (flags & TCP_FL_RST)
		return KIND_RST;
	if ((flags & (TCP_FL_SYN | TCP_FL_ACK)) == (TCP_FL_SYN | TCP_FL_ACK))
		return KIND_SYNACK;
	return 0;
}

// quoted_tcp is the start of a probe's TCP header quoted by an ICMP error:
// the first 8 bytes, all that RFC 792 promises.
struct quoted_tcp {
	__be16 source;
	__be16 dest;
	__be32 seq;
};

// fill_reply fills ev's TCP fields, time and family from a reply's TCP header.
// The addresses are the caller's, in their family's form.
static __always_inline void fill_reply(struct event *ev, const struct tcphdr *tcp, __u8 flags, __u8 family)
{
	ev->ktime = bpf_ktime_get_ns();
	ev->seq = bpf_ntohl(tcp->seq);
	ev->ack = bpf_ntohl(tcp->ack_seq);
	ev->remote_port = bpf_ntohs(tcp->source);
	ev->local_port = bpf_ntohs(tcp->dest);
	ev->tcp_flags = flags;
	ev->family = family;
}

// fill_quoted fills ev from the probe quoted by an ICMP destination-unreachable.
static __always_inline void fill_quoted(struct event *ev, const struct quoted_tcp *q, __u8 code, __u8 family)
{
	ev->ktime = bpf_ktime_get_ns();
	ev->seq = bpf_ntohl(q->seq);
	ev->remote_port = bpf_ntohs(q->dest);
	ev->local_port = bpf_ntohs(q->source);
	ev->kind = KIND_UNREACH;
	ev->tcp_flags = TCP_FL_SYN;
	ev->family = family;
	ev->icmp_code = code;
}

// csum_fold folds a 32-bit one's-complement sum into a checksum.
static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// pseudo4 and pseudo6 are the pseudo headers of the TCP checksum.
struct pseudo4 {
	__be32 saddr, daddr;
	__u8 zero, proto;
	__be16 len;
};

struct pseudo6 {
	struct in6_addr saddr, daddr;
	__be32 len;
	__u8 zero[3], next;
};

// tcp_csum returns the checksum of tcp (no options) after the pseudo
// header ph of phlen bytes. The sums are the kernel's (bpf_csum_diff), so
// that no pointer arithmetic of ours needs privileges beyond CAP_BPF.
static __always_inline __u16 tcp_csum(void *ph, __u32 phlen, struct tcphdr *tcp)
{
	__s64 sum = bpf_csum_diff(NULL, 0, ph, phlen, 0);
	if (sum < 0)
		return 0;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)tcp, sizeof(*tcp), (__u32)sum);
	if (sum < 0)
		return 0;
	return csum_fold((__u32)sum);
}

// rst_tcp fills the RST that answers a SYN-ACK: from its destination port
// to its source port, seq = its ack, no ACK, no options. The checksum is
// the caller's.
static __always_inline void rst_tcp(struct tcphdr *rst, const struct tcphdr *synack)
{
	__builtin_memset(rst, 0, sizeof(*rst));
	rst->source = synack->dest;
	rst->dest = synack->source;
	rst->seq = synack->ack_seq;
	rst->doff = 5;
	rst->rst = 1;
}

// reply_eth fills out with the Ethernet header of a reply to the frame in
// skb: its addresses swapped. It returns non-zero when the frame has no
// Ethernet header of protocol proto.
static __always_inline int reply_eth(struct __sk_buff *skb, struct ethhdr *out, __be16 proto)
{
	struct ethhdr eth;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) || eth.h_proto != proto)
		return -1;
	__builtin_memcpy(out->h_dest, eth.h_source, ETH_ALEN);
	__builtin_memcpy(out->h_source, eth.h_dest, ETH_ALEN);
	out->h_proto = proto;
	return 0;
}

// send_rst makes skb the RST of headers eth, ip (iplen bytes) and tcp — the
// packet cut to their length, and they written over it — and sends it out
// of the device it came in on. When a helper fails the packet may be
// changed already: it is dropped, and the target's retransmission of its
// SYN-ACK is answered.
static __always_inline int send_rst(struct __sk_buff *skb, const struct ethhdr *eth, const void *ip, __u32 iplen,
				    const struct tcphdr *tcp)
{
	__u32 len = sizeof(*eth) + iplen + sizeof(*tcp);

	if (bpf_skb_change_tail(skb, len, 0) || bpf_skb_store_bytes(skb, 0, eth, sizeof(*eth), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(*eth), ip, iplen, 0) ||
	    bpf_skb_store_bytes(skb, sizeof(*eth) + iplen, tcp, sizeof(*tcp), 0))
		return TC_ACT_SHOT;
	count(CNT_ANSWERED);
	return bpf_redirect(skb->ifindex, 0);
}

// answer4 turns the IPv4 SYN-ACK in skb, whose IP header (without options)
// and TCP header are ip and tcp, into its RST and sends it back out of the
// device; it returns the verdict, TC_ACT_UNSPEC when the stack must answer.
static __always_inline int answer4(struct __sk_buff *skb, const struct iphdr *ip, const struct tcphdr *tcp)
{
	struct {
		struct ethhdr eth;
		struct iphdr ip;
		struct tcphdr tcp;
	} out; // stored field by field: the struct has padding after eth
	if (ip->ihl != 5 || reply_eth(skb, &out.eth, bpf_htons(ETH_P_IP)))
		return TC_ACT_UNSPEC;
	__builtin_memset(&out.ip, 0, sizeof(out.ip));
	out.ip.version = 4;
	out.ip.ihl = 5;
	out.ip.tot_len = bpf_htons(sizeof(out.ip) + sizeof(out.tcp));
	out.ip.frag_off = bpf_htons(0x4000); // DF, as the kernel's RST
	out.ip.ttl = 64;
	out.ip.protocol = IPPROTO_TCP;
	out.ip.saddr = ip->daddr;
	out.ip.daddr = ip->saddr;
	__s64 ipsum = bpf_csum_diff(NULL, 0, (__be32 *)&out.ip, sizeof(out.ip), 0);
	if (ipsum < 0)
		return TC_ACT_UNSPEC;
	out.ip.check = csum_fold((__u32)ipsum);
	rst_tcp(&out.tcp, tcp);
	struct pseudo4 ph = {.saddr = out.ip.saddr, .daddr = out.ip.daddr, .proto = IPPROTO_TCP, .len = bpf_htons(sizeof(out.tcp))};
	out.tcp.check = tcp_csum(&ph, sizeof(ph), &out.tcp);
	return send_rst(skb, &out.eth, &out.ip, sizeof(out.ip), &out.tcp);
}

// answer6 is answer4 for IPv6 (no extension headers: the caller checked).
static __always_inline int answer6(struct __sk_buff *skb, const struct ipv6hdr *ip, const struct tcphdr *tcp)
{
	struct {
		struct ethhdr eth;
		struct ipv6hdr ip;
		struct tcphdr tcp;
	} out; // stored field by field: the struct has padding after eth
	if (reply_eth(skb, &out.eth, bpf_htons(ETH_P_IPV6)))
		return TC_ACT_UNSPEC;
	__builtin_memset(&out.ip, 0, sizeof(out.ip));
	out.ip.version = 6;
	out.ip.payload_len = bpf_htons(sizeof(out.tcp));
	out.ip.nexthdr = IPPROTO_TCP;
	out.ip.hop_limit = 64;
	out.ip.saddr = ip->daddr;
	out.ip.daddr = ip->saddr;
	rst_tcp(&out.tcp, tcp);
	struct pseudo6 ph = {.saddr = out.ip.saddr, .daddr = out.ip.daddr, .len = bpf_htonl(sizeof(out.tcp)), .next = IPPROTO_TCP};
	out.tcp.check = tcp_csum(&ph, sizeof(ph), &out.tcp);
	return send_rst(skb, &out.eth, &out.ip, sizeof(out.ip), &out.tcp);
}

static __always_inline int handle4(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct event ev = {};

	if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (ip.version != 4 || ip.ihl < 5 || (ip.frag_off & bpf_htons(0x1fff)))
		return TC_ACT_UNSPEC;
	__u32 off = ip.ihl * 4;

	if (ip.protocol == IPPROTO_TCP) {
		struct tcphdr tcp;
		if (ip.daddr != cfg_local4)
			return TC_ACT_UNSPEC;
		if (bpf_skb_load_bytes_relative(skb, off, &tcp, sizeof(tcp), BPF_HDR_START_NET))
			return TC_ACT_UNSPEC;
		__u8 flags = ((__u8 *)&tcp)[13];
		ev.kind = tcp_kind(flags);
		if (!ev.kind || !in_range(bpf_ntohs(tcp.dest)))
			return TC_ACT_UNSPEC;
		map4(ev.remote, ip.saddr);
		map4(ev.local, ip.daddr);
		fill_reply(&ev, &tcp, flags, 4);
		emit(&ev);
		if (cfg_answer && ev.kind == KIND_SYNACK)
			return answer4(skb, &ip, &tcp);
		return TC_ACT_UNSPEC;
	}
	if (ip.protocol != IPPROTO_ICMP)
		return TC_ACT_UNSPEC;

	struct icmp4hdr icmp;
	struct iphdr inner;
	struct quoted_tcp q;

	if (bpf_skb_load_bytes_relative(skb, off, &icmp, sizeof(icmp), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (icmp.type != ICMP_DEST_UNREACH)
		return TC_ACT_UNSPEC;
	off += sizeof(icmp);
	if (bpf_skb_load_bytes_relative(skb, off, &inner, sizeof(inner), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (inner.version != 4 || inner.ihl < 5 || inner.protocol != IPPROTO_TCP || inner.saddr != cfg_local4)
		return TC_ACT_UNSPEC;
	off += inner.ihl * 4;
	if (bpf_skb_load_bytes_relative(skb, off, &q, sizeof(q), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (!in_range(bpf_ntohs(q.source)))
		return TC_ACT_UNSPEC;
	map4(ev.remote, inner.daddr);
	map4(ev.local, inner.saddr);
	fill_quoted(&ev, &q, icmp.code, 4);
	emit(&ev);
	return TC_ACT_UNSPEC;
}

static __always_inline int handle6(struct __sk_buff *skb)
{
	struct ipv6hdr ip;
	struct event ev = {};
	__u32 off = sizeof(ip);

	if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (ip.version != 6)
		return TC_ACT_UNSPEC;

	if (ip.nexthdr == IPPROTO_TCP) {
		struct tcphdr tcp;
		if (!is_local6(&ip.daddr))
			return TC_ACT_UNSPEC;
		if (bpf_skb_load_bytes_relative(skb, off, &tcp, sizeof(tcp), BPF_HDR_START_NET))
			return TC_ACT_UNSPEC;
		__u8 flags = ((__u8 *)&tcp)[13];
		ev.kind = tcp_kind(flags);
		if (!ev.kind || !in_range(bpf_ntohs(tcp.dest)))
			return TC_ACT_UNSPEC;
		__builtin_memcpy(ev.remote, &ip.saddr, 16);
		__builtin_memcpy(ev.local, &ip.daddr, 16);
		fill_reply(&ev, &tcp, flags, 6);
		emit(&ev);
		if (cfg_answer && ev.kind == KIND_SYNACK)
			return answer6(skb, &ip, &tcp);
		return TC_ACT_UNSPEC;
	}
	if (ip.nexthdr != IPPROTO_ICMPV6)
		return TC_ACT_UNSPEC;

	struct icmp6hdr icmp;
	struct ipv6hdr inner;
	struct quoted_tcp q;

	if (bpf_skb_load_bytes_relative(skb, off, &icmp, sizeof(icmp), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (icmp.icmp6_type != ICMPV6_DEST_UNREACH)
		return TC_ACT_UNSPEC;
	off += sizeof(icmp);
	if (bpf_skb_load_bytes_relative(skb, off, &inner, sizeof(inner), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (inner.version != 6 || inner.nexthdr != IPPROTO_TCP || !is_local6(&inner.saddr))
		return TC_ACT_UNSPEC;
	off += sizeof(inner);
	if (bpf_skb_load_bytes_relative(skb, off, &q, sizeof(q), BPF_HDR_START_NET))
		return TC_ACT_UNSPEC;
	if (!in_range(bpf_ntohs(q.source)))
		return TC_ACT_UNSPEC;
	__builtin_memcpy(ev.remote, &inner.daddr, 16);
	__builtin_memcpy(ev.local, &inner.saddr, 16);
	fill_quoted(&ev, &q, icmp.icmp6_code, 6);
	emit(&ev);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int capture_replies(struct __sk_buff *skb)
{
	count(CNT_SEEN);
	if (skb->protocol == bpf_htons(ETH_P_IP) && cfg_want4)
		return handle4(skb);
	if (skb->protocol == bpf_htons(ETH_P_IPV6) && cfg_want6)
		return handle6(skb);
	return TC_ACT_UNSPEC; // TCX_NEXT for TCX; continue for cls_bpf
}
