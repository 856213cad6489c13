//! The kernel filter's interface with user space, defined once. `build.rs` compiles this file
//! too and writes [`c_header`] as `xdp_filter_abi.h`, which `bpf/xdp_filter.c` includes; the
//! crate reads the same definitions. A slot or action added here reaches both sides.

/// Rules the kernel filter holds at most: a power of two, which the program masks indices
/// with.
pub const MAX_RULES: usize = 4096;
const _: () = assert!(MAX_RULES.is_power_of_two());

/// Slots of per-rule state (counters, rate limits, per-source keys): a rule keeps its slot by
/// name while the rules change, and twice the rules, so that a new rule always finds a slot
/// that no rule of the table in force is using.
pub const RULE_SLOTS: usize = 2 * MAX_RULES;
const _: () = assert!(RULE_SLOTS <= u16::MAX as usize + 1);

/// Bytes of the filter's state (its configuration and rules, padded): a power of two, so
/// that the program finds a table set's state with a shift.
pub const STATE_BYTES: usize = 1 << 19;
const _: () = assert!(STATE_BYTES.is_power_of_two());

/// Rule sets up to this long are walked rule by rule; longer ones are looked up in bit
/// vectors ([`Field`]), whose cost hardly grows with the rules.
pub const LINEAR_RULES: usize = 8;

/// Bytes the filter writes in front of a packet it redirects to user space while it tells
/// its decisions (`src/told.rs`): the rule that decided the packet (its index, the
/// default's `rule_count`, or [`NOT_TOLD`]), a [`TellNote`] on its headers (32 bits), and
/// the tag of the filter's interface and rules, last, next to the packet.
pub const TOLD_LEN: usize = 16;

/// The rule word of a packet the filter did not decide by one rule alone.
pub const NOT_TOLD: u32 = u32::MAX;

/// 64-bit words of a rule bit vector: a bit for each rule, rule `i` in bit `i % 64` of word
/// `i / 64`. A vector's summary word has bit `w` set when word `w` is not zero.
pub const VECTOR_WORDS: usize = MAX_RULES / 64;
const _: () = assert!(VECTOR_WORDS <= 64 && VECTOR_WORDS.is_power_of_two());

/// ARP monitor targets the filter's table holds (Linux's `BOND_MAX_ARP_TARGETS`).
pub const MAX_ARP_TARGETS: usize = 16;

/// Members of the other side's bond the filter forwards to at most (`xskit_bond::MAX_MEMBERS`).
pub const MAX_MEMBERS: usize = 8;

/// VLAN tags the filter walks past before it gives up on a frame as unclassifiable.
pub const MAX_VLAN_TAGS: usize = 2;

/// An enum numbered from 0 in declaration order, each value with its name in the C header
/// and a description (its doc, and what a capture comment says).
macro_rules! c_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident ($prefix:literal) {
        $($variant:ident = $c:literal, $text:literal;)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u32)]
        $vis enum $name {
            $(#[doc = $text] $variant,)*
        }

        #[allow(dead_code)]
        impl $name {
            /// Every value, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Its name in the C header.
            pub const fn c_name(self) -> &'static str {
                match self {
                    $($name::$variant => concat!($prefix, $c),)*
                }
            }

            /// What it is, in words.
            pub const fn describe(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value at `index`, if there is one.
            pub fn from_index(index: u32) -> Option<$name> {
                Self::ALL.get(usize::try_from(index).ok()?).copied()
            }
        }
    };
}

c_enum! {
    /// What the filter, having read a told packet's headers, tells of them: what user space's
    /// reading of the commonest packet (an untagged IPv4 packet without options, not a
    /// fragment, TCP or UDP with its whole header, in a frame of at least
    /// [`PLAIN_NOTE_BYTES`] that holds all the IP packet claims) would find, so that a
    /// worker taking the rule as told need not read them again.
    pub enum TellNote ("NOTE_") {
        Nothing = "NOTHING", "not such a packet, or not said: user space reads it";
        Settled = "SETTLED", "such a packet, its TCP or UDP checksum complete";
        PartialUdp = "PARTIAL_UDP", "such a UDP packet, its checksum the pseudo-header's sum alone";
        PartialTcp = "PARTIAL_TCP", "such a TCP packet, its checksum the pseudo-header's sum alone";
    }
}

