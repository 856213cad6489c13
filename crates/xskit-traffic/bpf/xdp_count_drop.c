// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The kernel ceilings for benchmarks: count every packet in a per-CPU counter
 * and drop it, the least work any XDP user can do per packet. Built plain, with
 * XSKIT_FRAGS as "xdp.frags" for links whose MTU is above a page (native XDP
 * refuses a single-buffer program there), and with XSKIT_TX as the l2fwd
 * ceiling: swap the MAC addresses and send the packet back (XDP_TX), which on
 * a bond leaves through the bond's transmit hash. With XSKIT_REDIRECT, the
 * forwarding ceiling: redirect every packet to the one device in a devmap
 * (the kernel's own forwarding path, as its xdp_redirect_map sample does).
 * With XSKIT_SRC_PORT, the floor of a filter by source port: read each packet's
 * UDP source port and drop it when it is drop_src_port, pass anything else (the
 * least any filter that reads the packet does; the plain ceiling reads nothing).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drop_count SEC(".maps");

#ifdef XSKIT_REDIRECT
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} out_port SEC(".maps");
#endif

#ifdef XSKIT_SRC_PORT
/* Written before the program is verified: the port in host byte order. */
const volatile __u32 drop_src_port = 53;

/* 1 for untagged IPv4 UDP from drop_src_port: not a later fragment, headers whole. */
static __always_inline int from_src_port(void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP || ip->ihl < 5 || (ip->frag_off & bpf_htons(0x1fff)))
		return 0;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > end)
		return 0;
	return udp->source == bpf_htons((__u16)drop_src_port);
}
#endif

#if defined(XSKIT_FRAGS)
SEC("xdp.frags")
int xskit_count_drop_frags(struct xdp_md *ctx)
#elif defined(XSKIT_SRC_PORT)
SEC("xdp")
int xskit_count_src_port(struct xdp_md *ctx)
#elif defined(XSKIT_TX)
SEC("xdp")
int xskit_count_tx(struct xdp_md *ctx)
#elif defined(XSKIT_REDIRECT)
SEC("xdp")
int xskit_count_redirect(struct xdp_md *ctx)
#else
SEC("xdp")
int xskit_count_drop(struct xdp_md *ctx)
#endif
{
	__u32 key = 0;
	__u64 *count = bpf_map_lookup_elem(&drop_count, &key);

#ifdef XSKIT_TX
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *data_end = (void *)(long)ctx->data_end;
	unsigned char mac[6];

	if (data + 12 > data_end)
		return XDP_DROP;
	__builtin_memcpy(mac, data, 6);
	__builtin_memcpy(data, data + 6, 6);
	__builtin_memcpy(data + 6, mac, 6);
	if (count)
		(*count)++;
	return XDP_TX;
#elif defined(XSKIT_REDIRECT)
	if (count)
		(*count)++;
	return bpf_redirect_map(&out_port, 0, XDP_DROP);
#elif defined(XSKIT_SRC_PORT)
	if (!from_src_port((void *)(long)ctx->data, (void *)(long)ctx->data_end))
		return XDP_PASS;
	if (count)
		(*count)++;
	return XDP_DROP;
#else
	if (count)
		(*count)++;
	return XDP_DROP;
#endif
}

char _license[] SEC("license") = "Dual BSD/GPL";
