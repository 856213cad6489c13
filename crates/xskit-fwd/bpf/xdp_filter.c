// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Stage 0 of an xskit pipeline, in the kernel: ordered rules matched on the
 * source and destination IPv4/IPv6 prefixes or prefix sets, the protocol, the source and
 * destination port ranges, and the keys most rules leave out (the outer VLAN ID,
 * the IP length, TCP flags, ICMP type and code: a rule's `extra` bits say which it
 * names) decide each packet before user space sees it: pass to the kernel stack,
 * drop (DoS), redirect to the AF_XDP socket of the packet's queue, or forward
 * it out of the other side (tx_ports, a devmap of its usable members: one for
 * a plain interface, a bond's picked by its mode and transmit hash as
 * xskit_bond.h computes it, tx_bond holding the mode). The
 * first matching rule wins; no match takes the default action. Rules and the
 * default live in maps, so they change at run time without reattaching.
 * Every rule (and the default, at COUNTER_DEFAULT) counts packets and bytes.
 * An IPv6 packet with extension headers is not matched here: its protocol and
 * ports lie behind a chain this program does not walk, so it goes to user
 * space, which does, and is counted at COUNTER_UNDECIDED.
 *
 * A packet a `forward` rule would send out of the other interface whose TCP or
 * UDP checksum is partial (the sending host's own socket left it for its
 * device to finish: the field holds just the pseudo-header sum) goes to user
 * space instead, which finishes it; an XDP redirect would carry the unfinished
 * field and the receiver would drop the packet. Counted at COUNTER_PARTIAL_CSUM, and
 * not on the rule: user space counts it there.
 *
 * A packet whose fields cannot all be read is unclassifiable and takes the
 * configured unclassifiable action (drop by default), never a rule's or the
 * default's: runts, more than MAX_VLAN_TAGS tags, IPv4 with a bad version or
 * IHL, options cut short or a total length below the header or beyond the
 * packet, IPv6 with a bad version or a payload length of 0 or beyond the
 * packet, first fragments without the 4 bytes of UDP's ports, the 14 of TCP's
 * header through its flags or the 2 of ICMP's type and code, and a later
 * fragment that reaches a rule with ports, TCP flags or ICMP keys (it has no
 * such header to compare). The same
 * checks, in the same order, are PacketKey::parse and RuleSet::classify in
 * src/rules.rs: the kernel and user space call the same packets unclassifiable.
 * Counted at COUNTER_UNCLASSIFIABLE.
 *
 * A bond's ARP monitoring: an untagged ARP packet whose sender address is one
 * of arp_targets (config.arp_targets of them) is counted at COUNTER_ARP_ALIVE, the
 * member's sign of life; a reply to xskit's probe (a reply with target address
 * 0.0.0.0) is then consumed here, the rest go on as any packet.
 *
 * On an 802.3ad bond's member (config.lacp), slow protocol frames (LACP and
 * marker PDUs, EtherType 0x8809) go to the kernel before anything else, where
 * the bond's control path reads them; counted at COUNTER_LACP.
 *
 * On an active-backup bond's inactive member (config.inactive), everything is
 * dropped first, as Linux's bond does, and counted at COUNTER_INACTIVE (so is
 * everything else on an 802.3ad member that is not collecting). A packet
 * to forward out of a bond with no usable member is dropped and counted at
 * COUNTER_NO_MEMBER.
 *
 * Built twice: plain, and with XSKIT_FRAGS as the multi-buffer ("xdp.frags")
 * variant, which sees a packet's headers in its first buffer and counts the
 * bytes of all of them.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#define XSKIT_BOND_HASH_ONLY
#include "xskit_bond.h"
#include "xskit_capture.h"

/* Limits, actions, counter slots and tx settings, written by build.rs from src/abi.rs. */
#include "xdp_filter_abi.h"
#define ETH_P_SLOW_PROTOCOLS 0x8809

struct rule {
	__u32 addr[4];  /* destination prefix, network byte order; IPv4 uses addr[0] */
	__u32 mask[4];
	__u32 saddr[4]; /* source prefix, as the destination's */
	__u32 smask[4];
	__u8 family;    /* 4, 6, or 0 for any */
	__u8 protocol;  /* 0 for any */
	__u8 action;
	__u8 source;    /* non-zero when the rule names a source prefix or source ports */
	__u16 port_lo;  /* destination ports, host byte order; 0..65535 for any */
	__u16 port_hi;
	__u16 sport_lo; /* source ports, as the destination's */
	__u16 sport_hi;
	__u8 extra;     /* EXTRA_* bits: which of the keys below the rule names */
	__u8 tcp_mask;  /* TCP flags: (flags & tcp_mask) == tcp_value */
	__u8 tcp_value;
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 police;    /* POLICE_*: for a rate limit, policers[slot] holds its bucket */
	__u16 vlan;     /* the outer tag's VLAN ID */
	__u16 len_lo;   /* IP length, inclusive */
	__u16 len_hi;
	__u8 sset;      /* EXTRA_SRC_SET: the source set's index + 1 */
	__u8 dset;      /* EXTRA_DST_SET: the destination set's */
	__u8 spset;     /* EXTRA_PORT_SETS: the source port set's index + 1, or 0 */
	__u8 dpset;     /* the destination port set's */
	/*
	 * Where the rule's state is kept: its counter, policer and police counts, and the key of
	 * its per-source buckets and blocks. A rule keeps its slot by name when the rules change.
	 */
	__u16 slot;
	__u16 pad;
};

/* What a packet offers every key, for the rules that name more than addresses and ports. */
struct facts {
	__u32 src[4];   /* IPv4 in src[0] */
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u16 ip_len;   /* 0 when not IP */
	__u16 vlan;     /* NO_VLAN when untagged */
	__u8 family;    /* 4, 6, or 0 when not IP */
	__u8 proto;
	__u8 later;     /* a later fragment: no TCP, UDP or ICMP header */
	__u8 tcp_flags;
	__u8 icmp_type;
	__u8 icmp_code;
	__u64 tracked;  /* track_packet's answer */
};

/* The 1 bits of x (BPF has no instruction for it). */
static __always_inline __u32 popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/* The index of the lowest 1 bit of x, which is not 0. */
static __always_inline __u32 ctz64(__u64 x)
{
	return popcount64((x & -x) - 1);
}

/*
 * Prefix sets. Each set has SET_SUMMARY_WORDS words of set_summary, two bits (BLOCK_*) for
 * each IPv4 /16: out of the set, in it whole, or in part; for the last, its entry of
 * set_sixteens (SET_SIXTEENS a set), whose low two bits (SIXTEEN_*) say whether the set holds
 * one prefix of it (its length and address in the entry) or where its record is in
 * set_blocks (the set's SET_BLOCK_WORDS entries, RECORD_WORDS a record): a word of two bits
 * (BLOCK_*) for each of its /24s. A /24 held in part has a bitmap of its 256 addresses in
 * set_bitmaps, at the index the entry's rank gives (its word's first partial /24) plus the
 * partial /24s before it in the word. IPv6 is looked up in set_trie. Sized when loaded, and
 * written through mappings of their memory, a word at a time.
 */

/* An array of VALUEs user space maps and stores into; its size is set when it is loaded. */
#define MAPPED_ARRAY(name, VALUE)                                                              \
	struct {                                                                               \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                              \
		__uint(max_entries, 1);                                                        \
		__uint(map_flags, BPF_F_MMAPABLE);                                             \
		__type(key, __u32);                                                            \
		__type(value, VALUE);                                                          \
	} name SEC(".maps")

/* A word of a /16's record and, beside it in the same cache line, its rank: the index in
 * set_bitmaps of its first partial /24. */
struct set_block {
	__u64 word;
	__u64 rank;
};

MAPPED_ARRAY(set_blocks, struct set_block);

MAPPED_ARRAY(set_summary, __u64);

/* SIXTEENS_LINE /16s' entries: a cache line (an array's values are 8-aligned, so entries of
 * their own would take twice the memory). */
struct sixteens_line {
	__u32 e[SIXTEENS_LINE];
};

MAPPED_ARRAY(set_sixteens, struct sixteens_line);

/* The addresses of a /24 in a set: bit (a & 63) of word (a & 255) >> 6. */
struct set_bits {
	__u64 bits[4];
};

MAPPED_ARRAY(set_bitmaps, struct set_bits);

/* Port sets: PORT_SET_WORDS words each, bit (p & 63) of word p >> 6 for port p. */
MAPPED_ARRAY(port_sets, __u64);

static __always_inline int in_port_set(__u32 set, __u16 port)
{
	__u32 index = set * PORT_SET_WORDS + (port >> 6);
	__u64 *word = bpf_map_lookup_elem(&port_sets, &index);

	return word && (*word >> (port & 63)) & 1;
}

/* True when both ports are in rule r's port sets, or it names none. */
static __always_inline int port_sets_match(const struct rule *r, __u16 sport, __u16 dport)
{
	return (!r->spset || in_port_set(r->spset - 1, sport)) &&
	       (!r->dpset || in_port_set(r->dpset - 1, dport));
}

/* A trie key's data: the set's index, then the IPv6 address. */
struct set_addr {
	__u32 set;
	__u8 addr[16];
};

struct set_key {
	__u32 prefixlen; /* 32 (the set) + the prefix's length */
	struct set_addr data;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct set_key);
	__type(value, __u8);
} set_trie SEC(".maps");

/*
 * The elements of the sets with timeouts or counters, each prefix as written (not merged:
 * each has its own expiry and count), keyed by set * 2 + (1 for IPv6) and the address. Such
 * a set's /24 table marks BLOCK_TRACKED where an element reaches, and its IPv6 prefixes are in
 * set_trie as TRIE_TRACKED, so that only addresses near an element come here.
 */
struct set_element {
	__u64 expires;  /* CLOCK_MONOTONIC ns; 0: never */
	__u64 packets;  /* packets whose address it held, when counted */
	__u32 len;      /* its prefix length */
	__u32 counted;
};

/*
 * set_elements' key: a set_key padded to 24 bytes of data. The trie puts a value right after
 * its key's data; after 20 bytes the count's 8 bytes were 4-aligned and, in some nodes, split
 * over two cache lines, where an atomic add takes a split lock (about 1.8 us a packet here).
 */
struct element_key {
	__u32 prefixlen; /* as set_key's; the padding is past every prefix */
	struct set_addr data;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct element_key);
	__type(value, struct set_element);
} set_elements SEC(".maps");

/* A lookup in set_elements: the key, the clock once read, and the answer. */
struct element_walk {
	struct element_key key;
	__u64 now;
	int found;
};

/*
 * One step of in_elements: the longest element under the key's length that holds the
 * address. A live one answers (counted, if its set counts); an expired one is gone, so the
 * walk goes on below its length. 1 stops the walk.
 */