/// The bytes a frame has at least for a [`TellNote`] other than `Nothing`: Ethernet, IPv4
/// and TCP headers, which user space reads in one piece.
pub const PLAIN_NOTE_BYTES: usize = 14 + 20 + 20;

c_enum! {
    /// What the kernel filter does with a packet a rule (or the default) matched.
    pub enum Action ("ACTION_") {
        Pass = "PASS", "hand it to the kernel stack";
        Drop = "DROP", "drop it";
        Redirect = "REDIRECT", "redirect it to its queue's AF_XDP socket (dropped and counted if there is none)";
        Forward = "FORWARD", "transmit it out of the other side in XDP, without user space";
    }
}

c_enum! {
    /// The filter's decisions past the rules' ([`Slot::index`] is MAX_RULES and up, as the
    /// filter tells why it decided; [`Slot::counter`], after the rules' slots, is where it
    /// counts them): the default's, then those that count what no rule decided.
    pub enum Slot ("COUNTER_") {
        Default = "DEFAULT", "the default";
        Undecided = "UNDECIDED", "IPv6 extension headers (user space decides)";
        PartialCsum = "PARTIAL_CSUM", "a partial checksum (finished in user space, then forwarded)";
        Unclassifiable = "UNCLASSIFIABLE", "unclassifiable";
        NoMember = "NO_MEMBER", "no member of the other side's bond up";
        Inactive = "INACTIVE", "arrived on a bond member that is not collecting";
        ArpAlive = "ARP_ALIVE", "the ARP monitor's reply";
        Lacp = "LACP", "LACP (802.3ad), to the kernel's socket";
        WithinRate = "WITHIN_RATE", "within a rate-limit rule's rate, to user space to be forwarded";
        NoSocket = "NO_SOCKET", "no AF_XDP socket on its queue to take it (the forwarder starting or stopping): dropped";
    }
}

c_enum! {
    /// The slots of the filter's `tx_bond` settings: how the other side spreads what is
    /// forwarded to it in XDP.
    pub enum TxSetting ("TX_") {
        Mode = "MODE", "a TxMode";
        Policy = "POLICY", "an xskit_xmit_policy, for TX_XOR";
        Usable = "USABLE", "usable members: tx_ports slots 0 .. USABLE-1";
        Active = "ACTIVE", "the slot to use, for TX_ONE";
        RrPer = "RR_PER", "packets per member, for TX_RR (0 counts as 1)";
    }
}

c_enum! {
    /// The values of [`TxSetting::Mode`].
    pub enum TxMode ("TX_") {
        One = "ONE", "one member: a plain interface, or active-backup's active";
        Xor = "XOR", "balance-xor: the member the transmit hash picks";
        Rr = "RR", "balance-rr: members in turn";
    }
}

c_enum! {
    /// The keys a kernel rule names beyond addresses, protocol and ports, each a bit of its
    /// `extra` byte ([`Extra::bit`]): the program compares them only where the bit is set.
    pub enum Extra ("EXTRA_") {
        Vlan = "VLAN", "the outer tag's VLAN ID";
        Length = "LENGTH", "the IP length, a range";
        TcpFlags = "TCP_FLAGS", "TCP flags under a mask";
        IcmpType = "ICMP_TYPE", "the ICMP type";
        IcmpCode = "ICMP_CODE", "the ICMP code";
        SrcSet = "SRC_SET", "the source address in a set (sset)";
        DstSet = "DST_SET", "the destination address in a set (dset)";
        PortSets = "PORT_SETS", "a port in a port set (spset, dpset)";
    }
}

/// Prefix sets the rules of one filter may name.
pub const MAX_SETS: usize = 16;

/// The words of one set's block table: two bits for each of the 2^24 IPv4 /24 blocks, 32
/// blocks to a 64-bit word, at most (a set's table holds the records of its /16s read there,
/// [`RECORD_WORDS`] words each, one after another: [`Sixteen::Record`]).
pub const SET_BLOCK_WORDS: usize = 1 << 19;

