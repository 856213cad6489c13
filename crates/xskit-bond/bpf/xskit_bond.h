/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The Linux bond's transmit hashes for XDP programs (and DPDK's, as policies
 * 16 to 18): xskit_bond_hash() gives,
 * for the frame in [data, data_end), the hash a Linux bond with
 * xmit_hash_policy `policy` computes (bond_xmit_hash in
 * drivers/net/bonding/bond_main.c, as a little-endian CPU computes it); the
 * member is hash % members. The same function as xskit_wire::bond_hash in
 * Rust, which the kernel's own bond checks in xskit's guest testbed, and the
 * two are held to each other on random and edge-case frames.
 *
 * Include it in your XDP program after <bpf/bpf_helpers.h> (the encap policies walk
 * tunnels with bpf_loop, Linux 5.17 or later):
 * #include "xskit_bond.h". Every read is bounds-checked against data_end, so
 * the verifier takes it as it is.
 */
#ifndef XSKIT_BOND_H
#define XSKIT_BOND_H

#include <linux/bpf.h>

/* Linux's BOND_XMIT_POLICY_* numbers, then DPDK's bonding PMD's policies
 * (which Linux does not have) from 16. */
enum xskit_xmit_policy {
	XSKIT_XMIT_LAYER2 = 0,
	XSKIT_XMIT_LAYER34 = 1,
	XSKIT_XMIT_LAYER23 = 2,
	XSKIT_XMIT_ENCAP23 = 3,
	XSKIT_XMIT_ENCAP34 = 4,
	XSKIT_XMIT_VLAN_SRCMAC = 5,
	XSKIT_XMIT_DPDK_L2 = 16,
	XSKIT_XMIT_DPDK_L23 = 17,
	XSKIT_XMIT_DPDK_L34 = 18,
};

