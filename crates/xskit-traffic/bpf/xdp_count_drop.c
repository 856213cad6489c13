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
 */
#include <linux/bpf.h>
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

#if defined(XSKIT_FRAGS)
SEC("xdp.frags")
int xskit_count_drop_frags(struct xdp_md *ctx)
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
#else
	if (count)
		(*count)++;
	return XDP_DROP;
#endif
}

char _license[] SEC("license") = "Dual BSD/GPL";