/// The block table words of one /16's record: its 256 /24s.
pub const RECORD_WORDS: usize = 8;

/// The words of one set's /16 summary: two bits for each of the 2^16 IPv4 /16s, 32 to a word,
/// [`Block::Out`] or [`Block::Full`] for a /16 whose 256 /24s all are, [`Block::Partial`] for
/// any other (its entry of the set's /16 index says how to decide it). The summary (16 KiB a
/// set) stays in the caches: most addresses of a flood from spread sources over a long list
/// are decided by it alone.
pub const SET_SUMMARY_WORDS: usize = 1 << 11;

/// The entries of one set's /16 index: one 32-bit entry for each of the 2^16 IPv4 /16s, its
/// low two bits a [`Sixteen`]. An entry (256 KiB a set) decides alone an address in a /16
/// the set holds by one prefix (a flood's scattered sources, most of a published list's
/// entries), and sends the others straight to their /16's record: the block table a set's
/// /16s take is only as long as the /16s held in part in more than one prefix, so that what
/// a lookup reads stays close together.
pub const SET_SIXTEENS: usize = 1 << 16;
const _: () = assert!(SET_SIXTEENS * RECORD_WORDS == SET_BLOCK_WORDS);
const _: () = assert!(SET_SUMMARY_WORDS * 32 == SET_SIXTEENS);

/// Entries of the /16 index to a value of `set_sixteens`: a cache line.
pub const SIXTEENS_LINE: usize = 16;

c_enum! {
    /// What the low two bits of an entry of a set's /16 index say.
    pub enum Sixteen ("SIXTEEN_") {
        Out = "OUT", "no address of the /16 is in the set";
        Full = "FULL", "every address of the /16 is";
        Record = "RECORD", "its /24s are in its record: the block table's words from (entry >> 2) * RECORD_WORDS";
        One = "ONE", "one prefix of the /16 is: 16 + ((entry >> 2) & 31) bits long, its address's low half entry >> 16";
    }
}

/// The words of one port set's bitmap: a bit for each of the 65,536 ports.
pub const PORT_SET_WORDS: usize = 1 << 10;

c_enum! {
    /// What a set's block table says of one IPv4 /24: two bits of a word.
    pub enum Block ("BLOCK_") {
        Out = "OUT", "no address of the /24 is in the set";
        Full = "FULL", "every address of the /24 is in the set";
        Partial = "PARTIAL", "some are: the set's trie says which";
        Tracked = "TRACKED", "an element of a set with timeouts or counters holds some: set_elements decides";
    }
}

c_enum! {
    /// The value of an IPv6 prefix in `set_trie`.
    pub enum TrieEntry ("TRIE_") {
        Absent = "ABSENT", "not written";
        Member = "MEMBER", "the prefix is in the set";
        Tracked = "TRACKED", "an element of a set with timeouts or counters: set_elements decides";
    }
}

#[allow(dead_code)]
impl Extra {
    /// Its bit in a rule's `extra` byte.
    pub const fn bit(self) -> u8 {
        1 << self as u32
    }
}

c_enum! {
    /// A rule's `police` byte: whether it is a rate limit, and whose.
    pub enum Police ("POLICE_") {
        None = "NONE", "not a rate limit";
        Rule = "RULE", "one bucket for the rule";
        Source = "SOURCE", "a bucket for each source prefix, in source_buckets";
    }
}

/// Rate limits keep time in ticks of 2^-TICK_SHIFT ns of CLOCK_MONOTONIC (the clock of
/// `bpf_ktime_get_ns`), so that a bit's cost at 100 Gbps, 0.01 ns, is not lost to rounding,
/// and a u64 lasts 36 years of uptime.
pub const TICK_SHIFT: u32 = 4;

/// Fraction bits of a rate's cost per unit (a packet, or a bit of frame), in ticks.
pub const COST_SHIFT: u32 = 12;

/// The blocked sources' table is open-addressed: a source's entry lies in the BLOCK_PROBES
/// slots from the one its address hashes to (so the table has BLOCK_PROBES - 1 slots more
/// than those hashed to, and a probe never wraps).
pub const BLOCK_PROBES: usize = 16;