/* A 32-bit field as a little-endian CPU loads it (the kernel's raw __be32). */
static __always_inline __u32 xskit_le32(const unsigned char *p)
{
	return (__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16 | (__u32)p[3] << 24;
}

/* A 16-bit field as a little-endian CPU loads it. */
static __always_inline __u32 xskit_le16(const unsigned char *p)
{
	return (__u32)p[0] | (__u32)p[1] << 8;
}

/*
 * DPDK's bonding PMD hashes (burst_xmit_l2/l23/l34_hash in rte_eth_bond_pmd.c):
 * the MACs as 16-bit words, the IP addresses, and TCP/UDP ports. DPDK reads
 * without bounds; here a header cut short contributes nothing.
 */
static __always_inline __u32 xskit_dpdk_hash(const unsigned char *p, const unsigned char *end,
					     __u32 policy)
{
	const unsigned char *l3 = p + 14;
	__u32 eth, l3hash = 0, l4hash = 0, h;
	__u16 proto;

	if (p + 14 > end)
		return 0;
	eth = xskit_le16(p) ^ xskit_le16(p + 2) ^ xskit_le16(p + 4) ^
	      xskit_le16(p + 6) ^ xskit_le16(p + 8) ^ xskit_le16(p + 10);
	if (policy == XSKIT_XMIT_DPDK_L2)
		return eth ^ (eth >> 8);
	proto = (__u16)p[12] << 8 | p[13];
	/* One 802.1Q or 802.1ad tag, then one more 802.1Q tag. */
	if (proto == 0x8100 || proto == 0x88a8) {
		if (p + 18 > end)
			goto fold;
		proto = (__u16)p[16] << 8 | p[17];
		l3 = p + 18;
		if (proto == 0x8100) {
			if (p + 22 > end)
				goto fold;
			proto = (__u16)p[20] << 8 | p[21];
			l3 = p + 22;
		}
	}
	if (proto == 0x0800) {
		if (l3 + 20 > end)
			goto fold;
		l3hash = xskit_le32(l3 + 12) ^ xskit_le32(l3 + 16);
		if (policy == XSKIT_XMIT_DPDK_L34 && !((l3[6] & 0x3f) | l3[7])) {
			const unsigned char *l4 = l3 + (__u32)(l3[0] & 0x0f) * 4;

			/* DPDK reads the ports when the header ends before the frame does. */
			if (l3[9] == 6) {
				if (l4 + 21 <= end)
					l4hash = xskit_le16(l4) ^ xskit_le16(l4 + 2);
			} else if (l3[9] == 17) {
				if (l4 + 9 <= end)
					l4hash = xskit_le16(l4) ^ xskit_le16(l4 + 2);
			}
		}
	} else if (proto == 0x86dd) {
		if (l3 + 40 > end)
			goto fold;
		l3hash = xskit_le32(l3 + 8) ^ xskit_le32(l3 + 12) ^ xskit_le32(l3 + 16) ^
			 xskit_le32(l3 + 20) ^ xskit_le32(l3 + 24) ^ xskit_le32(l3 + 28) ^
			 xskit_le32(l3 + 32) ^ xskit_le32(l3 + 36);
		if (policy == XSKIT_XMIT_DPDK_L34 && (l3[6] == 6 || l3[6] == 17) &&
		    l3 + 44 <= end)
			l4hash = xskit_le16(l3 + 40) ^ xskit_le16(l3 + 42);
	}
fold:
	h = policy == XSKIT_XMIT_DPDK_L23 ? eth ^ l3hash : l3hash ^ l4hash;
	h ^= h >> 16;
	h ^= h >> 8;
	return h;
}

/* ICMP types whose identifier the flow dissector takes (icmp_has_id): echo and
 * timestamp, request and reply, of ICMP and ICMPv6 alike. */
static __always_inline int xskit_icmp_has_id(__u8 type)
{
	return type == 0 || type == 8 || type == 13 || type == 14 || type == 128 || type == 129;
}

/* The ICMP header's type/code/id word (skb_flow_get_icmp_tci) for the types
 * with an identifier; 0 for the others and for a header cut short. */
static __always_inline __u32 xskit_icmp_word(const unsigned char *l4, const unsigned char *end)
{
	__u32 id;

	if (l4 + 8 > end || !xskit_icmp_has_id(l4[0]))
		return 0;
	id = (__u32)l4[4] << 8 | l4[5];
	if (id == 0)
		id = 1;
	return (__u32)l4[0] | (__u32)l4[1] << 8 | id << 16;
}

/* The ports word __skb_flow_get_ports reads (proto_ports_offset); ICMP has none. */
static __always_inline __u32 xskit_ports(__u8 protocol, const unsigned char *l4,
					 const unsigned char *end)
{
	switch (protocol) {
	case 6:   /* TCP */
	case 17:  /* UDP */
	case 33:  /* DCCP */
	case 50:  /* ESP */
	case 132: /* SCTP */
	case 136: /* UDP-Lite */
		if (l4 + 4 > end)
			return 0;
		return xskit_le32(l4);
	case 51:  /* AH: the SPI */
		if (l4 + 8 > end)
			return 0;
		return xskit_le32(l4 + 4);
	default:
		return 0;
	}
}

/* The transport word the encap policies take: ICMP's identifier word, or the ports. */
static __always_inline __u32 xskit_transport(__u8 protocol, const unsigned char *l4,
					     const unsigned char *end)
{
	if (protocol == 1 || protocol == 58)
		return xskit_icmp_word(l4, end);
	return xskit_ports(protocol, l4, end);
}

/* ICMP error types (icmp_is_err, icmpv6_is_err): their message quotes the
 * header of the packet that caused them. */
static __always_inline int xskit_icmp_is_err(int protocol, __u8 type)
{
	if (protocol == 1)
		return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/*
 * bond_flow_ip: the IP header at ip (IPv4 when ipv4, else IPv6), its addresses'
 * hash into *addrs and, with `ports`, the ports after it into *port_word; *next
 * gets where the header ends and *protocol its transport protocol (left as it
 * was for an IPv4 fragment, -1 before any). 0 when the header is not all there.
 */
static __always_inline int xskit_flow_ip(const unsigned char *ip, const unsigned char *end,
					 int ipv4, int ports, __u32 *addrs, __u32 *port_word,
					 const unsigned char **next, int *protocol)
{
	if (ipv4) {
		if (ip + 20 > end)
			return 0;
		*addrs = xskit_le32(ip + 12) ^ xskit_le32(ip + 16);
		/* bond_flow_ip takes the header length as it says, even below 20 bytes. */
		*next = ip + (ip[0] & 0x0f) * 4;
		if (!((ip[6] & 0x3f) | ip[7]))
			*protocol = ip[9];
	} else {
		if (ip + 40 > end)
			return 0;
		*addrs = xskit_le32(ip + 8) ^ xskit_le32(ip + 12) ^ xskit_le32(ip + 16) ^
			 xskit_le32(ip + 20) ^ xskit_le32(ip + 24) ^ xskit_le32(ip + 28) ^
			 xskit_le32(ip + 32) ^ xskit_le32(ip + 36);
		*next = ip + 40;
		/* Linux takes the next header as the transport protocol here. */
		*protocol = ip[6];
	}
	*port_word = ports && *protocol >= 0 ? xskit_ports(*protocol, *next, end) : 0;
	return 1;
}

/*
 * bond_flow_dissect for layer2+3 and layer3+4: an ICMP error is hashed on the
 * header it quotes (and its ports), so that errors follow their flow; 0 (hash
 * layer2) when that header is cut short.
 */
static __always_inline int xskit_dissect_ip(const unsigned char *l3, const unsigned char *end,
					    int ipv4, int ports, __u32 *addrs, __u32 *transport)
{
	const unsigned char *l4;
	int protocol = -1;
	__u32 icmp;

	if (!xskit_flow_ip(l3, end, ipv4, ports, addrs, transport, &l4, &protocol))
		return 0;
	if (protocol != 1 && protocol != 58)
		return 1;
	icmp = xskit_icmp_word(l4, end);
	if (l4 + 8 > end || !xskit_icmp_is_err(protocol, l4[0])) {
		if (icmp)
			*transport = icmp;
		return 1;
	}
	return xskit_flow_ip(l4 + 8, end, ipv4, ports, addrs, transport, &l4, &protocol);
}

/* Times the flow dissector moves on to another header at most (MAX_FLOW_DISSECT_HDRS). */
#define XSKIT_MAX_HEADERS 15
/* How far into a frame headers are looked for (a bound for the verifier; Rust keeps it). */
#define XSKIT_MAX_HEADER_BYTES 512
/* Steps of the walk at most: every move, and an IP header before each. */
#define XSKIT_DISSECT_STEPS 34

/* The frame being walked (bpf_loop's callback context). */
struct xskit_frame {
	const unsigned char *p;
	const unsigned char *end;
};

/*
 * The walk's state between steps. It lives in a map, not on the stack: values read from a
 * map are not tracked exactly, so the verifier checks one step and sees the next one start
 * in the same state, instead of following every path through all of them.
 */
struct xskit_dissect {
	__u32 at;
	__u32 addrs;
	__u32 moves;
	__u32 transport;
	__u32 ports;
	__u16 proto;
	__u8 next;
	__u8 have_next;
	__u8 v6;
	__u8 result;	/* XSKIT_WALKING, XSKIT_FOUND or XSKIT_FAILED */
};

enum { XSKIT_WALKING = 0, XSKIT_FOUND = 1, XSKIT_FAILED = 2 };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xskit_dissect);
} xskit_bond_walk SEC(".maps");

