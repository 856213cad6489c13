// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The fast generator: run by BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES,
 * it sends each copy of the test frame out of one interface, so the kernel
 * transmits in a tight loop without a socket or an skb per packet.
 *
 * With sources, each copy of an IPv4 frame leaves from the next address of
 * the `sources` array, round and round, with its IPv4 and UDP or TCP
 * checksums updated (RFC 1624): a flood from many sources, as real ones are,
 * instead of one cached address.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Set by the loader before the program is verified. */
volatile const __u32 target_ifindex = 0;
/* Addresses in `sources`; 0: every copy is the frame as given. */
volatile const __u32 source_count = 0;

/* Source addresses in network order, sized by the loader to source_count. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sources SEC(".maps");

/* The next source's index. A test run keeps to one CPU, and the loader runs
 * one generator at a time on a program, so a plain word does. */
__u32 next_source = 0;

static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* A checksum over a 32-bit field that changes from `from` to `to` (both as
 * they are in memory: one's complement sums do not depend on byte order). */
static __always_inline __u16 replaced(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~from + (__u16)~(from >> 16);
	sum += (to & 0xffff) + (to >> 16);
	return (__u16)~fold(sum);
}

/* The L4 checksum's offset in its header, or 0 for a protocol without one. */
static __always_inline __u32 l4_check_offset(__u8 protocol)
{
	if (protocol == IPPROTO_UDP)
		return offsetof(struct udphdr, check);
	if (protocol == IPPROTO_TCP)
		return offsetof(struct tcphdr, check);
	return 0;
}

static __always_inline void rewrite_source(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 at = sizeof(*eth);
	__u16 proto;

	if (data + sizeof(*eth) + 4 > end)
		return;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		proto = *(__u16 *)(data + sizeof(*eth) + 2);
		at += 4;
	}
	if (proto != bpf_htons(ETH_P_IP))
		return;
	struct iphdr *ip = data + at;
	if ((void *)(ip + 1) > end)
		return;
	__u32 i = next_source;
	if (i >= source_count)
		i = 0;
	next_source = i + 1;
	__u32 *to = bpf_map_lookup_elem(&sources, &i);
	if (!to)
		return;
	__u32 from = ip->saddr;
	ip->saddr = *to;
	ip->check = replaced(ip->check, from, *to);
	__u32 check_at = l4_check_offset(ip->protocol);
	if (!check_at || ip->frag_off & bpf_htons(0x1fff))
		return;
	__u16 *check = (void *)ip + (ip->ihl & 0xf) * 4 + check_at;
	if ((void *)(check + 1) > end)
		return;
	/* A UDP checksum of 0 says "none"; a computed 0 is sent as 0xffff. */
	if (ip->protocol == IPPROTO_UDP && !*check)
		return;
	__u16 sum = replaced(*check, from, *to);
	*check = (sum || ip->protocol != IPPROTO_UDP) ? sum : 0xffff;
}

SEC("xdp")
int xskit_live_redirect(struct xdp_md *ctx)
{
	if (source_count)
		rewrite_source(ctx);
	return bpf_redirect(target_ifindex, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
