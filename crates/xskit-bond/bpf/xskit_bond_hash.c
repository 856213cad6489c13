// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Runs xskit_bond_hash() over the frame it is given (BPF_PROG_TEST_RUN) with the
 * policy in hash_policy[0] and leaves the hash in hash_out[0]: how the tests
 * hold the C hash to the Rust one. Never attached.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xskit_bond.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_out SEC(".maps");

SEC("xdp")
int xskit_bond_hash_run(struct xdp_md *ctx)
{
	__u32 key = 0, hash;
	__u32 *policy = bpf_map_lookup_elem(&hash_policy, &key);

	if (!policy)
		return XDP_ABORTED;
	hash = xskit_bond_hash((void *)(long)ctx->data, (void *)(long)ctx->data_end, *policy);
	bpf_map_update_elem(&hash_out, &key, &hash, BPF_ANY);
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