/// The multiplier of the blocked table's hash (Fibonacci hashing: the top bits of the
/// product of a source's address words and this odd constant, 2^64 over the golden ratio,
/// taken to the slots as a fraction of 2^32).
pub const BLOCK_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// A blocked table slot's `until` while a CPU writes a block into it: no source matches it.
pub const BLOCK_CLAIMED: u64 = u64::MAX;

/// A blocked table slot's `until` when its block was removed: free to take, but a lookup
/// goes on past it (only a slot never used, `until` 0, ends one).
pub const BLOCK_GONE: u64 = 1;

/// The slots a blocked table that holds `sources` hashes them to (the program's
/// `block_slots`): a quarter more, so that its probes stay short when it is full.
pub fn block_slots(sources: usize) -> usize {
    sources + sources.div_ceil(4)
}

/// What a packet without a VLAN tag has for a VLAN ID in the program: no ID is this large.
pub const NO_VLAN: u16 = 0xffff;

c_enum! {
    /// The packet fields a rule bit vector is looked up by: each has a table of
    /// [`FIELD_VALUES`] vector ids, one for each of its [`Field::domain`] values, whose vector
    /// has the bits of the rules that value satisfies. The first [`PLAIN_FIELDS`] are the
    /// program's plain path's.
    pub enum Field ("FIELD_") {
        Protocol = "PROTOCOL", "the IP protocol";
        SrcPort = "SRC_PORT", "the TCP or UDP source port (0 without one)";
        DstPort = "DST_PORT", "the destination port";
        Src4High = "SRC4_HIGH", "an IPv4 source's first 16 bits";
        Src4Low = "SRC4_LOW", "an IPv4 source's last 16 bits";
        Dst4High = "DST4_HIGH", "an IPv4 destination's first 16 bits";
        Dst4Low = "DST4_LOW", "an IPv4 destination's last 16 bits";
        TcpFlags = "TCP_FLAGS", "TCP's flag byte (0 without one)";
        Length = "LENGTH", "the IP length";
        Icmp = "ICMP", "ICMP's type << 8 | its code (0 without one)";
        Vlan = "VLAN", "the outer tag's VLAN ID; UNTAGGED_VLAN without a tag";
    }
}

/// Entries of a field's table: the largest domain's.
pub const FIELD_VALUES: usize = 1 << 16;

/// The fields of the plain path (untagged IPv4 TCP or UDP): those before [`Field::Icmp`].
pub const PLAIN_FIELDS: usize = Field::Icmp as usize;

/// [`Field::Vlan`]'s value for a frame without a tag.
pub const UNTAGGED_VLAN: usize = 4096;

#[allow(dead_code)]
impl Field {
    /// How many values it has.
    pub const fn domain(self) -> usize {
        match self {
            Field::Protocol | Field::TcpFlags => 256,
            Field::Vlan => UNTAGGED_VLAN + 1,
            _ => FIELD_VALUES,
        }
    }

    /// Where its table starts in a flat array of every field's.
    pub const fn base(self) -> usize {
        self as usize * FIELD_VALUES
    }
}

/// Entries of every field's table.
pub const FIELD_IDS: usize = Field::ALL.len() * FIELD_VALUES;

#[allow(dead_code)]
impl Field {
    /// For a plain field, where its words start in `plain_words`, whose one value (below the
    /// 4 MiB a map value may take) holds the tables of every plain field, each as long as its
    /// domain: the two of 256 values first.
    pub const fn word_base(self) -> usize {
        let mut base = 0;
        let mut i = 0;
        while i < PLAIN_FIELDS {
            let f = Field::ALL[i];
            if Self::word_order(f) < Self::word_order(self) {
                base += f.domain();
            }
            i += 1;
        }
        base
    }

    /// The plain fields' order in `plain_words`: the short ones first, so that every table
    /// starts where a bounded index reaches it.
    const fn word_order(self) -> usize {
        match self {
            Field::Protocol => 0,
            Field::TcpFlags => 1,
            other => 2 + other as usize,
        }
    }
}

