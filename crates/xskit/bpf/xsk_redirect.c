// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The default xskit program: a packet that arrives on queue q goes to the
 * AF_XDP socket registered at index q of xsks_map; a queue with no socket
 * falls back to XDP_PASS (the flags argument of bpf_redirect_map), so the
 * kernel stack keeps working for everything xskit does not own.
 *
 * A bond's inactive member (active-backup) refuses everything in the kernel, as
 * Linux's bond drops what arrives on a backup: xskit_refuse[0] set, each such
 * packet dropped and counted in xskit_refused.
 *
 * Built twice: plain, and with XSKIT_FRAGS as the multi-buffer variant. A
 * program in section "xdp.frags" declares that it copes with packets spread
 * over several buffers, which the kernel requires before it hands such
 * packets to a socket bound with XDP_USE_SG (and before veth accepts an MTU
 * above a page with a native program).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xskit_capture.h"

#define XSKIT_MAX_QUEUES 256

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSKIT_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xskit_refuse SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xskit_refused SEC(".maps");

#ifdef XSKIT_FRAGS
SEC("xdp.frags")
int xskit_redirect_frags(struct xdp_md *ctx)
#else
SEC("xdp")
int xskit_redirect(struct xdp_md *ctx)
#endif
{
	__u32 zero = 0, *refuse;

	xskit_capture_hook(ctx, XSKIT_CAPTURE_NONE, XSKIT_CAPTURE_NONE);
	refuse = bpf_map_lookup_elem(&xskit_refuse, &zero);
	if (refuse && *refuse) {
		__u64 *n = bpf_map_lookup_elem(&xskit_refused, &zero);

		if (n)
			(*n)++;
		return XDP_DROP;
	}
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
