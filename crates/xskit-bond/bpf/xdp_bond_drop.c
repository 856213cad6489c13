// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * XDP_DROP on a bond, for the XDP bonding patch's table: what a drop program pays for being
 * a bond's (the active-backup check that refuses what arrives on an inactive
 * member, as Linux's bond does). Counts what it drops as its own verdict; what
 * an inactive member refuses is counted in xskit_bond_drops.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xskit_bond.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped_here SEC(".maps");

SEC("xdp")
int xskit_bond_drop_all(struct xdp_md *ctx)
{
	__u32 key = 0;
	__u64 *count;

	if (xskit_bond_is_slow(ctx))
		return XDP_PASS;
	if (!xskit_bond_rx_ok(ctx))
		return XDP_DROP;
	count = bpf_map_lookup_elem(&dropped_here, &key);
	if (count)
		(*count)++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";