/// Words of `plain_words`: every plain field's table.
pub const PLAIN_WORDS: usize = {
    let mut total = 0;
    let mut i = 0;
    while i < PLAIN_FIELDS {
        total += Field::ALL[i].domain();
        i += 1;
    }
    total
};
const _: () = assert!(
    PLAIN_WORDS * 8 <= 4 << 20,
    "a map value takes at most 4 MiB"
);

/// Rule sets of up to this many rules (a vector of one word) are looked up on the plain path
/// by the words themselves, not by vector ids.
pub const WORD_RULES: usize = 64;

#[allow(dead_code)]
impl Slot {
    /// Its decision index: what the filter tells as why it decided.
    pub const fn index(self) -> u32 {
        MAX_RULES as u32 + self as u32
    }

    /// Its index in the filter's `counters` map, after the rules' slots.
    pub const fn counter(self) -> u32 {
        RULE_SLOTS as u32 + self as u32
    }

    /// The slot at counter `index`, if it is past the rules'.
    pub fn at(index: u32) -> Option<Slot> {
        Slot::from_index(index.checked_sub(MAX_RULES as u32)?)
    }
}

/// Entries of the filter's `counters` map: the rules' slots, then every [`Slot`].
#[allow(dead_code)]
pub const COUNTERS: usize = RULE_SLOTS + Slot::ALL.len();

/// The C header `bpf/xdp_filter.c` includes.
#[allow(dead_code)]
pub fn c_header() -> String {
    let mut h = String::from(
        "/* Generated by xskit-fwd's build.rs from src/abi.rs, where these are defined. */\n\
         #pragma once\n",
    );
    let mut define = |name: &str, value: String, text: &str| {
        h.push_str(&format!("#define {name} {value}\t/* {text} */\n"));
    };
    for (name, value, text) in [
        ("MAX_RULES", MAX_RULES, "rules the filter holds"),
        (
            "RULE_SLOTS",
            RULE_SLOTS,
            "slots of per-rule state, kept by name",
        ),
        ("MAX_ARP_TARGETS", MAX_ARP_TARGETS, "ARP monitor targets"),
        ("MAX_MEMBERS", MAX_MEMBERS, "bond members"),
        ("MAX_VLAN_TAGS", MAX_VLAN_TAGS, "VLAN tags walked past"),
    ] {
        define(name, value.to_string(), text);
    }
    for a in Action::ALL {
        define(a.c_name(), (*a as u32).to_string(), a.describe());
    }
    for s in Slot::ALL {
        define(
            s.c_name(),
            format!("(MAX_RULES + {})", *s as u32),
            s.describe(),
        );
    }
    define(
        "COUNTERS",
        format!("(RULE_SLOTS + {})", Slot::ALL.len()),
        "counter slots",
    );
    for t in TxSetting::ALL {
        define(t.c_name(), (*t as u32).to_string(), t.describe());
    }
    define(
        "TX_SETTINGS",
        TxSetting::ALL.len().to_string(),
        "tx_bond's slots",
    );
    for m in TxMode::ALL {
        define(m.c_name(), (*m as u32).to_string(), m.describe());
    }
    for e in Extra::ALL {
        define(e.c_name(), format!("{:#x}", e.bit()), e.describe());
    }
    define("NO_VLAN", format!("{NO_VLAN:#x}"), "no VLAN tag");
    define("MAX_SETS", MAX_SETS.to_string(), "prefix sets");
    table_defines(&mut define);
    define(
        "PORT_SET_WORDS",
        PORT_SET_WORDS.to_string(),
        "words of a port set's bitmap",
    );
    limit_defines(&mut define);
    set_defines(&mut define);
    h
}