static long element_step(__u64 i, void *data)
{
	struct element_walk *w = data;
	struct set_element *e = bpf_map_lookup_elem(&set_elements, &w->key);

	if (!e)
		return 1;
	if (e->expires) {
		/* The coarse clock: an element lives at most a tick past its time. */
		if (!w->now)
			w->now = bpf_ktime_get_coarse_ns();
		if (e->expires <= w->now) {
			if (!e->len || e->len > 128)
				return 1;
			w->key.prefixlen = 32 + e->len - 1;
			return 0;
		}
	}
	if (e->counted)
		__sync_fetch_and_add(&e->packets, 1);
	w->found = 1;
	return 1;
}

/*
 * True when a live element of set `set_family` (set * 2, + 1 for IPv6) holds the address
 * a0..a3 (IPv4 in a0): at most one step per prefix length, by bpf_loop, so that the verifier
 * checks one step, not 129. A global function: verified once for every caller.
 */
__attribute__((noinline)) int in_elements(__u32 set_family, __u32 a0, __u32 a1, __u32 a2,
					  __u32 a3)
{
	struct element_walk w = {};
	__u32 *addr = (__u32 *)w.key.data.addr;

	w.key.prefixlen = 32 + ((set_family & 1) ? 128 : 32);
	w.key.data.set = set_family;
	addr[0] = a0;
	addr[1] = a1;
	addr[2] = a2;
	addr[3] = a3;
	/* Mostly one step: the longest element is live, or there is none. */
	if (!element_step(0, &w))
		bpf_loop(128, element_step, &w, 0);
	return w.found;
}

/*
 * The sides the rules ask of the sets with timeouts or counters: bit i for set i's sources,
 * bit 16 + i for its destinations. A global of its own section, as xskit_table_in_force.
 * User space sets a set's bits before its tables mark anything BLOCK_TRACKED or TRIE_TRACKED
 * where a rule asks them, and before rules that ask them are in force; not zero, every
 * packet takes the general path.
 */
/* Set `set`'s /16 index entry of the address `host` (host byte order); SIXTEEN_OUT when it
 * is missing. */
static __always_inline __u32 sixteen_entry(__u32 set, __u32 host)
{
	__u32 index = set * (SET_SIXTEENS / SIXTEENS_LINE) + host / (SIXTEENS_LINE << 16);
	struct sixteens_line *line = bpf_map_lookup_elem(&set_sixteens, &index);

	return line ? line->e[(host >> 16) & (SIXTEENS_LINE - 1)] : SIXTEEN_OUT;
}

/* The word of `host`'s /16's record that holds its /24, given the /16's index entry `e`
 * (SIXTEEN_RECORD). */
static __always_inline struct set_block *record_word(__u32 set, __u32 host, __u32 e)
{
	__u32 index = set * SET_BLOCK_WORDS + ((e >> 2) & (SET_SIXTEENS - 1)) * RECORD_WORDS +
		      ((host >> 13) & (RECORD_WORDS - 1));

	return bpf_map_lookup_elem(&set_blocks, &index);
}

/* For a set with timeouts or counters, whose every /16 it reaches has a record: the word of
 * `host`'s /24, or NULL where the set reaches not. */
static __always_inline struct set_block *record_entry(__u32 set, __u32 host)
{
	__u32 e = sixteen_entry(set, host);

	return (e & 3) == SIXTEEN_RECORD ? record_word(set, host, e) : 0;
}

volatile __u32 xskit_tracked_sets SEC(".data.xskit_trk") = 0;

/*
 * The packet's addresses and, per side (0 source, 1 destination), a bit for each set with
 * timeouts or counters that holds the address: worked out once a packet, by track, before any
 * rule asks, so that a rule's question is one load, and the verifier walks the elements'
 * lookup once, not at every place a rule asks of a set.
 */
struct tracked_in {
	__u32 addr[2][4];
	__u32 bits[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tracked_in);
} tracked_in SEC(".maps");

/* True when a live element of set `set` holds the address `a` of `family`. */
static __always_inline int tracked_member(__u32 set, __u32 family, const __u32 *a)
{
	struct set_key key = {};
	struct set_block *entry;
	__u32 host;
	__u8 *v;

	if (family == 4) {
		host = bpf_ntohl(a[0]);
		entry = record_entry(set, host);
		if (!entry || ((entry->word >> (((host >> 8) & 31) * 2)) & 3) != BLOCK_TRACKED)
			return 0;
		return in_elements(set * 2, a[0], 0, 0, 0);
	}
	key.prefixlen = 32 + 128;
	key.data.set = set;
	__builtin_memcpy(key.data.addr, a, 16);
	v = bpf_map_lookup_elem(&set_trie, &key);
	if (!v || *v != TRIE_TRACKED)
		return 0;
	return in_elements(set * 2 + 1, a[0], a[1], a[2], a[3]);
}

/*
 * Works out tracked_in's bits for the addresses in it, of `family` (4 or 6): for each set
 * and side xskit_tracked_sets asks, whether a live element holds the address; each element
 * that does counts the packet, if it counts. Global: verified once, called once a packet
 * from the general path.
 */
__attribute__((noinline)) int track(__u32 family)
{
	__u32 zero = 0, asked = xskit_tracked_sets, sets, set, i;
	struct tracked_in *t = bpf_map_lookup_elem(&tracked_in, &zero);

	if (!t)
		return 0;
	t->bits[0] = 0;
	t->bits[1] = 0;
	sets = (asked | asked >> 16) & 0xffff;
	for (i = 0; i < MAX_SETS && sets; i++) {
		set = ctz64(sets);
		sets &= sets - 1;
		if (set >= MAX_SETS)
			break;
		if (((asked >> set) & 1) && tracked_member(set, family, t->addr[0]))
			t->bits[0] |= 1u << set;
		if (((asked >> (16 + set)) & 1) && tracked_member(set, family, t->addr[1]))
			t->bits[1] |= 1u << set;
	}
	return 0;
}

/*
 * Tracks a packet's addresses (4 bytes each for IPv4, else 16) when any set needs it: the sets with timeouts or counters that hold its source
 * in the low 32 bits, its destination in the high 32 (0 when there are none).
 */
static __always_inline __u64 track_packet(__u32 family, const void *src, const void *dst)
{
	__u32 zero = 0;
	struct tracked_in *t;

	if (!xskit_tracked_sets)
		return 0;
	t = bpf_map_lookup_elem(&tracked_in, &zero);
	if (!t)
		return 0;
	if (family == 4) {
		t->addr[0][0] = *(const __u32 *)src;
		t->addr[1][0] = *(const __u32 *)dst;
	} else {
		__builtin_memcpy(t->addr[0], src, 16);
		__builtin_memcpy(t->addr[1], dst, 16);
	}
	track(family);
	return t->bits[0] | (__u64)t->bits[1] << 32;
}

/* The bit of track_packet's answer for set `set` on `side` (0 source, 1 destination). */
static __always_inline __u32 held_by(__u64 tracked, __u32 set, __u32 side)
{
	return (tracked >> ((set & (MAX_SETS - 1)) + 32 * side)) & 1;
}

/*
 * Rule bit vectors (src/rule_vectors.rs says how they are made): a bit for each rule, rule i
 * in bit i % 64 of words[i / 64], and a summary with bit w set when words[w] is not zero (in
 * the plain path's vectors, when it holds a rule anchored at the value). Sized when loaded.
 */
struct rule_vector {
	__u64 summary;
	__u64 words[VECTOR_WORDS];
};

MAPPED_ARRAY(vectors, struct rule_vector);

/*
 * A field's table (FIELD_* is its index in field_ids): for each of its values, the id of its
 * vector. Sized when loaded.
 */
struct field_table {
	__u32 ids[FIELD_VALUES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct field_table);
} field_ids SEC(".maps");

/*
 * The plain path's fields' tables, field after field (WORDS_* says where each starts): one
 * value, found by one lookup a packet. For at most WORD_RULES rules, the vectors themselves,
 * one word each; for more, the ids of the plain path's vectors (RuleVectors::plain_ids in
 * src/rule_vectors.rs).
 */
struct plain_words {
	__u64 words[PLAIN_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct plain_words);
} plain_words SEC(".maps");

/*
 * The rules' IPv6 prefixes: the field (2 * the table set, + 0 for the source or 1 for the
 * destination), then the address.
 */
struct rule_addr {
	__u32 field;
	__u8 addr[16];
};

struct rule_prefix {
	__u32 prefixlen; /* 32 (the field) + the prefix's length */
	struct rule_addr data;
};

/* Each IPv6 rule prefix's vector id: the rules whose prefix holds it. Sized when loaded. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rule_prefix);
	__type(value, __u32);
} rule_trie SEC(".maps");

/* What a vector search answers when no rule's bit is in every vector, or a table is missing. */
#define NO_RULE 0xffffffff
#define NO_TABLE 0xfffffffe

static __always_inline struct rule_vector *vector(__u32 id)
{
	return bpf_map_lookup_elem(&vectors, &id);
}


/*
 * True when the IPv4 address `a` (network byte order) is in set `set`: its /24's two bits in
 * the set's table, and for a /24 held in part, its bitmap, found by rank (partial_rank in
 * src/sets.rs counts the same way).
 */
static __always_inline int in_set4(__u32 set, __u32 a)
{
	__u32 host = bpf_ntohl(a), index = set * SET_SUMMARY_WORDS + (host >> 21);
	__u32 shift = ((host >> 16) & 31) * 2, block, n, e;
	__u64 *summary = bpf_map_lookup_elem(&set_summary, &index);
	struct set_block *entry;
	struct set_bits *b;
	__u64 word, below;

	if (!summary)
		return 0;
	/* Its /16 out of the set, or in it whole: decided by the summary, in the caches. */
	block = (*summary >> shift) & 3;
	if (block != BLOCK_PARTIAL)
		return block;
	/* Holding one prefix: decided by its entry. */
	e = sixteen_entry(set, host);
	if ((e & 3) == SIXTEEN_ONE)
		return !((host ^ (e >> 16)) & (0xffff0000U >> ((e >> 2) & 31)) & 0xffff);
	if ((e & 3) != SIXTEEN_RECORD)
		return e & 3;
	entry = record_word(set, host, e);
	if (!entry)
		return 0;
	word = entry->word;
	shift = ((host >> 8) & 31) * 2;
	block = (word >> shift) & 3;
	/* OUT 0, FULL 1, TRACKED 3: the general path asks track_packet of the last. */
	if (block != BLOCK_PARTIAL)
		return block;
	below = word & ((1ULL << shift) - 1);
	n = entry->rank + popcount64((below >> 1) & ~below & 0x5555555555555555ULL);
	b = bpf_map_lookup_elem(&set_bitmaps, &n);
	return b && (b->bits[(host & 255) >> 6] >> (host & 63)) & 1;
}

/*
 * True when the address `a` of `family` is in set `set`; never for what is not IP. `key` is
 * memory for the trie's key.
 */
