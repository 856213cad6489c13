// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The example of xskit_bond.h: an XDP reflector (l2fwd in the kernel) that sends
 * every packet back with its MAC addresses swapped, out of the bond's member its
 * hash picks, with one call where a plain program returns XDP_TX. The same
 * object runs on a single device (a one-member bond) and on every member of a
 * bond. Counts what it reflects; in active-backup, drops (and counts) what
 * arrives on a member that is not the active one.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xskit_bond.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} reflected SEC(".maps");

SEC("xdp")
int xskit_bond_reflect(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *data_end = (void *)(long)ctx->data_end;
	unsigned char mac[6];
	__u32 key = 0;
	__u64 *count;

	if (data + 14 > data_end)
		return XDP_PASS;
	if (xskit_bond_is_slow(ctx))
		return XDP_PASS;
	if (!xskit_bond_rx_ok(ctx))
		return XDP_DROP;
	__builtin_memcpy(mac, data, 6);
	__builtin_memcpy(data, data + 6, 6);
	__builtin_memcpy(data + 6, mac, 6);
	count = bpf_map_lookup_elem(&reflected, &key);
	if (count)
		(*count)++;
	return xskit_bond_xmit(ctx);
}

char _license[] SEC("license") = "Dual BSD/GPL";
