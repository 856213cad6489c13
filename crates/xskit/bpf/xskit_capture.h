/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The capture hook of xskit's XDP programs, for `xskit dump`: while a reader
 * has switched it on (xskit_cap_cfg.enabled), every packet is copied,
 * up to the snap length, into the perf buffer of the CPU it arrived on,
 * after a small header; the packet itself goes on unchanged. Switched off,
 * it costs one load and no call.
 *
 * A reader that dies without switching it off leaves nobody listening: the
 * copy then fails with -ENOENT and the hook switches itself off.
 */
#ifndef XSKIT_CAPTURE_H
#define XSKIT_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define XSKIT_CAPTURE_ENOENT 2
/* A verdict or a reason the program does not give. */
#define XSKIT_CAPTURE_NONE 0xffffffff

struct xskit_capture_config {
	__u32 enabled;
	__u32 snaplen;
	/* Captures a second on each CPU at most (0: no cap); the others are counted. */
	__u32 max_per_cpu;
	__u32 pad;
};

/* Per CPU: the current second's captures, and those the cap skipped. */
struct xskit_capture_rate {
	__u64 window_ns;
	__u64 taken;
	__u64 skipped;
};

/* Before each packet's bytes in the perf buffer. */
struct xskit_capture_meta {
	__u64 ktime_ns;
	__u32 len;
	__u32 caplen;
	__u32 ifindex;
	__u32 queue;
	/* The XDP action the program returned, and its reason (the forwarder's rule or
	 * counter index), or XSKIT_CAPTURE_NONE. */
	__u32 verdict;
	__u32 why;
};

/*
 * The switch, a global in a data section of its own: the loader makes it a one-entry array
 * named after the section, which user space writes as any map, and the program reads it
 * at a fixed address, with no lookup.
 */
struct xskit_capture_config xskit_cap_cfg SEC(".data.xskit_cap");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xskit_capture_rate);
} xskit_cap_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(max_entries, 512);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} xskit_capture SEC(".maps");

/*
 * A global function, so the verifier checks it once, on its own: inlined, its
 * outcomes would multiply the states of a large program (the forwarder's
 * filter would pass the verifier's limit).
 */
__attribute__((noinline)) int xskit_capture_packet(struct xdp_md *ctx, __u32 verdict, __u32 why)
{
	struct xskit_capture_config *cfg = &xskit_cap_cfg;
	struct xskit_capture_rate *rate;
	__u32 zero = 0;
	struct xskit_capture_meta meta;
	__u64 caplen;
	long err;

	meta.ktime_ns = bpf_ktime_get_ns();
	if (cfg->max_per_cpu) {
		rate = bpf_map_lookup_elem(&xskit_cap_rate, &zero);
		if (!rate)
			return 0;
		if (meta.ktime_ns - rate->window_ns >= 1000000000ULL) {
			rate->window_ns = meta.ktime_ns;
			rate->taken = 0;
		}
		if (rate->taken >= cfg->max_per_cpu) {
			rate->skipped++;
			return 0;
		}
		rate->taken++;
	}
	meta.len = bpf_xdp_get_buff_len(ctx);
	caplen = meta.len < cfg->snaplen ? meta.len : cfg->snaplen;
	caplen &= 0xffff;
	meta.caplen = caplen;
	meta.ifindex = ctx->ingress_ifindex;
	meta.queue = ctx->rx_queue_index;
	meta.verdict = verdict;
	meta.why = why;
	err = bpf_perf_event_output(ctx, &xskit_capture, BPF_F_CURRENT_CPU | (caplen << 32),
				    &meta, sizeof(meta));
	if (err == -XSKIT_CAPTURE_ENOENT)
		cfg->enabled = 0;
	return 0;
}

/*
 * What the programs call: the switch is one load inline, so a program pays for
 * the call only while a capture runs.
 */
static __always_inline void xskit_capture_hook(struct xdp_md *ctx, __u32 verdict, __u32 why)
{
	if (*(volatile __u32 *)&xskit_cap_cfg.enabled)
		xskit_capture_packet(ctx, verdict, why);
}

#endif