static __always_inline int in_set(__u32 set, const struct facts *f, __u32 side,
				  struct set_key *key)
{
	const __u32 *a = side ? f->dst : f->src;
	__u8 *entry;

	if (f->family == 4) {
		int in = in_set4(set, a[0]);

		return in == BLOCK_TRACKED ? held_by(f->tracked, set, side) : in != 0;
	}
	if (f->family != 6)
		return 0;
	key->prefixlen = 32 + 128;
	key->data.set = set;
	__builtin_memcpy(key->data.addr, a, 16);
	entry = bpf_map_lookup_elem(&set_trie, key);
	if (!entry)
		return 0;
	/* A member, or an element's prefix: then track_packet's answer. */
	if (*entry == TRIE_TRACKED)
		return held_by(f->tracked, set, side);
	return 1;
}

/* What first_rule_ipv4 sets `action` to at a rule with extra keys: the general path decides. */
#define UNSETTLED 0xff
/* What the plain path's rule lookups set `action` to at a rate-limit rule: police_plain
 * polices it, with the rule's own action within the rate. */
#define POLICED 0xfe

/* True when rule r names a port range: a packet without ports cannot be matched to it. */
static __always_inline int has_ports(const struct rule *r)
{
	return r->port_lo != 0 || r->port_hi != 0xffff ||
	       (r->source && (r->sport_lo != 0 || r->sport_hi != 0xffff));
}

/* True when rule r names a key of the TCP, UDP or ICMP header, which a later fragment lacks. */
static __always_inline int needs_l4(const struct rule *r)
{
	return has_ports(r) ||
	       (r->extra & (EXTRA_TCP_FLAGS | EXTRA_ICMP_TYPE | EXTRA_ICMP_CODE | EXTRA_PORT_SETS));
}

/*
 * The set bits (rule_vector ids in config.set_rules) of rule r's sets that do not hold the
 * packet's addresses: 0 when they all do, or it names none.
 */
__attribute__((noinline)) __u32 sets_failed(const struct rule *r, const struct facts *f,
					    struct set_key *key)
{
	if (!r || !f || !key)
		return 1;
	if ((r->extra & EXTRA_SRC_SET) && !in_set(r->sset - 1, f, 0, key))
		return 1u << ((r->sset - 1) & (MAX_SETS - 1));
	if ((r->extra & EXTRA_DST_SET) && !in_set(r->dset - 1, f, 1, key))
		return 1u << (MAX_SETS + ((r->dset - 1) & (MAX_SETS - 1)));
	return 0;
}

/* The extra keys outside the TCP, UDP or ICMP header but the sets: the VLAN ID, the IP length. */
static __always_inline int frame_extras_match(const struct rule *r, const struct facts *f)
{
	if ((r->extra & EXTRA_VLAN) && f->vlan != r->vlan)
		return 0;
	return !(r->extra & EXTRA_LENGTH) ||
	       (f->family && f->ip_len >= r->len_lo && f->ip_len <= r->len_hi);
}

/* The extra keys of the TCP, UDP or ICMP header. */
static __always_inline int l4_extras_match(const struct rule *r, const struct facts *f)
{
	if ((r->extra & EXTRA_PORT_SETS) && !port_sets_match(r, f->sport, f->dport))
		return 0;
	if ((r->extra & EXTRA_TCP_FLAGS) && (f->tcp_flags & r->tcp_mask) != r->tcp_value)
		return 0;
	if ((r->extra & EXTRA_ICMP_TYPE) && f->icmp_type != r->icmp_type)
		return 0;
	return !(r->extra & EXTRA_ICMP_CODE) || f->icmp_code == r->icmp_code;
}

/*
 * True when both ports are in r's ranges. The source's are compared only where the rule
 * names a source: most rules (a flood's destination) do not, and skip its loads.
 */
static __always_inline int ports_match(const struct rule *r, __u16 sport, __u16 dport)
{
	return dport >= r->port_lo && dport <= r->port_hi &&
	       (!r->source || (sport >= r->sport_lo && sport <= r->sport_hi));
}

struct counter {
	__u64 packets;
	__u64 bytes;
};

/*
 * A rate-limit rule's token bucket, a GCRA: `tat` is the time (ticks: 2^-TICK_SHIFT ns of
 * bpf_ktime_get_ns) at which the bucket is full again; a frame costs `cost` ticks (with
 * COST_SHIFT fraction bits) per packet, or per bit of frame when `bits`; it is within the rate
 * when the new tat runs no more than `tolerance` (the burst's worth) ahead of now. The same
 * arithmetic as Bucket::admit in src/bucket.rs. User space writes every field but tat
 * when the rule's rate changes; the program moves tat. A rule limited per source
 * (POLICE_SOURCE) keeps a tat for each source prefix (v4_len or v6_len bits of its address)
 * in source_buckets instead; one that went over its rate is dropped whole for `block` ns, if
 * that is not 0, from the blocked table.
 */
struct policer {
	__u64 tat;
	__u64 cost;
	__u64 tolerance;
	__u64 block;
	__u32 bits;
	__u8 v4_len;
	__u8 v6_len;
	__u16 pad;
};

/* What a rule's rate limit did, per CPU. */
struct police_count {
	__u64 over_rate; /* packets over the rate */
	__u64 blocked;   /* packets of blocked sources */
	__u64 blocks;    /* sources blocked */
	__u64 refused;   /* blocks refused: the blocked table was full */
};

/* A source's key in source_buckets and blocked: its rule's slot, family and masked address. */
struct source_key {
	__u32 rule;
	__u32 family;
	__u32 addr[4];
};

/*
 * A slot of the blocked table: a source (its rule's slot, family and masked address, as in
 * struct source_key) blocked until when (bpf_ktime_get_ns), and the packets dropped since;
 * `until` 0 when the slot was never used, BLOCK_GONE when its block was removed,
 * BLOCK_CLAIMED while a CPU writes it. Half a cache line: a flood from many sources meets
 * the table at random, and its size in caches and TLB entries is what that costs.
 */
struct blocked_source {
	__u64 until;
	__u32 drops;
	__u16 rule;
	__u8 family;
	__u8 pad;
	__u32 addr[4];
};

struct config {
	__u32 rule_count;
	__u32 default_action;
	__u32 unclassifiable_action;
	__u32 inactive;
	__u32 arp_targets;
	__u32 lacp;
	/* Non-zero when any of the three above is: the packet takes the general path. */
	__u32 duties;
	/*
	 * Past LINEAR_RULES rules, the ids in `vectors` of the vectors that are not a field's
	 * (SpecialVectors in src/rule_vectors.rs): every rule; those that can match what is not
	 * IP; those an IPv6 source, or destination, in no rule prefix can match; those that
	 * name source set s (set_rules[s]) or destination set s (set_rules[MAX_SETS + s]).
	 */
	__u32 all_rules;
	__u32 non_ip;
	__u32 src6_none;
	__u32 dst6_none;
	__u32 set_rules[2 * MAX_SETS];
	/* Which of the two table sets this state is of: its index in `state`. */
	__u32 table;
	/*
	 * Non-zero: written in front of every packet redirected to user space, with the rule
	 * that decided it and a note on its headers (src/told.rs): the tag of this interface
	 * and these rules.
	 */
	__u64 told_tag;
};

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

/*
 * The EtherType of an Ethernet header in one 16-bit load: the uapi struct
 * ethhdr is packed, so reading its field makes the compiler load it byte by
 * byte.
 */
static __always_inline __be16 eth_proto(const struct ethhdr *eth)
{
	return *(const __be16 *)((const char *)eth + 12);
}

/*
 * The configuration and the rules, one map value: looked up once a packet, so that no
 * lookup inside the rule loop makes the compiler spill the packet's fields to the stack.
 * Not a global (a data section the program reads with no lookup): the verifier then takes
 * three times as long over the program, a second more at every start.
 */
struct filter_state {
	struct config config;
	struct rule rules[MAX_RULES];
	/*
	 * To STATE_BYTES, a power of two, so that finding the table set's state in `state` is a
	 * shift, not a multiplication, on every packet.
	 */
	__u8 pad[STATE_BYTES - sizeof(struct config) - MAX_RULES * sizeof(struct rule)];
};

/*
 * Two table sets, each a state (its configuration and rules) with its field tables, words,
 * trie prefixes and vectors: user space writes the one not in force and then switches
 * table_in_force, one word, so that a packet sees the old rules or the new, whole.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct filter_state);
} state SEC(".maps");

/*
 * The table set in force: 0 or 1. A global of its own section (a map the loader makes, named
 * for it), read with one load, not a lookup.
 */
volatile __u32 xskit_table_in_force SEC(".data.xskit_tbl") = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, MAX_MEMBERS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TX_SETTINGS);
	__type(key, __u32);
	__type(value, __u32);
} tx_bond SEC(".maps");

/* ARP monitoring's targets, network byte order: slots 0 .. config.arp_targets-1. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ARP_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} arp_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RULE_SLOTS);
	__type(key, __u32);
	__type(value, struct policer);
} policers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RULE_SLOTS);
	__type(key, __u32);
	__type(value, struct police_count);
} police_counts SEC(".maps");

/* The coarse clock as this CPU last read it, and the tick (jiffies) it read it in. */
struct tick_time {
	__u64 jiffies;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tick_time);
} tick_times SEC(".maps");

/* Sized when loaded: the rules file's source_table and block_table. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct source_key);
	__type(value, __u64);
} source_buckets SEC(".maps");

/*
 * Not an LRU: a flood of new sources cannot push the blocked out. An array, open-addressed
 * (a source lies in the BLOCK_PROBES slots from where its address hashes to, block_home):
 * found with no helper call and no hash of a long key, which a blocked source's packet, a
 * flood's, pays for every time. Sized when loaded: a quarter more
 * slots than the rules file's block_table, and BLOCK_PROBES - 1 more.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct blocked_source);
} blocked SEC(".maps");

/* Written when loaded: the slots a source's hash is taken to (0 for no table). */
const volatile __u32 block_slots = 0;

/* balance-rr's packet counter, per CPU as Linux keeps it for XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tx_rr SEC(".maps");

#ifdef XSKIT_FRAGS
#define PACKET_LEN(ctx, data, end) bpf_xdp_get_buff_len(ctx)
#else
#define PACKET_LEN(ctx, data, end) ((__u64)((end) - (data)))
#endif

static __always_inline void count_at(__u32 index, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&counters, &index);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Counts a packet under COUNTER_* `slot`, whose counter comes after the rules' slots. */
#define count(slot, bytes) count_at((slot) - MAX_RULES + RULE_SLOTS, bytes)

/* Folds a one's-complement sum to 16 bits. */
static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/*
 * True when the TCP or UDP checksum at l4 holds just the pseudo-header sum
 * (`words` 16-bit words of addresses at addrs, the protocol, the L4 length).
 * 0 and 0xffff are the same number in one's complement.
 */
