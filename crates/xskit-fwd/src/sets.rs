//! Named sets of IPv4 and IPv6 prefixes (`[[set]]` in a rules file, `src = "@NAME"` in a
//! rule): read from a list of prefixes, kept as sorted disjoint address ranges that a lookup
//! searches in O(log n), and laid out for the kernel as a two-bit table of IPv4 /24 blocks
//! (one load decides an address in a /24 the set holds whole or not at all), a bitmap of the
//! 256 addresses of each /24 it holds in part (found by a rank: the table word's count of
//! partial /24s before it, plus those before the /24 in the word), and a trie for IPv6.

use std::net::IpAddr;
use std::ops::RangeInclusive;

use crate::abi::{Block, PORT_SET_WORDS, SET_BLOCK_WORDS};
use crate::prefix::Prefix;

/// Prefixes one set holds at most, counted as written (before duplicates are merged).
pub const MAX_SET_PREFIXES: usize = 1 << 22;

/// The largest set file read: 4 Mi prefixes with a comment on each line fit.
pub const MAX_SET_FILE_BYTES: u64 = 128 << 20;

/// Kernel memory the set tables of one filter take at most, estimated before loading.
pub const MAX_SET_KERNEL_BYTES: u64 = 1 << 30;

/// A set file's prefixes with their 1-based lines: one prefix or address a line; `#` and
/// `;` start a comment; blank lines are skipped.
fn set_file_items(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let content = line.split(['#', ';']).next().unwrap_or("").trim();
        (!content.is_empty()).then_some((i + 1, content))
    })
}

/// The first address of each prefix a set file writes, in the file's order, duplicates kept
/// (a prefix written with host bits set gives its network's first address): what the
/// generator's `--src-list` sends from, so a flood's sources are spread over a set.
pub fn first_addresses(text: &str) -> Result<Vec<IpAddr>, SetLineError> {
    set_file_items(text)
        .map(|(line, item)| {
            Prefix::parse_lenient(item)
                .map(|(prefix, _)| prefix.network())
                .map_err(|message| SetLineError { line, message })
        })
        .collect()
}

/// A named set of prefixes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixSet {
    name: String,
    /// Disjoint, sorted, merged inclusive ranges of IPv4 addresses.
    v4: Vec<(u32, u32)>,
    /// Likewise for IPv6.
    v6: Vec<(u128, u128)>,
    stats: SetStats,
}

/// What reading a set found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetStats {
    /// Prefixes written (addresses count as host prefixes).
    pub prefixes: usize,
    /// Of those, IPv6.
    pub ipv6: usize,
    /// Written with host bits set, and taken as their network (`10.0.0.1/8` as `10.0.0.0/8`).
    pub normalised: usize,
    /// Duplicates, or inside another prefix of the set: they add nothing.
    pub covered: usize,
}

/// A line of a set that is not a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetLineError {
    /// 1-based line (for inline prefixes, 1-based position in the list).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The set's entries as the kernel filter holds them: [`PrefixSet::kernel_layout`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetLayout {
    /// The set's /24 block table ([`SET_BLOCK_WORDS`] words), or empty when the set holds no
    /// IPv4 prefix (all [`Block::Out`]).
    pub blocks: Vec<u64>,
    /// The /24s the set holds in part ([`Block::Partial`]), ascending: the /24's number
    /// (its first address >> 8) and a bit for each of its 256 addresses (bit `a & 63` of word
    /// `(a & 255) >> 6` for address `a`).
    pub partial: Vec<(u32, [u64; 4])>,
    /// For each word of `blocks`, how many partial /24s the words before it hold: the index
    /// in `partial` of the word's first ([`partial_rank`] finds the others). Empty with
    /// `blocks`.
    pub ranks: Vec<u32>,
    /// The IPv6 ranges as trie prefixes: (address, length).
    pub trie: Vec<([u8; 16], u8)>,
}

