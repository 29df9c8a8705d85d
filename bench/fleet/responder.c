//go:build ignore

// responder.c answers a bench fleet's TCP SYN probes in XDP, so that the
// fleet's own TCP stack does no work per probe and the prober's cost shows.
//
// It runs on the fleet side of the bench veth and turns each IPv4 TCP SYN to
// an address of the fleet prefix into its answer in place, sent back with
// XDP_TX, following the same ground truth as the kernel fleet's firewall
// chain, in the same order:
//   - address in dyn_drop or drop: XDP_DROP (the probe times out);
//   - address in reject: RST-ACK (refused), as `reject with tcp reset`;
//   - address in unreach: ICMP host unreachable quoting the probe;
//   - port in open_ports: SYN-ACK; any other port: RST-ACK, as a host with
//     no listener answers.
// Every other TCP packet to the prefix is dropped: those are the prober
// host's RSTs answering the SYN-ACKs (and the ACKs of connect() probes,
// which this fleet cannot serve). Packets of other protocols, other
// addresses, IPv6, IP options and fragments go to the kernel (XDP_PASS).
//
// pass_all is the XDP program native XDP on a veth needs on the peer
// (the prober's end) for XDP_TX to reach it; it passes every packet.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// key4 is the key of the LPM tries: a prefix length and an IPv4 address in
// network order.
struct key4 {
	__u32 prefixlen;
	__u32 addr;
};

// Address sets of the ground truth; the value is unused (1).
#define ADDR_SET(name)                                    \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);      \
		__uint(max_entries, 1 << 16);             \
		__uint(map_flags, BPF_F_NO_PREALLOC);     \
		__type(key, struct key4);                 \
		__type(value, __u8);                      \
	} name SEC(".maps")

ADDR_SET(dyn_drop); // dropped while the fleet runs (Fleet.SetDrop)
ADDR_SET(drop);     // dropped: timeout
ADDR_SET(reject);   // RST: refused
ADDR_SET(unreach);  // ICMP host unreachable

// open_ports is a bitmap of the listening ports: bit p%64 of word p/64.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} open_ports SEC(".maps");

// Indexes of the per-CPU counters.
enum counter {
	CNT_SYNACK = 0,  // SYN-ACKs sent
	CNT_RST = 1,     // RSTs sent
	CNT_UNREACH = 2, // ICMP host unreachable sent
	CNT_DROPPED = 3, // SYNs dropped by the ground truth
	CNT_HOST = 4,    // other TCP packets to the prefix dropped (the prober's RSTs)
	CNT_PASSED = 5,  // packets left to the kernel
	CNT_MAX = 6
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Configuration, set by user space before the program is loaded.
volatile const __u32 cfg_prefix; // the fleet prefix's address (network order)
volatile const __u32 cfg_mask;   // its netmask (network order)

// The ICMP header (<linux/icmp.h> does not build for the BPF target).
struct icmp4hdr {
	__u8 type;
	__u8 code;
	__be16 checksum;
	__be32 unused;
};

#define ICMP_DEST_UNREACH 3
#define ICMP_HOST_UNREACH 1

#define TCP_FL_FIN 0x01
#define TCP_FL_SYN 0x02
#define TCP_FL_RST 0x04
#define TCP_FL_ACK 0x10

// Sizes of the answers: Ethernet + IPv4 + TCP without options, and Ethernet +
// IPv4 + ICMP + the quoted IPv4 header + the first 8 bytes of the probe's TCP
// header (RFC 792).
#define TCP_ANSWER_LEN (14 + 20 + 20)
#define ICMP_QUOTE_LEN (20 + 8)
#define ICMP_ANSWER_LEN (14 + 20 + 8 + ICMP_QUOTE_LEN)

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1; // per-CPU: no atomic needed
}

static __always_inline int in_set(void *set, __u32 addr)
{
	struct key4 k = {.prefixlen = 32, .addr = addr};
	return bpf_map_lookup_elem(set, &k) != 0;
}

static __always_inline int port_open(__u16 port)
{
	__u32 word = port >> 6;
	__u64 *bits = bpf_map_lookup_elem(&open_ports, &word);
	return bits && (*bits >> (port & 63)) & 1;
}

// fold folds a 32-bit ones'-complement sum into a checksum field's value.
static __always_inline __u16 fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// sum16 adds n bytes (n even, a constant) at p as 16-bit words to sum.
static __always_inline __u64 sum16(const void *p, int n, __u64 sum)
{
	const __u16 *w = p;
#pragma unroll
	for (int i = 0; i < n / 2; i++)
		sum += w[i];
	return sum;
}

// ip_header writes an IPv4 header from src to dst of tot_len bytes carrying
// proto, with its checksum.
static __always_inline void ip_header(struct iphdr *ip, __u32 src, __u32 dst, __u16 tot_len, __u8 proto, __u8 tos)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tos;
	ip->tot_len = bpf_htons(tot_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000); // DF
	ip->ttl = 64;
	ip->protocol = proto;
	ip->check = 0;
	ip->saddr = src;
	ip->daddr = dst;
	ip->check = fold(sum16(ip, sizeof(*ip), 0));
}