static __always_inline int partial_csum(void *l4, void *end, __u8 proto, __u16 *addrs,
					 int words, __u32 l4_len)
{
	__u32 sum = proto + (l4_len & 0xffff) + (l4_len >> 16);
	__u16 field, pseudo;
	void *at;
	int i;

	if (proto == IPPROTO_TCP)
		at = l4 + 16;
	else if (proto == IPPROTO_UDP)
		at = l4 + 6;
	else
		return 0;
	if (at + 2 > end)
		return 0;
	for (i = 0; i < 16; i++) {
		if (i >= words)
			break;
		sum += bpf_ntohs(addrs[i]);
	}
	field = bpf_ntohs(*(__u16 *)at);
	pseudo = fold(sum);
	return field == pseudo || ((field | pseudo) == 0xffff && (field & pseudo) == 0);
}

static __always_inline __u32 tx_setting(__u32 slot)
{
	__u32 *v = bpf_map_lookup_elem(&tx_bond, &slot);

	return v ? *v : 0;
}

/*
 * The other bond's transmit hash, as a global function: the verifier checks it once on its
 * own, not again on every path through the rules that ends in a forward.
 */
__attribute__((noinline)) int xskit_filter_hash(struct xdp_md *ctx, __u32 policy)
{
	return xskit_bond_hash((void *)(long)ctx->data, (void *)(long)ctx->data_end, policy);
}

/* Out of the other side: its one member, or the member its bond picks. */
static __always_inline int forward(struct xdp_md *ctx, __u64 pkt_len)
{
	__u32 usable = tx_setting(TX_USABLE), slot, zero = 0;

	if (usable == 0 || usable > MAX_MEMBERS) {
		count(COUNTER_NO_MEMBER, pkt_len);
		return XDP_DROP;
	}
	switch (tx_setting(TX_MODE)) {
	case TX_XOR:
		slot = (__u32)xskit_filter_hash(ctx, tx_setting(TX_POLICY)) % usable;
		break;
	case TX_RR: {
		__u32 *n = bpf_map_lookup_elem(&tx_rr, &zero);
		__u32 per = tx_setting(TX_RR_PER);

		if (!n)
			return XDP_DROP;
		slot = (*n / (per ? per : 1)) % usable;
		(*n)++;
		break;
	}
	default:
		slot = tx_setting(TX_ACTIVE);
		break;
	}
	/* A slot emptied under the packet (a member going away): dropped, never handed to the
	 * host's stack unfiltered. */
	int sent = bpf_redirect_map(&tx_ports, slot, XDP_DROP);

	if (sent == XDP_DROP)
		count(COUNTER_NO_MEMBER, pkt_len);
	return sent;
}

/*
 * Writes the decision told in front of the packet, TOLD_LEN bytes of XDP metadata: `told`'s
 * low half (the rule, or NOT_TOLD), its high half (a NOTE_*), then `tag`. Where the driver
 * keeps no metadata nothing is written.
 */
static __always_inline void xskit_tell(struct xdp_md *ctx, __u64 tag, __u64 told)
{
	void *meta, *data;

	if (bpf_xdp_adjust_meta(ctx, -TOLD_LEN))
		return;
	meta = (void *)(long)ctx->data_meta;
	data = (void *)(long)ctx->data;
	if (meta + TOLD_LEN > data)
		return;
	((__u32 *)meta)[0] = (__u32)told;
	((__u32 *)meta)[1] = told >> 32;
	((__u64 *)meta)[1] = tag;
}

/*
 * To the queue's AF_XDP socket. Where none is registered (the forwarder starting or
 * stopping), the packet is dropped and counted: what user space was to decide never reaches
 * the host's stack undecided.
 */
static __always_inline int to_socket(struct xdp_md *ctx, const struct filter_state *st,
				     __u64 pkt_len, __u64 told)
{
	int sent;

	if (st->config.told_tag)
		xskit_tell(ctx, st->config.told_tag, told);
	sent = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_DROP);

	if (sent == XDP_DROP)
		count(COUNTER_NO_SOCKET, pkt_len);
	return sent;
}

/*
 * An ARP packet from a monitored target: counted; true when it is the answer
 * to xskit's probe (a reply to 0.0.0.0), which is consumed here.
 */
static __always_inline int arp_monitor(struct filter_state *st, void *data, void *end, __u64 pkt_len)
{
	struct ethhdr *eth = data;
	unsigned char *a = (void *)(eth + 1);
	__u32 sip, tip, k, *t;

	if ((void *)(a + 28) > end || eth_proto(eth) != bpf_htons(ETH_P_ARP))
		return 0;
	__builtin_memcpy(&sip, a + 14, 4);
	__builtin_memcpy(&tip, a + 24, 4);
	for (k = 0; k < MAX_ARP_TARGETS; k++) {
		__u32 key = k;

		if (k >= st->config.arp_targets)
			break;
		t = bpf_map_lookup_elem(&arp_targets, &key);
		if (t && *t == sip) {
			count(COUNTER_ARP_ALIVE, pkt_len);
			/* Operation 2, reply, to the probe's 0.0.0.0. */
			return a[6] == 0 && a[7] == 2 && tip == 0;
		}
	}
	return 0;
}

/* Carries out an action; a packet redirected to user space is told `told`. */
static __always_inline int act(struct xdp_md *ctx, const struct filter_state *st,
			       __u32 action, __u64 pkt_len, __u64 told)
{
	if (action == ACTION_DROP)
		return XDP_DROP;
	if (action == ACTION_REDIRECT)
		return to_socket(ctx, st, pkt_len, told);
	if (action == ACTION_FORWARD)
		return forward(ctx, pkt_len);
	return XDP_PASS;
}

/* The ticks a frame of `len` bytes costs, as Bucket::cost: rounded, no product overflows. */
static __always_inline __u64 frame_cost(const struct policer *p, __u64 len)
{
	__u64 units = p->bits ? len * 8 : 1;

	return units * (p->cost >> COST_SHIFT) +
	       ((units * (p->cost & ((1ULL << COST_SHIFT) - 1)) + (1ULL << (COST_SHIFT - 1))) >>
		COST_SHIFT);
}

/*
 * 1 when a frame of `len` bytes at `now_ns` is within the rate of the bucket whose arrival
 * time is *tat, whose tokens it then takes; 0 when it is over. CPUs share a bucket: a
 * compare-and-swap moves tat, tried a few times, and a frame that loses every try is over
 * the rate (a limit fails closed).
 */
static __always_inline int admit(__u64 *tat, const struct policer *p, __u64 now_ns, __u64 len)
{
	__u64 now = now_ns << TICK_SHIFT, cost = frame_cost(p, len);
	__u64 room = p->tolerance > cost ? p->tolerance : cost, old, next;
	int i;

	for (i = 0; i < 4; i++) {
		old = *(volatile __u64 *)tat;
		next = (old > now ? old : now) + cost;
		if (next - now > room)
			return 0;
		if (__sync_val_compare_and_swap(tat, old, next) == old)
			return 1;
	}
	return 0;
}

/* A mask of the first `bits` (0 to 32) bits of an address word, in network byte order. */
static __always_inline __u32 prefix_mask(__s32 bits)
{
	if (bits <= 0)
		return 0;
	if (bits >= 32)
		return 0xffffffff;
	return bpf_htonl(0xffffffff << (32 - bits));
}

/* The first slot of the blocked table where the source `k` (its prefix taken) may lie. */
static __always_inline __u32 block_home(const struct source_key *k)
{
	__u64 low = ((__u64)k->addr[1] << 32 | k->addr[0]) ^ k->family;
	__u64 high = (__u64)k->addr[3] << 32 | k->addr[2];

	/* The product's top 32 bits, taken to 0..block_slots as a fraction of 2^32. */
	return (((low ^ high * BLOCK_HASH) * BLOCK_HASH >> 32) * block_slots) >> 32;
}

static __always_inline int blocks_source(const struct blocked_source *b,
					 const struct source_key *k)
{
	const __u64 *x = (const __u64 *)b->addr, *y = (const __u64 *)k->addr;

	return x[0] == y[0] && b->rule == k->rule && b->family == k->family && x[1] == y[1];
}

/*
 * The slot of the blocked table that blocks `k` at `now`, or NULL. The slots from its home
 * on, up to the first never used: a block is written in the first slot that is free, so
 * none lies past one that never held any.
 */
static __always_inline struct blocked_source *blocked_find(const struct source_key *k, __u64 now)
{
	__u32 home = block_home(k), i, at;
	struct blocked_source *b;
	__u64 until;

#pragma unroll
	for (i = 0; i < BLOCK_PROBES; i++) {
		at = home + i;
		b = bpf_map_lookup_elem(&blocked, &at);
		if (!b)
			return 0;
		until = *(volatile __u64 *)&b->until;
		if (!until)
			return 0;
		if (until > now && until != BLOCK_CLAIMED && blocks_source(b, k))
			return b;
	}
	return 0;
}

/*
 * Blocks `k` until `until`, in the first free slot (never used, removed, or run out at
 * `now`) where it may lie: 1 when written, 0 when every such slot holds a live block. A
 * CPU claims the slot by a compare-and-swap of its `until`, so two CPUs never write one
 * slot; the exchange that publishes `until` orders the key's stores before it.
 */
static __always_inline int block(const struct source_key *k, __u64 now, __u64 until)
{
	__u32 home = block_home(k), i, at;
	struct blocked_source *b;
	__u64 was;

#pragma unroll
	for (i = 0; i < BLOCK_PROBES; i++) {
		at = home + i;
		b = bpf_map_lookup_elem(&blocked, &at);
		if (!b)
			return 0;
		/* Live, or claimed (BLOCK_CLAIMED is after any time): not free. */
		was = *(volatile __u64 *)&b->until;
		if (was > now)
			continue;
		if (__sync_val_compare_and_swap(&b->until, was, BLOCK_CLAIMED) != was)
			continue;
		b->rule = k->rule;
		b->family = k->family;
		__builtin_memcpy(b->addr, k->addr, sizeof(b->addr));
		b->drops = 1;
		__sync_lock_test_and_set(&b->until, until);
		return 1;
	}
	return 0;
}

/*
 * bpf_ktime_get_coarse_ns, read once a tick on each CPU: the coarse clock moves only at a
 * tick, and jiffies, which the verifier inlines as a load, says when one came. A helper's
 * call and return cost more than the rest of a blocked source's drop where returns are
 * mitigated (SRSO's safe RET, on AMD Zen). At most a tick behind the coarse clock, which is
 * at most a tick behind bpf_ktime_get_ns.
 */
