// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An XDP program of a user's own, for examples/own_program.rs: IPv4 UDP to
 * port 9 goes to the AF_XDP socket of its queue (xskit registers its sockets
 * in the XSKMAP named xsks_map); everything else goes on to the kernel and is
 * counted in `passed`, so ping, ARP and TCP keep working.
 *
 *   clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu \
 *         -c udp_to_socket.c -o udp_to_socket.o
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define PROBE_PORT 9

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} passed SEC(".maps");

static int pass(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&passed, &zero);

	if (n)
		(*n)++;
	return XDP_PASS;
}

SEC("xdp")
int udp_to_socket(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return pass();
	if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return pass();
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(PROBE_PORT))
		return pass();
	/* No socket on this queue: the kernel gets it (and it is not counted). */
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
