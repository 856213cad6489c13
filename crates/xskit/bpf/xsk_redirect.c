// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The default xskit program: a packet that arrives on queue q goes to the
 * AF_XDP socket registered at index q of xsks_map; a queue with no socket
 * falls back to XDP_PASS (the flags argument of bpf_redirect_map), so the
 * kernel stack keeps working for everything xskit does not own.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define XSKIT_MAX_QUEUES 256

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSKIT_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

static __always_inline int redirect_to_queue_socket(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int xskit_redirect(struct xdp_md *ctx)
{
	return redirect_to_queue_socket(ctx);
}

char _license[] SEC("license") = "Dual BSD/GPL";