// swap_eth turns the frame around: it goes back where it came from.
static __always_inline void swap_eth(struct ethhdr *eth, const __u8 src[ETH_ALEN], const __u8 dst[ETH_ALEN])
{
	__builtin_memcpy(eth->h_dest, src, ETH_ALEN);
	__builtin_memcpy(eth->h_source, dst, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
}

// probe holds what an answer needs of the SYN it answers.
struct probe {
	__u8 mac_src[ETH_ALEN], mac_dst[ETH_ALEN];
	__u32 saddr, daddr; // network order
	__u16 sport, dport; // network order
	__u32 seq;          // host order
};

// answer_tcp rewrites the frame into a 54-byte TCP answer to p with flags:
// SYN-ACK or RST-ACK, acknowledging the SYN, without options.
static __always_inline int answer_tcp(struct xdp_md *ctx, const struct probe *p, __u8 flags)
{
	int delta = TCP_ANSWER_LEN - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return XDP_DROP;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + TCP_ANSWER_LEN > end)
		return XDP_DROP;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tcphdr *tcp = (void *)ip + sizeof(*ip);

	swap_eth(eth, p->mac_src, p->mac_dst);
	ip_header(ip, p->daddr, p->saddr, 40, IPPROTO_TCP, 0);
	__builtin_memset(tcp, 0, sizeof(*tcp));
	tcp->source = p->dport;
	tcp->dest = p->sport;
	// A SYN-ACK's own sequence number is arbitrary: derived from the probe's.
	tcp->seq = flags & TCP_FL_SYN ? bpf_htonl(p->seq * 2654435761u + 1) : 0;
	tcp->ack_seq = bpf_htonl(p->seq + 1);
	((__u8 *)tcp)[12] = 5 << 4; // data offset: 20 bytes
	((__u8 *)tcp)[13] = flags;
	tcp->window = flags & TCP_FL_SYN ? bpf_htons(65535) : 0;
	// The pseudo-header: addresses, protocol and TCP length.
	__u64 sum = (__u64)(ip->saddr & 0xffff) + (ip->saddr >> 16) + (ip->daddr & 0xffff) + (ip->daddr >> 16) +
		    bpf_htons(IPPROTO_TCP) + bpf_htons(20);
	tcp->check = fold(sum16(tcp, sizeof(*tcp), sum));
	return XDP_TX;
}

// answer_unreach rewrites the frame into an ICMP host unreachable from the
// probed address, quoting the probe's IPv4 header and first 8 TCP bytes, which
// stay where they are: the new headers go in front of them.
static __always_inline int answer_unreach(struct xdp_md *ctx, const struct probe *p)
{
	int delta = 14 + ICMP_QUOTE_LEN - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, -(int)(sizeof(struct iphdr) + sizeof(struct icmp4hdr))))
		return XDP_DROP;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + ICMP_ANSWER_LEN > end)
		return XDP_DROP;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct icmp4hdr *icmp = (void *)ip + sizeof(*ip);

	swap_eth(eth, p->mac_src, p->mac_dst);
	ip_header(ip, p->daddr, p->saddr, 20 + 8 + ICMP_QUOTE_LEN, IPPROTO_ICMP, 0xc0);
	icmp->type = ICMP_DEST_UNREACH;
	icmp->code = ICMP_HOST_UNREACH;
	icmp->checksum = 0;
	icmp->unused = 0;
	icmp->checksum = fold(sum16(icmp, sizeof(*icmp) + ICMP_QUOTE_LEN, 0));
	return XDP_TX;
}

SEC("xdp")
int answer_syns(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tcphdr *tcp = (void *)ip + sizeof(*ip);

	if ((void *)(tcp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(0x3fff)) || (ip->daddr & cfg_mask) != cfg_prefix) {
		count(CNT_PASSED);
		return XDP_PASS;
	}
	__u8 flags = ((__u8 *)tcp)[13];
	if ((flags & (TCP_FL_SYN | TCP_FL_ACK | TCP_FL_RST | TCP_FL_FIN)) != TCP_FL_SYN) {
		count(CNT_HOST);
		return XDP_DROP;
	}
	if (in_set(&dyn_drop, ip->daddr) || in_set(&drop, ip->daddr)) {
		count(CNT_DROPPED);
		return XDP_DROP;
	}
	struct probe p = {
		.saddr = ip->saddr,
		.daddr = ip->daddr,
		.sport = tcp->source,
		.dport = tcp->dest,
		.seq = bpf_ntohl(tcp->seq),
	};
	__builtin_memcpy(p.mac_src, eth->h_source, ETH_ALEN);
	__builtin_memcpy(p.mac_dst, eth->h_dest, ETH_ALEN);
	if (in_set(&reject, p.daddr)) {
		count(CNT_RST);
		return answer_tcp(ctx, &p, TCP_FL_RST | TCP_FL_ACK);
	}
	if (in_set(&unreach, p.daddr)) {
		count(CNT_UNREACH);
		return answer_unreach(ctx, &p);
	}
	if (port_open(bpf_ntohs(p.dport))) {
		count(CNT_SYNACK);
		return answer_tcp(ctx, &p, TCP_FL_SYN | TCP_FL_ACK);
	}
	count(CNT_RST);
	return answer_tcp(ctx, &p, TCP_FL_RST | TCP_FL_ACK);
}

SEC("xdp")
int pass_all(struct xdp_md *ctx)
{
	return XDP_PASS;
}
