// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * `xskit dump` on an interface with no XDP program: copy each packet out
 * (xskit_capture.h) and pass it on to the kernel.
 */
#include "xskit_capture.h"

#ifdef XSKIT_FRAGS
SEC("xdp.frags")
int xskit_dump_frags(struct xdp_md *ctx)
#else
SEC("xdp")
int xskit_dump(struct xdp_md *ctx)
#endif
{
	xskit_capture_hook(ctx, XSKIT_CAPTURE_NONE, XSKIT_CAPTURE_NONE);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