static __always_inline __u64 coarse_now(void)
{
	__u32 zero = 0;
	struct tick_time *t = bpf_map_lookup_elem(&tick_times, &zero);
	__u64 tick = bpf_jiffies64();

	if (!t)
		return bpf_ktime_get_coarse_ns();
	if (t->jiffies != tick || !t->ns) {
		t->ns = bpf_ktime_get_coarse_ns();
		t->jiffies = tick;
	}
	return t->ns;
}

/* Takes the prefix of `k`'s address that rule `p` limits sources by. */
static __always_inline void take_source_prefix(struct source_key *k, const struct policer *p)
{
	__s32 bits = k->family == 6 ? p->v6_len : p->v4_len;
	int i;

	for (i = 0; i < 4; i++)
		k->addr[i] &= prefix_mask(bits - 32 * i);
}

/* 1 when the source `k` (its prefix taken) is blocked now: its packet dropped, counted. */
static __always_inline int blocked_drop(const struct source_key *k, struct police_count *c)
{
	struct blocked_source *b = blocked_find(k, coarse_now());

	if (!b)
		return 0;
	__sync_fetch_and_add(&b->drops, 1);
	c->blocked++;
	return 1;
}

/*
 * 1 when the IPv4 source `saddr` is blocked at the rule whose state is in `slot` (a rule
 * limited per source, with `block`): counted, to be dropped. 0 for anything else, which
 * within_rate then polices. No function call: a blocked source's packet is a flood's.
 */
static __always_inline int blocked_ipv4(__u32 slot, __u32 saddr)
{
	struct source_key k = {.rule = slot, .family = 4, .addr = {saddr}};
	struct police_count *c;
	struct policer *p;

	p = bpf_map_lookup_elem(&policers, &slot);
	c = bpf_map_lookup_elem(&police_counts, &slot);
	if (!p || !c || !p->block)
		return 0;
	take_source_prefix(&k, p);
	return blocked_drop(&k, c);
}

/*
 * A source's packet at a rule limited per source: 0 within its bucket's rate, 1 over it or
 * blocked (counted, and a source over it blocked when the rule says so). `k` holds the rule,
 * the family and the whole address; its prefix is taken here. A source first seen starts
 * with a full bucket. A global function: verified once, whichever path calls it.
 */
__attribute__((noinline)) int police_source(struct source_key *k, __u64 len)
{
	struct police_count *c;
	struct policer *p;
	__u64 now_ns, *tat, fresh;
	__u32 rule;

	if (!k)
		return 1;
	rule = k->rule;
	p = bpf_map_lookup_elem(&policers, &rule);
	c = bpf_map_lookup_elem(&police_counts, &rule);
	if (!p || !c || !p->cost)
		return 1;
	take_source_prefix(k, p);
	/* A block is timed by the coarse clock: a blocked source's packet needs no more. */
	if (p->block && blocked_drop(k, c))
		return 1;
	now_ns = bpf_ktime_get_ns();
	tat = bpf_map_lookup_elem(&source_buckets, k);
	if (!tat) {
		fresh = (now_ns << TICK_SHIFT) + frame_cost(p, len);
		bpf_map_update_elem(&source_buckets, k, &fresh, BPF_ANY);
		return 0;
	}
	if (admit(tat, p, now_ns, len))
		return 0;
	c->over_rate++;
	if (p->block) {
		/* No free slot where it may lie: the blocked stay, this source is only limited. */
		if (block(k, now_ns, now_ns + p->block))
			c->blocks++;
		else
			c->refused++;
	}
	return 1;
}

/* A rule's packet at its rate limit: 0 within it, 1 over it (counted). Global, as above. */
__attribute__((noinline)) int police_rule(__u32 i, __u64 len)
{
	struct policer *p = bpf_map_lookup_elem(&policers, &i);
	struct police_count *c;

	/* A bucket never written (no rate has a cost of 0) lets nothing through. */
	if (p && p->cost && admit(&p->tat, p, bpf_ktime_get_ns(), len))
		return 0;
	c = bpf_map_lookup_elem(&police_counts, &i);
	if (c)
		c->over_rate++;
	return 1;
}

/*
 * Rule k->rule's rate limit (`how`, POLICE_RULE or POLICE_SOURCE) on a frame of `len` bytes
 * from the source in `k`: over the rate (or blocked), the action becomes a drop, counted on
 * the rule and in police_counts; within it, the rule's own action stands (forward in XDP, or
 * to user space to be forwarded: counted at COUNTER_WITHIN_RATE, as user space counts it on
 * the rule). 1 within the rate, 0 over it. Global, so that the verifier walks its paths
 * once, not again after each caller.
 */
__attribute__((noinline)) int within_rate(struct source_key *k, __u64 len, __u32 how)
{
	if (!k)
		return 0;
	return !(how == POLICE_SOURCE ? police_source(k, len) : police_rule(k->rule, len));
}

/* Rule `hit`, or NULL for the default and the other COUNTER_* slots. */
static __always_inline struct rule *hit_rule(struct filter_state *st, __u32 hit)
{
	__u64 i = hit;

	if (i >= MAX_RULES)
		return 0;
	/*
	 * The compiler compares one copy of the register and indexes with another, whose bound
	 * the verifier does not know: a mask it cannot drop gives the index one.
	 */
	asm volatile("%0 &= %1" : "+r"(i) : "i"(MAX_RULES - 1));
	return &st->rules[i];
}

/* Rule `hit`'s POLICE_* (POLICE_NONE for the default and the other slots). */
static __always_inline __u8 rule_police(struct filter_state *st, __u32 hit)
{
	struct rule *r = hit_rule(st, hit);

	return r ? r->police : POLICE_NONE;
}

/*
 * Rule `hit`'s rate limit (`how`, its POLICE_*) on a packet from `src` (family 4: src[0]
 * only; 0: not IP, every such packet one source): a drop over the rate; within it, `action`.
 */
static __always_inline __u32 police(struct filter_state *st, __u32 *hit, __u32 action, __u64 len,
				    __u32 family, const __u32 *src)
{
	__u8 how = rule_police(st, *hit);

	if (how == POLICE_NONE)
		return action;
	{
		struct rule *r = hit_rule(st, *hit);
		struct source_key k = {.rule = r ? r->slot : *hit, .family = family};

		k.addr[0] = src[0];
		if (family == 6) {
			k.addr[1] = src[1];
			k.addr[2] = src[2];
			k.addr[3] = src[3];
		}
		if (!within_rate(&k, len, how))
			return ACTION_DROP;
	}
	if (action == ACTION_REDIRECT)
		*hit = COUNTER_WITHIN_RATE;
	return action;
}

/*
 * Counts a decision under `hit` (a rule's on its slot), tells it through `why`, and carries
 * it out.
 */
static __always_inline int settle_told(struct xdp_md *ctx, struct filter_state *st, __u32 *why,
				       __u32 hit, __u32 action, __u64 pkt_len, __u64 told)
{
	struct rule *r = hit_rule(st, hit);

	*why = hit;
	if (r)
		count_at(r->slot, pkt_len);
	else
		count(hit, pkt_len);
	return act(ctx, st, action, pkt_len, told);
}

/* settle_told for a decision that is not one rule's alone: user space classifies again. */
static __always_inline int settle(struct xdp_md *ctx, struct filter_state *st, __u32 *why,
				  __u32 hit, __u32 action, __u64 pkt_len)
{
	return settle_told(ctx, st, why, hit, action, pkt_len, NOT_TOLD);
}

/* What the plain path's vectors are looked up by, host byte order. */
struct plain_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u16 total;
	__u8 proto;
	__u8 flags;
};

/*
 * The plain path's fields' words in `t` for the packet, by FIELD_*: for at most WORD_RULES
 * rules the vectors themselves, for more the ids of the plain path's vectors.
 */
static __always_inline void plain_entries(const struct plain_words *t, const struct plain_key *p,
					  __u64 *e)
{
	e[FIELD_PROTOCOL] = t->words[WORDS_PROTOCOL + p->proto];
	e[FIELD_SRC_PORT] = t->words[WORDS_SRC_PORT + p->sport];
	e[FIELD_DST_PORT] = t->words[WORDS_DST_PORT + p->dport];
	e[FIELD_SRC4_HIGH] = t->words[WORDS_SRC4_HIGH + (p->saddr >> 16)];
	e[FIELD_SRC4_LOW] = t->words[WORDS_SRC4_LOW + (p->saddr & 0xffff)];
	e[FIELD_DST4_HIGH] = t->words[WORDS_DST4_HIGH + (p->daddr >> 16)];
	e[FIELD_DST4_LOW] = t->words[WORDS_DST4_LOW + (p->daddr & 0xffff)];
	e[FIELD_TCP_FLAGS] = t->words[WORDS_TCP_FLAGS + p->flags];
	e[FIELD_LENGTH] = t->words[WORDS_LENGTH + p->total];
}

/*
 * For at most WORD_RULES rules: the first rule whose bit every plain field's word has, or
 * NO_RULE; NO_TABLE when the table is missing. The words are the vectors themselves (the
 * protocol's with the untagged packet's and no ICMP's folded in).
 */
static __always_inline __u32 first_in_words(const struct filter_state *st,
					    const struct plain_key *p)
{
	__u32 table = st->config.table;
	struct plain_words *t = bpf_map_lookup_elem(&plain_words, &table);
	__u64 e[PLAIN_FIELDS], acc = ~0ULL;
	__u32 f;

	if (!t)
		return NO_TABLE;
	plain_entries(t, p, e);
#pragma unroll
	for (f = 0; f < PLAIN_FIELDS; f++)
		acc &= e[f];
	return acc ? ctz64(acc) : NO_RULE;
}

/*
 * The first rule whose bit all of the plain path's vectors have, or NO_RULE; NO_TABLE when a
 * table is missing. Each rule is anchored at one field it names (src/rule_vectors.rs), and a
 * plain path's vector's summary holds the words of the rules anchored at its value: a word
 * none of the packet's summaries holds has no rule it matches, and is skipped; the others
 * are ANDed in full. The protocol's vectors hold what every packet here asks (only the rules
 * a plain packet can match; in the summary, also the rules anchored at none). Not inlined:
 * its vectors' pointers take a frame of their own, not the program's.
 */
static __attribute__((noinline)) __u32 first_in_plain(struct filter_state *st,
						      const struct plain_key *p)
{
	struct rule_vector *v[PLAIN_FIELDS];
	__u32 table = st->config.table, f, k, w;
	struct plain_words *t = bpf_map_lookup_elem(&plain_words, &table);
	__u64 e[PLAIN_FIELDS], s = 0, acc;

	if (!t)
		return NO_TABLE;
	plain_entries(t, p, e);
#pragma unroll
	for (f = 0; f < PLAIN_FIELDS; f++) {
		v[f] = vector(e[f]);
		if (!v[f])
			return NO_TABLE;
		s |= v[f]->summary;
	}
	for (k = 0; k < VECTOR_WORDS && s; k++) {
		w = ctz64(s) & (VECTOR_WORDS - 1);
		s &= s - 1;
		acc = ~0ULL;
#pragma unroll
		for (f = 0; f < PLAIN_FIELDS; f++)
			acc &= v[f]->words[w];
		if (acc)
			return w * 64 + ctz64(acc);
	}
	return NO_RULE;
}