/// The rate limits' part of [`c_header`]: their clock, costs, kinds and blocked table.
fn limit_defines(define: &mut impl FnMut(&str, String, &str)) {
    define(
        "TICK_SHIFT",
        TICK_SHIFT.to_string(),
        "a rate's ticks: 2^-TICK_SHIFT ns",
    );
    define(
        "COST_SHIFT",
        COST_SHIFT.to_string(),
        "fraction bits of a cost per unit",
    );
    for p in Police::ALL {
        define(p.c_name(), (*p as u32).to_string(), p.describe());
    }
    define(
        "BLOCK_PROBES",
        BLOCK_PROBES.to_string(),
        "slots a blocked source may lie in",
    );
    define(
        "BLOCK_HASH",
        format!("{BLOCK_HASH:#x}ULL"),
        "the blocked table's hash multiplier",
    );
    define(
        "BLOCK_CLAIMED",
        format!("{BLOCK_CLAIMED:#x}ULL"),
        "a blocked slot being written",
    );
    define(
        "BLOCK_GONE",
        format!("{BLOCK_GONE}ULL"),
        "a blocked slot whose block was removed",
    );
}

/// The sets' part of [`c_header`]: their tables' sizes, what a /24 table's two bits, a /16
/// index entry and a trie value say.
fn set_defines(define: &mut impl FnMut(&str, String, &str)) {
    define(
        "SET_BLOCK_WORDS",
        SET_BLOCK_WORDS.to_string(),
        "words of a set's /24 block table",
    );
    define(
        "RECORD_WORDS",
        RECORD_WORDS.to_string(),
        "block table words of a /16's record",
    );
    define(
        "SET_SUMMARY_WORDS",
        SET_SUMMARY_WORDS.to_string(),
        "words of a set's /16 summary",
    );
    define(
        "SIXTEENS_LINE",
        SIXTEENS_LINE.to_string(),
        "/16 index entries to a value of set_sixteens",
    );
    define(
        "SET_SIXTEENS",
        SET_SIXTEENS.to_string(),
        "entries of a set's /16 index",
    );
    for b in Block::ALL {
        define(b.c_name(), (*b as u32).to_string(), b.describe());
    }
    for t in TrieEntry::ALL {
        define(t.c_name(), (*t as u32).to_string(), t.describe());
    }
    for k in Sixteen::ALL {
        define(k.c_name(), (*k as u32).to_string(), k.describe());
    }
}

/// The rule tables' part of [`c_header`]: the state's size and the rule vectors'.
fn table_defines(define: &mut impl FnMut(&str, String, &str)) {
    define(
        "STATE_BYTES",
        STATE_BYTES.to_string(),
        "bytes of the filter's state",
    );
    define(
        "LINEAR_RULES",
        LINEAR_RULES.to_string(),
        "rules walked one by one",
    );
    define(
        "TOLD_LEN",
        TOLD_LEN.to_string(),
        "bytes of a decision told in front of a packet",
    );
    define("NOT_TOLD", format!("{NOT_TOLD}U"), "no rule told");
    for n in TellNote::ALL {
        define(n.c_name(), (*n as u32).to_string(), n.describe());
    }
    define(
        "PLAIN_NOTE_BYTES",
        PLAIN_NOTE_BYTES.to_string(),
        "bytes of a frame a note other than NOTE_NOTHING needs",
    );
    define(
        "VECTOR_WORDS",
        VECTOR_WORDS.to_string(),
        "words of a rule bit vector",
    );
    for f in Field::ALL {
        define(f.c_name(), (*f as u32).to_string(), f.describe());
    }
    define(
        "FIELDS",
        Field::ALL.len().to_string(),
        "fields with vector tables",
    );
    define(
        "PLAIN_FIELDS",
        PLAIN_FIELDS.to_string(),
        "the plain path's fields",
    );
    define(
        "FIELD_VALUES",
        FIELD_VALUES.to_string(),
        "entries of a field's table",
    );
    for f in &Field::ALL[..PLAIN_FIELDS] {
        define(
            &format!("WORDS_{}", &f.c_name()["FIELD_".len()..]),
            f.word_base().to_string(),
            "where the field's words start in plain_words",
        );
    }
    define(
        "PLAIN_WORDS",
        PLAIN_WORDS.to_string(),
        "words of plain_words",
    );
    define(
        "WORD_RULES",
        WORD_RULES.to_string(),
        "rules looked up by words on the plain path",
    );
    define(
        "UNTAGGED_VLAN",
        UNTAGGED_VLAN.to_string(),
        "FIELD_VLAN's value without a tag",
    );
}