impl PrefixSet {
    /// A set of the prefixes in `items`, each with the line it came from.
    pub fn from_items<'a>(
        name: &str,
        items: impl IntoIterator<Item = (usize, &'a str)>,
    ) -> Result<Self, SetLineError> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let mut stats = SetStats::default();
        for (line, item) in items {
            if stats.prefixes == MAX_SET_PREFIXES {
                return Err(SetLineError {
                    line,
                    message: format!(
                        "more than {MAX_SET_PREFIXES} prefixes: split the set, or merge its \
                         prefixes"
                    ),
                });
            }
            let (prefix, normalised) =
                Prefix::parse_lenient(item).map_err(|message| SetLineError { line, message })?;
            stats.prefixes += 1;
            stats.normalised += usize::from(normalised);
            let (lo, hi) = prefix.range();
            if prefix.family() == 4 {
                v4.push(((lo >> 96) as u32, (hi >> 96) as u32));
            } else {
                stats.ipv6 += 1;
                v6.push((lo, hi));
            }
        }
        stats.covered = merge(&mut v4) + merge(&mut v6);
        Ok(PrefixSet {
            name: name.to_string(),
            v4,
            v6,
            stats,
        })
    }

    /// A set read from a file's text: one prefix or address a line; `#` and `;` start a
    /// comment (Spamhaus's lists put `; SBL...` after each prefix); blank lines are skipped.
    pub fn parse(name: &str, text: &str) -> Result<Self, SetLineError> {
        Self::from_items(name, set_file_items(text))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What reading it found.
    pub fn stats(&self) -> SetStats {
        self.stats
    }

    /// True if the address `addr` of `family` (a key's 16 bytes as a big-endian number, IPv4
    /// in the first 4) is in the set; never for family 0 (not IP).
    #[inline]
    pub fn contains(&self, family: u8, addr: u128) -> bool {
        match family {
            4 => find(&self.v4, (addr >> 96) as u32),
            6 => find(&self.v6, addr),
            _ => false,
        }
    }

    /// True if it holds IPv4 prefixes (the kernel gives it a /24 block table).
    pub fn has_ipv4(&self) -> bool {
        !self.v4.is_empty()
    }

    /// How many /24s it holds in part, and how many IPv6 trie prefixes it takes: the sizes of
    /// its kernel tables beside its block table.
    pub fn kernel_entries(&self) -> (usize, usize) {
        let mut partial = 0;
        let mut last = None;
        self.walk_ipv4(|block, state, _| {
            if state == Block::Partial && last != Some(block) {
                partial += 1;
                last = Some(block);
            }
        });
        let trie = self
            .v6
            .iter()
            .map(|&(lo, hi)| cidrs(lo..=hi, 128).len())
            .sum();
        (partial, trie)
    }

    /// The set as the kernel holds it.
    pub fn kernel_layout(&self) -> SetLayout {
        let mut layout = SetLayout::default();
        if self.has_ipv4() {
            layout.blocks = vec![0; SET_BLOCK_WORDS];
        }
        self.walk_ipv4(|block, state, bits| {
            layout.blocks[(block >> 5) as usize] |= (state as u64) << ((block & 31) * 2);
            if state != Block::Partial {
                return;
            }
            // A /24 two ranges reach follows the first: the ranges are sorted.
            match layout.partial.last_mut() {
                Some((b, words)) if *b == block => {
                    words.iter_mut().zip(bits).for_each(|(w, n)| *w |= n);
                }
                _ => layout.partial.push((block, bits)),
            }
        });
        for &(lo, hi) in &self.v6 {
            for (addr, len) in cidrs(lo..=hi, 128) {
                layout.trie.push((addr.to_be_bytes(), len));
            }
        }
        let mut before = 0u32;
        layout.ranks = layout
            .blocks
            .iter()
            .map(|&word| {
                let rank = before;
                before += partial_rank(word, 32);
                rank
            })
            .collect();
        layout
    }

    /// Calls `f` with every /24 that holds set addresses, its state, and for a partial one
    /// the bits of the addresses one range puts in it.
    fn walk_ipv4(&self, mut f: impl FnMut(u32, Block, [u64; 4])) {
        for &(lo, hi) in &self.v4 {
            for b in (lo >> 8)..=(hi >> 8) {
                let (first, last) = (b << 8, b << 8 | 0xff);
                if lo <= first && last <= hi {
                    f(b, Block::Full, [0; 4]);
                    continue;
                }
                let mut bits = [0u64; 4];
                for a in lo.max(first)..=hi.min(last) {
                    bits[(a as usize & 255) >> 6] |= 1 << (a & 63);
                }
                f(b, Block::Partial, bits);
            }
        }
    }
}

/// A named set of TCP or UDP ports: a bit for each of the 65,536, as the kernel holds it too.
#[derive(Clone, PartialEq, Eq)]
pub struct PortSet {
    name: String,
    bits: Box<[u64; PORT_SET_WORDS]>,
}

impl std::fmt::Debug for PortSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortSet")
            .field("name", &self.name)
            .field("ports", &self.len())
            .finish()
    }
}