/* Rule i, or NULL past the last one. */
static __always_inline struct rule *rule_at(struct filter_state *st, __u32 i)
{
	if (i >= st->config.rule_count || i >= MAX_RULES)
		return 0;
	return &st->rules[i];
}

/*
 * What first_rule answers for a later fragment at a rule that needs its TCP, UDP or ICMP
 * header: it carries none, so it goes to user space if the rule is user space's to decide,
 * and is unclassifiable otherwise, so that no later rule or the default takes it for want of
 * that header (RuleSet::classify does the same). Also the answer when a rule table is missing.
 */
#define PORTS_UNKNOWN 0xffffffff

/* The extra keys sets_ipv4 asks of a rule: its prefix sets and port sets. */
#define SET_EXTRAS (EXTRA_SRC_SET | EXTRA_DST_SET | EXTRA_PORT_SETS)

/*
 * True when the packet is in rule r's prefix sets and port sets (or it names none). Not
 * inlined: the program's own frame, which the general path's deepest calls add to, stays
 * small, and the port sets' bit positions are computed only for a rule that names one
 * (inlined, the compiler hoists them out of the rule walk, onto every packet's path).
 */
static __attribute__((noinline)) int sets_ipv4(const struct rule *r, __u32 saddr, __u32 daddr,
					       __u16 sport, __u16 dport)
{
	/* No set with timeouts or counters here: the plain path is not taken while any is. */
	return (!(r->extra & EXTRA_SRC_SET) || in_set4(r->sset - 1, saddr)) &&
	       (!(r->extra & EXTRA_DST_SET) || in_set4(r->dset - 1, daddr)) &&
	       (!(r->extra & EXTRA_PORT_SETS) || port_sets_match(r, sport, dport));
}

/*
 * The first rule decide_plain's packet (IPv4, untagged, TCP or UDP, not a fragment) matches,
 * or COUNTER_DEFAULT; `action` gets what to do, or UNSETTLED at a rule with extra keys
 * other than sets and port sets, or a rate limit, which the general path then decides. Only
 * the first address word is compared: an IPv4 or any-family rule holds zeros in the others
 * (src/filter.rs builds them so), and the packet's would be zero too.
 */
static __always_inline __u32 first_rule_ipv4(struct filter_state *st, __u8 proto, __u32 saddr,
					     __u32 daddr, __u16 sport, __u16 dport, __u32 *action)
{
	__u32 i;

	for (i = 0; i < LINEAR_RULES; i++) {
		struct rule *r = rule_at(st, i);

		if (!r)
			break;
		if ((r->family | 4) != 4 || (r->protocol && r->protocol != proto) ||
		    (daddr & r->mask[0]) != r->addr[0])
			continue;
		if (r->source && (saddr & r->smask[0]) != r->saddr[0])
			continue;
		if (r->extra) {
			if (!sets_ipv4(r, saddr, daddr, sport, dport))
				continue;
			if (r->extra & ~SET_EXTRAS) {
				*action = UNSETTLED;
				return i;
			}
		}
		if (!ports_match(r, sport, dport))
			continue;
		/*
		 * A rate limit is policed out of line (police_plain): policing here would double
		 * the paths the verifier walks after this loop (and its time at every load).
		 */
		*action = r->police ? POLICED : r->action;
		return i;
	}
	*action = st->config.default_action;
	return COUNTER_DEFAULT;
}

/*
 * first_rule_ipv4 for more than LINEAR_RULES rules, by their vectors, which decide every key
 * but the sets exactly: the first rule they give is the packet's if its sets hold it. When
 * they do not (a later rule may match), at a rate limit, or when a table is missing, the
 * general path decides.
 */
static __always_inline __u32 plain_by_vectors(struct filter_state *st,
					      const struct plain_key *key, __u32 *action)
{
	struct rule *r;
	__u32 i;

	if (st->config.rule_count <= WORD_RULES)
		i = first_in_words(st, key);
	else
		i = first_in_plain(st, key);
	if (i == NO_RULE) {
		*action = st->config.default_action;
		return COUNTER_DEFAULT;
	}
	r = rule_at(st, i);
	/* A call costs more than the rest of the rule's check: made only for a rule with sets. */
	if (!r || ((r->extra & SET_EXTRAS) &&
		   !sets_ipv4(r, bpf_htonl(key->saddr), bpf_htonl(key->daddr), key->sport,
			      key->dport))) {
		*action = UNSETTLED;
		return i;
	}
	*action = r->police ? POLICED : r->action;
	return i;
}

/* True when the address `a` (four words) is in the prefix (`addr`, `mask`). */
static __always_inline int in_prefix(const __u32 *a, const __u32 *addr, const __u32 *mask)
{
	return (a[0] & mask[0]) == addr[0] && (a[1] & mask[1]) == addr[1] &&
	       (a[2] & mask[2]) == addr[2] && (a[3] & mask[3]) == addr[3];
}

/* What rule_takes says of a rule. */
#define TAKES_NOT 0
#define TAKES 1
#define TAKES_BUT_L4 2 /* a later fragment at a rule that needs its TCP, UDP or ICMP header */

/* Whether rule r takes the packet, every key compared but the sets. */
static __always_inline int rule_takes(const struct rule *r, const struct facts *f)
{
	if ((r->family && r->family != f->family) || (r->protocol && r->protocol != f->proto))
		return TAKES_NOT;
	if (!in_prefix(f->dst, r->addr, r->mask) ||
	    (r->source && !in_prefix(f->src, r->saddr, r->smask)))
		return TAKES_NOT;
	if (r->extra && !frame_extras_match(r, f))
		return TAKES_NOT;
	if (f->later && needs_l4(r))
		return TAKES_BUT_L4;
	if (!ports_match(r, f->sport, f->dport) || (r->extra && !l4_extras_match(r, f)))
		return TAKES_NOT;
	return TAKES;
}

/* Rule i's answer to first_rule when it takes (`takes`) the packet. */
static __always_inline __u32 taken(const struct rule *r, __u32 i, int takes, __u32 *action)
{
	*action = takes == TAKES ? r->action : ACTION_REDIRECT;
	if (takes == TAKES)
		return i;
	return r->action == ACTION_REDIRECT && !r->police ? i : PORTS_UNKNOWN;
}

/*
 * The words `w` of the vectors of the rules that name the sets in `dead` (bits as
 * sets_failed gives them): rules the packet cannot match.
 */
static __always_inline __u64 dead_rules(struct filter_state *st, __u32 w, __u32 dead)
{
	__u64 rules = 0;
	__u32 b;

	for (b = 0; b < 2 * MAX_SETS; b++) {
		struct rule_vector *v;

		if (!((dead >> b) & 1))
			continue;
		v = vector(st->config.set_rules[b]);
		if (v)
			rules |= v->words[w & (VECTOR_WORDS - 1)];
	}
	return rules;
}

/* The vectors a packet looks up in the general path: eleven, `all_rules` where it has no field. */
#define GENERAL_VECTORS 11


/* The id of the vector of a field's value in the state's table set (~0 when it is missing). */
static __always_inline __u32 field_id(const struct filter_state *st, __u32 field, __u32 value)
{
	__u32 at = st->config.table * FIELDS + field;
	struct field_table *t = bpf_map_lookup_elem(&field_ids, &at);

	return t ? t->ids[value & (FIELD_VALUES - 1)] : ~0U;
}

/*
 * first_rule_vectors' search: the ids of the packet's vectors, the words still to look at
 * (`summary`), the rules of `word` still to try (`acc`), the sets that failed (as
 * sets_failed gives them), and at its end the answer and the action.
 */
struct search {
	__u32 ids[GENERAL_VECTORS];
	__u32 word;
	__u32 dead;
	__u32 hit;
	__u32 action;
	__u32 started;
	__u64 summary;
	__u64 acc;
	/* Trie keys' memory: the stack has no room for them beside the search's callers. */
	struct rule_prefix prefix;
	struct set_key set;
};

/*
 * The id of the IPv6 rule prefix vector for `addr` in `field` (2 * the table set, + 0 for
 * the source or 1 for the destination), or `none`. `key` is memory for the trie's key.
 */
static __always_inline __u32 prefix_vector(__u32 field, const __u32 *addr, __u32 none,
					   struct rule_prefix *key)
{
	__u32 *id;

	key->prefixlen = 32 + 128;
	key->data.field = field;
	__builtin_memcpy(key->data.addr, addr, 16);
	id = bpf_map_lookup_elem(&rule_trie, key);
	return id ? *id : none;
}

/*
 * The facts of the packet in hand: on the stack they would take the general path past its
 * 512 bytes, with the search's frames below it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct facts);
} packet_facts SEC(".maps");

/* The packet's facts, zeroed but for its `family` and `vlan`; NULL if the map is missing. */
static __always_inline struct facts *facts_of(__u8 family, __u16 vlan)
{
	__u32 zero = 0;
	struct facts *f = bpf_map_lookup_elem(&packet_facts, &zero);

	if (f) {
		__builtin_memset(f, 0, sizeof(*f));
		f->family = family;
		f->vlan = vlan;
	}
	return f;
}

/* The search of the packet in hand: too large for the stack beside its callers'. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct search);
} searches SEC(".maps");

/* Fills `sc->ids` with the packet's vectors': `all_rules`' where it has no field. */
static __always_inline void general_vectors(struct filter_state *st, const struct facts *f,
					    struct search *sc)
{
	__u32 vlan = f->vlan == NO_VLAN ? UNTAGGED_VLAN : (f->vlan & 0xfff);
	__u32 all = st->config.all_rules;
	int l4 = f->family && !f->later;

	sc->ids[0] = field_id(st, FIELD_VLAN, vlan);
	sc->ids[1] = f->family ? field_id(st, FIELD_PROTOCOL, f->proto) : st->config.non_ip;
	sc->ids[2] = f->family ? field_id(st, FIELD_LENGTH, f->ip_len) : all;
	sc->ids[3] = l4 ? field_id(st, FIELD_SRC_PORT, f->sport) : all;
	sc->ids[4] = l4 ? field_id(st, FIELD_DST_PORT, f->dport) : all;
	sc->ids[5] = l4 ? field_id(st, FIELD_TCP_FLAGS, f->tcp_flags) : all;
	sc->ids[6] = l4 ? field_id(st, FIELD_ICMP, ((__u32)f->icmp_type << 8 | f->icmp_code)) : all;
	sc->ids[7] = sc->ids[8] = sc->ids[9] = sc->ids[10] = all;
	if (f->family == 4) {
		__u32 src = bpf_ntohl(f->src[0]), dst = bpf_ntohl(f->dst[0]);

		sc->ids[7] = field_id(st, FIELD_SRC4_HIGH, (src >> 16));
		sc->ids[8] = field_id(st, FIELD_SRC4_LOW, (src & 0xffff));
		sc->ids[9] = field_id(st, FIELD_DST4_HIGH, (dst >> 16));
		sc->ids[10] = field_id(st, FIELD_DST4_LOW, (dst & 0xffff));
	} else if (f->family == 6) {
		__u32 source = st->config.table * 2;

		sc->ids[7] = prefix_vector(source, f->src, st->config.src6_none, &sc->prefix);
		sc->ids[8] = prefix_vector(source + 1, f->dst, st->config.dst6_none, &sc->prefix);
	}
}