#define XSKIT_READ(at, n) ((at) + (n) > XSKIT_MAX_HEADER_BYTES || p + (at) + (n) > end)

/*
 * One step of Linux's whole flow dissector with the bond's keys (the encap policies):
 * one header, as dissect_all in xskit_wire::bond_hash takes them. A bpf_loop callback, so
 * that the verifier checks one step, not every path through 34 of them. Returns 1 when
 * the walk ends: found, or failed where Linux fails (the bond then hashes layer2).
 */
static long xskit_dissect_step(__u32 index, void *arg)
{
	struct xskit_frame *f = arg;
	const unsigned char *p = f->p, *end = f->end, *h;
	__u32 zero = 0, at;
	struct xskit_dissect *d = bpf_map_lookup_elem(&xskit_bond_walk, &zero);

	if (!d)
		return 1;
	at = d->at;

	/* Past the bound nothing more is read (every read below fails). */
	if (at > XSKIT_MAX_HEADER_BYTES)
		at = XSKIT_MAX_HEADER_BYTES + 1;
	h = p + at;
	if (!d->have_next) {
		/* At a network header of type d->proto. */
		if (d->proto == 0x0800) {
			__u32 ihl;

			if (XSKIT_READ(at, 20))
				goto failed;
			ihl = (__u32)(h[0] & 0x0f) * 4;
			if (ihl < 20)
				goto failed;
			d->addrs = xskit_le32(h + 12) ^ xskit_le32(h + 16);
			d->at = at + ihl;
			/* A fragment ends it: no ports. */
			if ((h[6] & 0x3f) | h[7])
				goto found;
			d->next = h[9];
			d->v6 = 0;
			d->have_next = 1;
		} else if (d->proto == 0x86dd) {
			if (XSKIT_READ(at, 40))
				goto failed;
			d->addrs = xskit_le32(h + 8) ^ xskit_le32(h + 12) ^ xskit_le32(h + 16) ^
				   xskit_le32(h + 20) ^ xskit_le32(h + 24) ^ xskit_le32(h + 28) ^
				   xskit_le32(h + 32) ^ xskit_le32(h + 36);
			d->at = at + 40;
			d->next = h[6];
			d->v6 = 1;
			d->have_next = 1;
		} else if (d->proto == 0x8100 || d->proto == 0x88a8) {
			if (XSKIT_READ(at, 4))
				goto failed;
			d->proto = (__u16)h[2] << 8 | h[3];
			d->at = at + 4;
			if (++d->moves > XSKIT_MAX_HEADERS)
				goto found;
		} else if (d->proto == 0x0806 || d->proto == 0x8035 || d->proto == 0x8847 ||
			   d->proto == 0x8848) {
			/* Dissected with keys the bond does not use: nothing found. */
			goto found;
		} else {
			goto failed;
		}
		return 0;
	}
	/* At the header IP protocol d->next names. */
	if (d->v6 && (d->next == 0 || d->next == 43 || d->next == 60)) {
		if (XSKIT_READ(at, 2))
			goto failed;
		d->next = h[0];
		d->at = at + ((__u32)h[1] + 1) * 8;
	} else if (d->v6 && d->next == 44) {
		if (XSKIT_READ(at, 8))
			goto failed;
		goto found;
	} else if (d->next == 4 || d->next == 41) {
		d->proto = d->next == 4 ? 0x0800 : 0x86dd;
		d->have_next = 0;
	} else if (d->next == 47) {
		__u16 flags, version, proto;

		if (XSKIT_READ(at, 4))
			goto failed;
		flags = (__u16)h[0] << 8 | h[1];
		version = flags & 0x0007;
		proto = (__u16)h[2] << 8 | h[3];
		/* Routing, a version above 1, or a version 1 that is not PPTP. */
		if ((flags & 0x4000) || version > 1 ||
		    (version == 1 && (proto != 0x880b || !(flags & 0x2000))))
			goto found;
		at += 4 + ((flags & 0x8000) ? 4 : 0) + ((flags & 0x2000) ? 4 : 0) +
		      ((flags & 0x1000) ? 4 : 0);
		if (version == 1) {
			__u16 ppp;

			if (flags & 0x0080)
				at += 4;
			if (XSKIT_READ(at, 4))
				goto failed;
			h = p + at;
			ppp = (__u16)h[2] << 8 | h[3];
			if (ppp == 0x0021)
				proto = 0x0800;
			else if (ppp == 0x0057)
				proto = 0x86dd;
			at += 4;
		} else if (proto == 0x6558) {
			/* Transparent Ethernet bridging: an Ethernet frame inside. */
			if (XSKIT_READ(at, 14))
				goto failed;
			h = p + at;
			proto = (__u16)h[12] << 8 | h[13];
			at += 14;
		}
		d->proto = proto;
		d->at = at;
		d->have_next = 0;
	} else {
		if (d->ports && at <= XSKIT_MAX_HEADER_BYTES)
			d->transport = xskit_transport(d->next, h, end);
		goto found;
	}
	if (++d->moves > XSKIT_MAX_HEADERS)
		goto found;
	return 0;
found:
	d->result = XSKIT_FOUND;
	return 1;
failed:
	d->result = XSKIT_FAILED;
	return 1;
}

