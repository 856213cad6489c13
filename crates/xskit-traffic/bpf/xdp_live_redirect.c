// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The fast generator: run by BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES,
 * it sends each copy of the test frame out of one interface, so the kernel
 * transmits in a tight loop without a socket or an skb per packet.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Set by the loader before the program is verified. */
volatile const __u32 target_ifindex = 0;

SEC("xdp")
int xskit_live_redirect(struct xdp_md *ctx)
{
	return bpf_redirect(target_ifindex, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