/* Ends the search with `hit` and `action`: 1. */
static __always_inline int search_ends(struct search *sc, __u32 hit, __u32 action)
{
	sc->hit = hit;
	sc->action = action;
	return 1;
}

/*
 * Word w of the AND of the search's vectors (`summary` at w == VECTOR_WORDS), or 0 with
 * sc->hit PORTS_UNKNOWN when one is missing.
 */
static __always_inline __u64 and_of(struct search *sc, __u32 w)
{
	__u64 acc = ~0ULL;
	int j;

#pragma unroll
	for (j = 0; j < GENERAL_VECTORS; j++) {
		struct rule_vector *v = vector(sc->ids[j]);

		if (!v) {
			sc->hit = PORTS_UNKNOWN;
			return 0;
		}
		acc &= w < VECTOR_WORDS ? v->words[w & (VECTOR_WORDS - 1)] : v->summary;
	}
	return acc;
}

/* The search's first step: the packet's vectors, and the words they share. */
static __always_inline int search_start(struct filter_state *st, const struct facts *f,
					struct search *sc)
{
	sc->started = 1;
	general_vectors(st, f, sc);
	sc->summary = and_of(sc, VECTOR_WORDS);
	return sc->hit == PORTS_UNKNOWN;
}

/*
 * A step of the search: the next word's rules, or the next rule tried. 1 when the search
 * ends (sc->hit and sc->action say how). A rule whose set fails the packet puts every rule
 * naming that set out of the search, so that it takes at most a step a word and one a set.
 * A global function: the search's loop verifies a call each step, not this body.
 */
__attribute__((noinline)) int search_step(struct filter_state *st, const struct facts *f,
					  struct search *sc)
{
	struct rule *r;
	__u32 failed, i;
	int takes;

	if (!st || !f || !sc)
		return 1;
	if (!sc->started)
		return search_start(st, f, sc);
	if (!sc->acc) {
		if (!sc->summary)
			return search_ends(sc, COUNTER_DEFAULT, st->config.default_action);
		sc->word = ctz64(sc->summary) & (VECTOR_WORDS - 1);
		sc->summary &= sc->summary - 1;
		sc->acc = and_of(sc, sc->word);
		if (sc->hit == PORTS_UNKNOWN)
			return 1;
		if (sc->acc && sc->dead)
			sc->acc &= ~dead_rules(st, sc->word, sc->dead);
		return 0;
	}
	i = sc->word * 64 + ctz64(sc->acc);
	sc->acc &= sc->acc - 1;
	r = rule_at(st, i);
	if (!r)
		return search_ends(sc, PORTS_UNKNOWN, 0);
	failed = sets_failed(r, f, &sc->set);
	if (failed) {
		sc->dead |= failed;
		sc->acc &= ~dead_rules(st, sc->word, sc->dead);
		return 0;
	}
	takes = rule_takes(r, f);
	if (takes == TAKES_NOT)
		return 0;
	sc->hit = taken(r, i, takes, &sc->action);
	return 1;
}

/*
 * first_rule for more than LINEAR_RULES rules: the rules whose bits all the packet's vectors
 * have, in order, each tried, the first that takes the packet its rule. Inlined, its steps
 * each a call, so that the stack has a frame fewer below the general path's.
 */
static __always_inline __u32 first_rule_vectors(struct filter_state *st, const struct facts *f,
						__u32 *action)
{
	__u32 zero = 0, step;
	struct search *sc;

	sc = bpf_map_lookup_elem(&searches, &zero);
	if (!sc)
		return PORTS_UNKNOWN;
	__builtin_memset(sc, 0, sizeof(*sc));
	/* The first step, and one for each word and each set. */
	for (step = 0; step < 1 + VECTOR_WORDS + 2 * MAX_SETS + 1; step++) {
		if (search_step(st, f, sc)) {
			*action = sc->action;
			return sc->hit;
		}
	}
	/* Only a rule failed by a key its vectors should have decided: unclassifiable. */
	return PORTS_UNKNOWN;
}

/*
 * The first rule a packet matches, every key compared; COUNTER_DEFAULT when none does, or
 * PORTS_UNKNOWN. A global function: the path of rules with extra keys, of IPv6 and
 * of what is not IP, which the verifier checks once on its own, not again on every path of
 * every caller (which would take it past its million instructions).
 */
__attribute__((noinline)) __u32 first_rule_linear(struct filter_state *st, const struct facts *f,
						  __u32 *action)
{
	struct set_key key;
	__u32 i;
	int takes;

	if (!st || !f || !action)
		return COUNTER_DEFAULT;
	for (i = 0; i < LINEAR_RULES; i++) {
		struct rule *r = rule_at(st, i);

		if (!r)
			break;
		if (sets_failed(r, f, &key))
			continue;
		takes = rule_takes(r, f);
		if (takes != TAKES_NOT)
			return taken(r, i, takes, action);
	}
	*action = st->config.default_action;
	return COUNTER_DEFAULT;
}

/* The first rule a packet matches, walked or looked up by vectors. */
static __always_inline __u32 first_rule(struct filter_state *st, const struct facts *f,
					__u32 *action)
{
	if (st->config.rule_count > LINEAR_RULES)
		return first_rule_vectors(st, f, action);
	return first_rule_linear(st, f, action);
}

/*
 * Reads the TCP, UDP or ICMP header's fields at l4 (`len` bytes as the IP header says) into
 * `f`; -1 when it is cut short before what the rules may compare.
 */
static __always_inline int read_l4(struct facts *f, void *l4, void *end, __u32 len)
{
	__u8 *b = l4;

	if (f->proto == IPPROTO_UDP) {
		if ((void *)(b + 4) > end || len < 4)
			return -1;
	} else if (f->proto == IPPROTO_TCP) {
		if ((void *)(b + 14) > end || len < 14)
			return -1;
		f->tcp_flags = b[13];
	} else if (f->proto == IPPROTO_ICMP || f->proto == IPPROTO_ICMPV6) {
		if ((void *)(b + 2) > end || len < 2)
			return -1;
		f->icmp_type = b[0];
		f->icmp_code = b[1];
		return 0;
	} else {
		return 0;
	}
	f->sport = bpf_ntohs(*(__u16 *)b);
	f->dport = bpf_ntohs(*(__u16 *)(b + 2));
	return 0;
}

/*
 * A forward whose checksum the sender left partial goes to user space instead, counted
 * there and not here (see the top of this file).
 */
static __always_inline __u32 settle_partial(__u32 *hit, __u32 action, void *l4, void *end,
					    __u8 proto, __u16 *addrs, int words, __u32 l4_len)
{
	if (action == ACTION_FORWARD && l4 && addrs &&
	    partial_csum(l4, end, proto, addrs, words, l4_len)) {
		*hit = COUNTER_PARTIAL_CSUM;
		return ACTION_REDIRECT;
	}
	return action;
}

/*
 * An IPv4 packet's fate on the general path (tagged, options, fragments, not TCP or UDP, or a
 * rule with extra keys); -1 when it is unclassifiable. Its rules are walked by the global
 * first_rule, so that the verifier walks no rule loop in decide_other's paths.
 */
static __always_inline int decide_ipv4(struct xdp_md *ctx, struct filter_state *st, struct iphdr *ip,
				       void *end, __u32 room, __u64 pkt_len, __u16 vlan, __u32 *why)
{
	struct facts *f = facts_of(4, vlan);
	__u32 hl, total, hit, action;
	void *l4 = 0;

	if (!f || (void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
		return -1;
	hl = ip->ihl * 4;
	if ((void *)ip + hl > end)
		return -1;
	total = bpf_ntohs(ip->tot_len);
	if (total < hl || total > room)
		return -1;
	f->proto = ip->protocol;
	f->later = (ip->frag_off & bpf_htons(0x1fff)) != 0;
	f->ip_len = total;
	f->src[0] = ip->saddr;
	f->dst[0] = ip->daddr;
	f->tracked = track_packet(4, f->src, f->dst);
	/* The TCP, UDP or ICMP header only in the first fragment. */
	if (!f->later) {
		l4 = (void *)ip + hl;
		if (read_l4(f, l4, end, total - hl) < 0)
			return -1;
	}
	hit = first_rule(st, f, &action);
	if (hit == PORTS_UNKNOWN)
		return -1;
	action = police(st, &hit, action, pkt_len, 4, f->src);
	/* A checksum spans the whole datagram: none in any fragment. */
	if (action == ACTION_FORWARD && !(ip->frag_off & bpf_htons(0x3fff)))
		action = settle_partial(&hit, action, l4, end, ip->protocol, (__u16 *)&ip->saddr,
					4, total - hl);
	return settle(ctx, st, why, hit, action, pkt_len);
}

/*
 * An IPv6 packet's fate, as decide_ipv4's; one with extension headers goes to user space,
 * undecided.
 */
static __always_inline int decide_ipv6(struct xdp_md *ctx, struct filter_state *st,
				       struct ipv6hdr *ip6, void *end, __u32 room, __u64 pkt_len,
				       __u16 vlan, __u32 *why)
{
	struct facts *f = facts_of(6, vlan);
	__u32 plen, hit, action;
	__u8 proto;
	void *l4 = ip6 + 1;

	if (!f || (void *)(ip6 + 1) > end || ip6->version != 6)
		return -1;
	plen = bpf_ntohs(ip6->payload_len);
	if (plen == 0 || 40 + plen > room)
		return -1;
	proto = ip6->nexthdr;
	if (proto == 0 || proto == 43 || proto == 44 || proto == 51 || proto == 60) {
		*why = COUNTER_UNDECIDED;
		count(COUNTER_UNDECIDED, pkt_len);
		return to_socket(ctx, st, pkt_len, NOT_TOLD);
	}
	f->proto = proto;
	if (read_l4(f, l4, end, plen) < 0)
		return -1;
	f->ip_len = 40 + plen > 0xffff ? 0xffff : 40 + plen;
	__builtin_memcpy(f->src, &ip6->saddr, 16);
	__builtin_memcpy(f->dst, &ip6->daddr, 16);
	f->tracked = track_packet(6, f->src, f->dst);
	hit = first_rule(st, f, &action);
	if (hit == PORTS_UNKNOWN)
		return -1;
	action = police(st, &hit, action, pkt_len, 6, f->src);
	action = settle_partial(&hit, action, l4, end, proto, (__u16 *)&ip6->saddr, 16, plen);
	return settle(ctx, st, why, hit, action, pkt_len);
}

/*
 * decide_plain's forward: the partial checksum test reads the packet again, here, so that
 * the rule loop before it carries none of the addresses it needs (the compiler would keep
 * them, spilled, across the loop). Not inlined, for the same reason.
 */
static __attribute__((noinline)) int forward_plain(struct xdp_md *ctx, struct filter_state *st,
						   __u32 hit, __u64 pkt_len,
						   __u32 *why)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	__u32 action = ACTION_FORWARD;
	void *l4 = ip + 1;

	/* decide_plain has checked the bounds; the verifier needs them checked here too. */
	if (l4 <= end)
		action = settle_partial(&hit, action, l4, end, ip->protocol, (__u16 *)&ip->saddr,
					4, bpf_ntohs(ip->tot_len) - sizeof(*ip));
	return settle(ctx, st, why, hit, action, pkt_len);
}

/*
 * A plain packet at rate-limit rule `hit`: policed by its source as decide_ipv4 polices it,
 * without reading the packet again, then settled (forwarded as forward_plain does). Over the
 * rate, or with anything amiss, it is dropped: a limit fails closed. Not inlined, as
 * forward_plain.
 */
static __attribute__((noinline)) int police_plain(struct xdp_md *ctx, struct filter_state *st,
						  __u32 hit, __u64 pkt_len, __u32 *why)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct rule *r = rule_at(st, hit);
	__u32 src[1], action = ACTION_DROP;

	if (r && (void *)(ip + 1) <= end) {
		src[0] = ip->saddr;
		if (r->police == POLICE_SOURCE && blocked_ipv4(r->slot, src[0]))
			return settle(ctx, st, why, hit, ACTION_DROP, pkt_len);
		action = police(st, &hit, r->action, pkt_len, 4, src);
	}
	if (action == ACTION_FORWARD)
		return forward_plain(ctx, st, hit, pkt_len, why);
	return settle(ctx, st, why, hit, action, pkt_len);
}