/* The walk: 1 with the addresses' and transport's words found, 0 where Linux fails. */
static __always_inline int xskit_dissect_all(const unsigned char *p, const unsigned char *end,
					     int ports, __u32 *addrs_out, __u32 *transport_out)
{
	struct xskit_frame frame = { .p = p, .end = end };
	struct xskit_dissect *d;
	__u32 zero = 0;

	*addrs_out = 0;
	*transport_out = 0;
	if (p + 14 > end)
		return 0;
	d = bpf_map_lookup_elem(&xskit_bond_walk, &zero);
	if (!d)
		return 0;
	__builtin_memset(d, 0, sizeof(*d));
	d->at = 14;
	d->ports = ports;
	d->proto = (__u16)p[12] << 8 | p[13];
	bpf_loop(XSKIT_DISSECT_STEPS, xskit_dissect_step, &frame, 0);
	if (d->result == XSKIT_FAILED)
		return 0;
	/* Out of steps counts as found, as running out of moves does. */
	*addrs_out = d->addrs;
	*transport_out = d->transport;
	return 1;
}

/* The hash Linux's bond computes for the Ethernet frame [data, data_end). */
static __always_inline __u32 xskit_bond_hash(void *data, void *data_end, __u32 policy)
{
	const unsigned char *p = data, *end = data_end, *l3 = p + 14;
	int ports = policy == XSKIT_XMIT_LAYER34 || policy == XSKIT_XMIT_ENCAP34;
	__u32 eth, addrs, transport = 0, h;
	__u16 proto;

	if (policy >= XSKIT_XMIT_DPDK_L2)
		return xskit_dpdk_hash(p, end, policy);
	if (p + 14 > end)
		return 0;
	proto = (__u16)p[12] << 8 | p[13];
	if (policy == XSKIT_XMIT_VLAN_SRCMAC) {
		__u32 vendor = (__u32)p[6] << 16 | (__u32)p[7] << 8 | p[8];
		__u32 device = (__u32)p[9] << 16 | (__u32)p[10] << 8 | p[11];
		__u32 vlan = 0;

		if ((proto == 0x8100 || proto == 0x88a8) && p + 16 <= end)
			vlan = ((__u32)p[14] << 8 | p[15]) & 0x0fff;
		return vlan ^ vendor ^ device;
	}
	eth = (__u32)(p[5] ^ p[11]) ^ proto;
	if (policy == XSKIT_XMIT_LAYER2)
		return eth;
	if (policy == XSKIT_XMIT_ENCAP23 || policy == XSKIT_XMIT_ENCAP34) {
		if (!xskit_dissect_all(p, end, ports, &addrs, &transport))
			return eth;
		goto fold;
	}
	if (proto != 0x0800 && proto != 0x86dd)
		return eth;
	if (!xskit_dissect_ip(l3, end, proto == 0x0800, ports, &addrs, &transport))
		return eth;
fold:
	h = ports ? transport : eth;
	h ^= addrs;
	h ^= h >> 16;
	h ^= h >> 8;
	/* Linux drops the lowest bit for layer3+4: even port numbers are common. */
	if (ports)
		h >>= 1;
	return h;
}

