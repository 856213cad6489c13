// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The kernel ceiling for receive benchmarks: count every packet in a per-CPU
 * counter and drop it, the least work any XDP user can do per packet. Built
 * twice: plain, and with XSKIT_FRAGS as "xdp.frags" for links whose MTU is
 * above a page (native XDP refuses a single-buffer program there).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drop_count SEC(".maps");

#ifdef XSKIT_FRAGS
SEC("xdp.frags")
int xskit_count_drop_frags(struct xdp_md *ctx)
#else
SEC("xdp")
int xskit_count_drop(struct xdp_md *ctx)
#endif
{
	__u32 key = 0;
	__u64 *count = bpf_map_lookup_elem(&drop_count, &key);

	if (count)
		(*count)++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";