/*
 * The NOTE_* of a packet decide_plain took (`total` bytes of IP packet at `ip`): what user
 * space's reading of the commonest packet would find (PacketKey's plain_ipv4: TCP's and
 * UDP's whole headers, the frame holding what the IP header claims), said beside its rule.
 */
static __always_inline __u64 plain_note(void *data, void *end, struct iphdr *ip, __u64 total)
{
	int tcp = ip->protocol == IPPROTO_TCP;
	__u16 field, pseudo;
	__u32 sum;

	if (data + PLAIN_NOTE_BYTES > end || total < sizeof(*ip) + (tcp ? 20 : 8) ||
	    sizeof(struct ethhdr) + total > (__u64)(end - data))
		return NOTE_NOTHING;
	/*
	 * partial_csum's test without its loop, summed in the packet's byte order (one's
	 * complement sums commute with the swap): the addresses' words as they lie, the
	 * protocol and the L4 length swapped to lie the same way.
	 */
	sum = (ip->saddr & 0xffff) + (ip->saddr >> 16) + (ip->daddr & 0xffff) + (ip->daddr >> 16) +
	      bpf_htons((__u16)ip->protocol) + bpf_htons((__u16)(total - sizeof(*ip)));
	pseudo = fold(sum);
	field = *(__u16 *)((void *)(ip + 1) + (tcp ? 16 : 6));
	if (field != pseudo && ((field | pseudo) != 0xffff || (field & pseudo) != 0))
		return NOTE_SETTLED;
	return tcp ? NOTE_PARTIAL_TCP : NOTE_PARTIAL_UDP;
}

/*
 * The shape most packets have, and a flood's: untagged IPv4 without options, not a fragment,
 * TCP or UDP with its ports, on an interface with no bond duties. Decided as decide_ipv4
 * decides it, in fewer instructions: -1 for any other packet, which takes the general path.
 */
static __always_inline int decide_plain(struct xdp_md *ctx, struct filter_state *st, void *data,
					void *end, __u64 pkt_len, __u32 *why)
{
	struct iphdr *ip = data + sizeof(struct ethhdr);
	__u32 hit, action;
	__u64 total, told;
	__u16 sport, dport;
	__u8 flags = 0;
	void *l4;

	l4 = ip + 1;
	/* Sets with timeouts or counters are asked on the general path alone. */
	if (xskit_tracked_sets)
		return -1;
	if (l4 + 4 > end || eth_proto(data) != bpf_htons(ETH_P_IP) || *(__u8 *)ip != 0x45 ||
	    (ip->frag_off & bpf_htons(0x3fff)) ||
	    (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return -1;
	total = bpf_ntohs(ip->tot_len);
	if (total < sizeof(*ip) + 4 || total > pkt_len - sizeof(struct ethhdr))
		return -1;
	/* TCP cut short before its flags: the general path reads the packet again and decides. */
	if (ip->protocol == IPPROTO_TCP) {
		if (l4 + 14 > end || total < sizeof(*ip) + 14)
			return -1;
		flags = *(__u8 *)(l4 + 13);
	}
	sport = bpf_ntohs(*(__u16 *)l4);
	dport = bpf_ntohs(*(__u16 *)(l4 + 2));
	if (st->config.rule_count > LINEAR_RULES) {
		struct plain_key key = {
			.saddr = bpf_ntohl(ip->saddr),
			.daddr = bpf_ntohl(ip->daddr),
			.sport = sport,
			.dport = dport,
			.total = total,
			.proto = ip->protocol,
			.flags = flags,
		};

		hit = plain_by_vectors(st, &key, &action);
	} else
		hit = first_rule_ipv4(st, ip->protocol, ip->saddr, ip->daddr, sport, dport,
				      &action);
	/* A rule with extra keys: the general path decides. */
	if (action == UNSETTLED)
		return -1;
	if (action == POLICED)
		return police_plain(ctx, st, hit, pkt_len, why);
	if (action == ACTION_FORWARD)
		return forward_plain(ctx, st, hit, pkt_len, why);
	/* Decided by one rule, every key compared: user space may take it as told. */
	told = hit == COUNTER_DEFAULT ? st->config.rule_count : hit;
	if (action == ACTION_REDIRECT && st->config.told_tag)
		told |= (__u64)plain_note(data, end, ip, total) << 32;
	return settle_told(ctx, st, why, hit, action, pkt_len, told);
}

/*
 * The fate of a packet decide_plain does not take; `why` gets the counter that counted the
 * decision. Not inlined, so that the program's body is the plain path alone: a few cache
 * lines of code, which count when a flood shares the CPU with the kernel's receive path.
 */
static __attribute__((noinline)) int decide_other(struct xdp_md *ctx, struct filter_state *st,
						  __u32 *why)
{
	__u32 l3_off = sizeof(struct ethhdr), room, i, hit, action;
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end, *l3;
	__u64 pkt_len = PACKET_LEN(ctx, data, end);
	struct ethhdr *eth = data;
	__u16 h_proto, vlan = NO_VLAN;
	int verdict = -1;

	if (st->config.lacp && (void *)(eth + 1) <= end &&
	    eth_proto(eth) == bpf_htons(ETH_P_SLOW_PROTOCOLS)) {
		*why = COUNTER_LACP;
		count(COUNTER_LACP, pkt_len);
		return XDP_PASS;
	}
	if (st->config.arp_targets && arp_monitor(st, data, end, pkt_len)) {
		*why = COUNTER_ARP_ALIVE;
		return XDP_DROP;
	}
	if (st->config.inactive) {
		*why = COUNTER_INACTIVE;
		count(COUNTER_INACTIVE, pkt_len);
		return XDP_DROP;
	}
	if ((void *)(eth + 1) > end)
		goto unclassifiable;
	h_proto = eth_proto(eth);
	l3 = eth + 1;
	for (i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_tag *tag = l3;

		if (h_proto != bpf_htons(ETH_P_8021Q) && h_proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(tag + 1) > end)
			goto unclassifiable;
		if (i == 0)
			vlan = bpf_ntohs(tag->tci) & 0x0fff;
		h_proto = tag->proto;
		l3 = tag + 1;
		l3_off += sizeof(*tag);
	}
	if (h_proto == bpf_htons(ETH_P_8021Q) || h_proto == bpf_htons(ETH_P_8021AD))
		goto unclassifiable;
	/* Bytes the IP packet may claim: the rest of the packet, in every buffer. */
	room = pkt_len - l3_off;
	if (h_proto == bpf_htons(ETH_P_IP))
		verdict = decide_ipv4(ctx, st, l3, end, room, pkt_len, vlan, why);
	else if (h_proto == bpf_htons(ETH_P_IPV6))
		verdict = decide_ipv6(ctx, st, l3, end, room, pkt_len, vlan, why);
	else {
		/* Not IP: no family, protocol, address, port or length to match but "any". */
		struct facts *f = facts_of(0, vlan);

		if (!f)
			goto unclassifiable;
		hit = first_rule(st, f, &action);
		if (hit == PORTS_UNKNOWN)
			goto unclassifiable;
		action = police(st, &hit, action, pkt_len, 0, f->src);
		return settle(ctx, st, why, hit, action, pkt_len);
	}
	if (verdict >= 0)
		return verdict;

unclassifiable:
	return settle(ctx, st, why, COUNTER_UNCLASSIFIABLE, st->config.unclassifiable_action, pkt_len);
}

/* Decides a packet's fate; `why` gets the counter that counted the decision. */
static __always_inline int decide(struct xdp_md *ctx, __u32 *why)
{
	__u32 table = xskit_table_in_force & 1;
	struct filter_state *st;
	int verdict;

	/*
	 * The lookup first: the packet's pointers read after it need no saving across it. The
	 * table set is read once: every later lookup follows st->config.table.
	 */
	st = bpf_map_lookup_elem(&state, &table);
	/* An array's slot is always there; were it not, nothing undecided goes through. */
	if (!st)
		return XDP_DROP;
	if (!st->config.duties) {
		void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;

		verdict = decide_plain(ctx, st, data, end, PACKET_LEN(ctx, data, end), why);
		if (verdict >= 0)
			return verdict;
	}
	return decide_other(ctx, st, why);
}

#ifdef XSKIT_FRAGS
SEC("xdp.frags")
int xskit_filter_frags(struct xdp_md *ctx)
#else
SEC("xdp")
int xskit_filter(struct xdp_md *ctx)
#endif
{
	__u32 why = XSKIT_CAPTURE_NONE;
	int verdict = decide(ctx, &why);

	/* After the decision, so a capture says what became of the packet and why. */
	xskit_capture_hook(ctx, verdict, why);
	return verdict;
}

char _license[] SEC("license") = "Dual BSD/GPL";