/* A program that needs only the hashes defines XSKIT_BOND_HASH_ONLY first. */
#ifndef XSKIT_BOND_HASH_ONLY
/*
 * Transmit back out of a bond: xskit_bond_xmit(ctx) in place of `return XDP_TX`.
 * User space (xskit_bond::XdpBond) fills the maps below and rewrites them when a
 * member goes down or comes up, while the program stays attached: slot i of
 * the usable members is xskit_bond_ifindex[i] and xskit_bond_members[i] (a
 * devmap). The packet leaves through XDP_TX when its member is the one it came
 * in on, else through XDP_REDIRECT to that member, as the kernel's
 * xdp_master_redirect does for a bond. On a single device (one slot) it is
 * XDP_TX: one program for a device or a bond. Needs <bpf/bpf_helpers.h>.
 */
#define XSKIT_BOND_MAX_MEMBERS 8

enum xskit_bond_mode {
	XSKIT_BOND_ACTIVE_BACKUP = 1,
	XSKIT_BOND_XOR = 2,
	XSKIT_BOND_RR = 3,
};

/* The bond's settings, a u32 each in xskit_bond_config. */
enum xskit_bond_setting {
	XSKIT_BOND_MODE = 0,	/* enum xskit_bond_mode */
	XSKIT_BOND_POLICY = 1,	/* enum xskit_xmit_policy, for XSKIT_BOND_XOR */
	XSKIT_BOND_USABLE = 2,	/* usable members: slots 0 .. USABLE-1 */
	XSKIT_BOND_ACTIVE = 3,	/* the active slot, for XSKIT_BOND_ACTIVE_BACKUP */
	XSKIT_BOND_RR_PER = 4,	/* packets per member, for XSKIT_BOND_RR (0 counts as 1) */
	XSKIT_BOND_SETTINGS = 5,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XSKIT_BOND_SETTINGS);
	__type(key, __u32);
	__type(value, __u32);
} xskit_bond_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XSKIT_BOND_MAX_MEMBERS);
	__type(key, __u32);
	__type(value, __u32);
} xskit_bond_ifindex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, XSKIT_BOND_MAX_MEMBERS);
	__type(key, __u32);
	__type(value, __u32);
} xskit_bond_members SEC(".maps");