impl PortSet {
    /// The ports of the inclusive `ranges`.
    pub fn from_ranges(name: &str, ranges: &[(u16, u16)]) -> Self {
        let mut bits = Box::new([0u64; PORT_SET_WORDS]);
        for &(lo, hi) in ranges {
            for p in lo..=hi {
                bits[usize::from(p >> 6)] |= 1 << (p & 63);
            }
        }
        PortSet {
            name: name.to_string(),
            bits,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many ports it holds.
    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when it holds no port.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if `port` is in the set.
    #[inline]
    pub fn contains(&self, port: u16) -> bool {
        self.bits[usize::from(port >> 6)] >> (port & 63) & 1 == 1
    }

    /// The bitmap the kernel holds: bit `p & 63` of word `p >> 6` for port `p`.
    pub fn words(&self) -> &[u64; PORT_SET_WORDS] {
        &self.bits
    }
}

/// How many of the first `slot` /24s of a block table word are [`Block::Partial`]: the two
/// bits of a partial /24 are `10`. The XDP program counts the same way (`in_set4`).
pub(crate) fn partial_rank(word: u64, slot: u32) -> u32 {
    let below = match slot {
        32.. => word,
        _ => word & ((1u64 << (slot * 2)) - 1),
    };
    ((below >> 1) & !below & 0x5555_5555_5555_5555).count_ones()
}

/// Sorts and merges overlapping or adjacent ranges; returns how many prefixes added nothing
/// (duplicates, or inside another: prefixes either nest or are apart).
fn merge<T: Copy + Ord + num_like::Step>(ranges: &mut Vec<(T, T)>) -> usize {
    ranges.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut covered = 0;
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for &(lo, hi) in ranges.iter() {
        match out.last_mut() {
            Some(last) if hi <= last.1 => covered += 1,
            Some(last) if last.1.next() == Some(lo) => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    *ranges = out;
    covered
}

/// True if `a` is in one of the sorted disjoint `ranges`.
#[inline]
fn find<T: Copy + Ord>(ranges: &[(T, T)], a: T) -> bool {
    let i = ranges.partition_point(|r| r.1 < a);
    ranges.get(i).is_some_and(|r| r.0 <= a)
}

/// The fewest prefixes that cover `span` of a `width`-bit address space exactly, as
/// (address, length).
fn cidrs(span: RangeInclusive<u128>, width: u32) -> Vec<(u128, u8)> {
    let (mut lo, hi) = (*span.start(), *span.end());
    let mut out = Vec::new();
    loop {
        // The largest aligned block at `lo` that ends by `hi`.
        let mut bits = if lo == 0 {
            width
        } else {
            lo.trailing_zeros().min(width)
        };
        let last = |bits: u32| lo | u128::MAX.checked_shr(128 - bits).unwrap_or(0);
        while last(bits) > hi {
            bits -= 1;
        }
        out.push((lo, (width - bits) as u8));
        if last(bits) >= hi {
            return out;
        }
        lo = last(bits) + 1;
    }
}

/// The successor of an address, for merging adjacent ranges.
mod num_like {
    pub(super) trait Step: Sized {
        fn next(self) -> Option<Self>;
    }
    impl Step for u32 {
        fn next(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
    impl Step for u128 {
        fn next(self) -> Option<Self> {
            self.checked_add(1)
        }
    }
}

/// The kernel memory sets would take, estimated before loading: a /24 block table and its
/// ranks per set (8 bytes a word each), a 32-byte bitmap per /24 held in part, and IPv6 trie
/// nodes (an entry and about one inner node each).
pub fn kernel_bytes(block_tables: usize, partial_blocks: usize, trie_entries: usize) -> u64 {
    const TRIE_ENTRY_BYTES: u64 = 2 * 96;
    block_tables as u64 * SET_BLOCK_WORDS as u64 * 16
        + partial_blocks as u64 * 32
        + trie_entries as u64 * TRIE_ENTRY_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> PrefixSet {
        PrefixSet::parse("s", text).unwrap()
    }

    fn v4(a: &str) -> u128 {
        u128::from(u32::from(a.parse::<std::net::Ipv4Addr>().unwrap())) << 96
    }

    #[test]
    fn comments_blank_lines_and_spamhaus_lines_are_read() {
        let s = set("; Spamhaus DROP\n\n1.10.16.0/20 ; SBL256894\n  # note\n203.0.113.7\n");
        assert_eq!(s.stats().prefixes, 2);
        assert!(s.contains(4, v4("1.10.31.255")));
        assert!(!s.contains(4, v4("1.10.32.0")));
        assert!(s.contains(4, v4("203.0.113.7")));
        assert!(!s.contains(4, v4("203.0.113.8")));
        assert!(!s.contains(0, v4("203.0.113.7")));
        assert!(!s.contains(6, v4("203.0.113.7")));
    }

    #[test]
    fn host_bits_are_normalised_and_duplicates_counted() {
        let s = set("10.0.0.1/8\n10.0.0.0/8\n10.1.0.0/16\n2001:db8::1/32\n");
        let stats = s.stats();
        assert_eq!((stats.prefixes, stats.ipv6), (4, 1));
        assert_eq!((stats.normalised, stats.covered), (2, 2));
        assert!(s.contains(4, v4("10.255.0.1")));
        let a6: std::net::Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
        assert!(s.contains(6, u128::from(a6)));
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = PrefixSet::parse("s", "10.0.0.0/8\n\n10.0.0.300\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("10.0.0.300"), "{}", e.message);
        let e = PrefixSet::parse("s", "\0\0garbage").unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn a_port_set_holds_its_ranges() {
        let s = PortSet::from_ranges("p", &[(53, 53), (1900, 1901), (65535, 65535), (0, 0)]);
        assert_eq!(s.len(), 5);
        for p in [0, 53, 1900, 1901, 65535] {
            assert!(s.contains(p), "{p}");
        }
        for p in [1, 52, 54, 1899, 1902, 65534] {
            assert!(!s.contains(p), "{p}");
        }
    }

    #[test]
    fn cidrs_cover_a_range_exactly() {
        assert_eq!(cidrs(0..=u128::from(u32::MAX), 32), vec![(0, 0)]);
        assert_eq!(cidrs(0..=u128::MAX, 128), vec![(0, 0)]);
        assert_eq!(cidrs(5..=5, 32), vec![(5, 32)]);
        assert_eq!(cidrs(1..=6, 32), vec![(1, 32), (2, 31), (4, 31), (6, 32)]);
    }

    /// Every address of a few /24s: the layout's table and bitmaps say what `contains` says.
    #[test]
    fn the_kernel_layout_agrees_with_contains() {
        let s =
            set("198.51.100.0/25\n198.51.100.200/30\n198.51.100.255\n203.0.113.0/23\n10.0.0.0/8\n");
        let layout = s.kernel_layout();
        // As the XDP program looks: the block's state, then the rank of a partial block.
        let in_layout = |a: u32| {
            let (block, word) = (a >> 8, (a >> 13) as usize);
            let state = layout.blocks[word] >> ((block & 31) * 2) & 3;
            if state != Block::Partial as u64 {
                return state == Block::Full as u64;
            }
            let index = layout.ranks[word] + partial_rank(layout.blocks[word], block & 31);
            let (b, bits) = layout.partial[index as usize];
            assert_eq!(b, block, "the rank finds the /24's own bitmap");
            bits[(a as usize & 255) >> 6] >> (a & 63) & 1 == 1
        };
        for base in [
            "198.51.100.0",
            "198.51.101.0",
            "203.0.113.0",
            "203.0.114.0",
            "10.9.9.0",
        ] {
            let base = u32::from(base.parse::<std::net::Ipv4Addr>().unwrap());
            for a in base..base + 256 {
                assert_eq!(in_layout(a), s.contains(4, u128::from(a) << 96), "{a:#x}");
            }
        }
        // Only 198.51.100/24 is held in part, by three ranges: one bitmap.
        assert_eq!(layout.partial.len(), 1);
        assert_eq!(s.kernel_entries(), (1, 0));
    }

    /// Many partial /24s in one table word and across words: each address finds its own
    /// /24's bitmap by rank.
    #[test]
    fn ranks_find_every_partial_block() {
        let text: String = (0..96u32)
            .filter(|i| i % 3 != 1)
            .map(|i| format!("10.0.{i}.7\n10.0.{i}.200/29\n"))
            .chain(["10.0.1.0/24\n".to_string()])
            .collect();
        let s = set(&text);
        let layout = s.kernel_layout();
        assert_eq!(layout.partial.len(), 64);
        for (i, &(block, _)) in layout.partial.iter().enumerate() {
            let word = (block >> 5) as usize;
            let rank = layout.ranks[word] + partial_rank(layout.blocks[word], block & 31);
            assert_eq!(rank as usize, i, "block {block:#x}");
        }
        assert_eq!(partial_rank(0b10_01_10_00, 4), 2);
        assert_eq!(partial_rank(0b10_01_10_00, 2), 1);
        assert_eq!(partial_rank(u64::MAX, 32), 0);
    }
}