/* balance-rr's packet counter, per CPU as Linux keeps it for XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xskit_bond_rr SEC(".maps");

/* Counted drops: no usable member (0), a map missing (1), arrived on an
 * inactive member (2). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} xskit_bond_drops SEC(".maps");

static __always_inline int xskit_bond_drop(__u32 why)
{
	__u64 *n = bpf_map_lookup_elem(&xskit_bond_drops, &why);

	if (n)
		(*n)++;
	return XDP_DROP;
}

static __always_inline __u32 xskit_bond_setting(__u32 which)
{
	__u32 *v = bpf_map_lookup_elem(&xskit_bond_config, &which);

	return v ? *v : 0;
}

/*
 * Whether a frame is a slow protocol frame (LACP or marker, EtherType 0x8809,
 * untagged): an 802.3ad bond's control frames, which belong to the kernel,
 * where its LACP (xskit_bond::lacp::LacpControl) reads them: return XDP_PASS
 * for them, before anything else, on every member.
 */
static __always_inline int xskit_bond_is_slow(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;

	if (data + 14 > (unsigned char *)(long)ctx->data_end)
		return 0;
	return data[12] == 0x88 && data[13] == 0x09;
}

/*
 * Whether a frame that arrived on this member may be taken: in active-backup,
 * only the active member's are (Linux drops the others'); every member's in the
 * other modes. A refused frame is counted (xskit_bond_drops slot 2): return
 * XDP_DROP for it.
 */
static __always_inline int xskit_bond_rx_ok(struct xdp_md *ctx)
{
	__u32 active, *ifindex, two = 2;
	__u64 *n;

	if (xskit_bond_setting(XSKIT_BOND_MODE) != XSKIT_BOND_ACTIVE_BACKUP)
		return 1;
	active = xskit_bond_setting(XSKIT_BOND_ACTIVE);
	if (xskit_bond_setting(XSKIT_BOND_USABLE) > 0 && active < XSKIT_BOND_MAX_MEMBERS) {
		ifindex = bpf_map_lookup_elem(&xskit_bond_ifindex, &active);
		if (ifindex && *ifindex == ctx->ingress_ifindex)
			return 1;
	}
	n = bpf_map_lookup_elem(&xskit_bond_drops, &two);
	if (n)
		(*n)++;
	return 0;
}

static __always_inline int xskit_bond_xmit(struct xdp_md *ctx)
{
	__u32 zero = 0, slot, *ifindex;
	__u32 usable = xskit_bond_setting(XSKIT_BOND_USABLE);

	if (usable == 0 || usable > XSKIT_BOND_MAX_MEMBERS)
		return xskit_bond_drop(0);
	switch (xskit_bond_setting(XSKIT_BOND_MODE)) {
	case XSKIT_BOND_XOR:
		slot = xskit_bond_hash((void *)(long)ctx->data, (void *)(long)ctx->data_end,
				       xskit_bond_setting(XSKIT_BOND_POLICY)) % usable;
		break;
	case XSKIT_BOND_RR: {
		__u32 *count = bpf_map_lookup_elem(&xskit_bond_rr, &zero);
		__u32 per = xskit_bond_setting(XSKIT_BOND_RR_PER);

		if (!count)
			return xskit_bond_drop(1);
		slot = (*count / (per ? per : 1)) % usable;
		(*count)++;
		break;
	}
	default:
		slot = xskit_bond_setting(XSKIT_BOND_ACTIVE);
		break;
	}
	if (slot >= XSKIT_BOND_MAX_MEMBERS)
		return xskit_bond_drop(0);
	ifindex = bpf_map_lookup_elem(&xskit_bond_ifindex, &slot);
	if (!ifindex || *ifindex == 0)
		return xskit_bond_drop(0);
	if (*ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&xskit_bond_members, slot, 0);
}

#endif /* XSKIT_BOND_HASH_ONLY */
#endif /* XSKIT_BOND_H */
