//! Named sets of IPv4 and IPv6 prefixes (`[[set]]` in a rules file, `src = "@NAME"` in a
//! rule): read from a list of prefixes, kept as sorted disjoint address ranges that a lookup
//! searches in O(log n), and laid out for the kernel as a two-bit table of IPv4 /24 blocks
//! (one load decides most addresses) beside a trie of what lies below a /24 and of IPv6.

use std::ops::RangeInclusive;

use crate::abi::{Block, SET_BLOCK_WORDS};
use crate::prefix::Prefix;

/// Prefixes one set holds at most, counted as written (before duplicates are merged).
pub const MAX_SET_PREFIXES: usize = 1 << 22;

/// The largest set file read: 4 Mi prefixes with a comment on each line fit.
pub const MAX_SET_FILE_BYTES: u64 = 128 << 20;

/// Kernel memory the set tables of one filter take at most, estimated before loading.
pub const MAX_SET_KERNEL_BYTES: u64 = 1 << 30;

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
    /// Trie entries: IPv4 prefixes longer than /24 in `Partial` blocks, and every IPv6 range
    /// as prefixes: (family, address bytes, length).
    pub trie: Vec<(u8, [u8; 16], u8)>,
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
        let items = text.lines().enumerate().filter_map(|(i, line)| {
            let content = line.split(['#', ';']).next().unwrap_or("").trim();
            (!content.is_empty()).then_some((i + 1, content))
        });
        Self::from_items(name, items)
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

    /// Entries of the kernel's trie the set takes.
    pub fn trie_entries(&self) -> usize {
        let mut n = 0;
        self.walk(|_, _| (), |_, _, _| n += 1);
        n
    }

    /// The set as the kernel holds it.
    pub fn kernel_layout(&self) -> SetLayout {
        let mut blocks = if self.has_ipv4() {
            vec![0; SET_BLOCK_WORDS]
        } else {
            Vec::new()
        };
        let mut trie = Vec::new();
        self.walk(
            |block, state| blocks[(block >> 5) as usize] |= (state as u64) << ((block & 31) * 2),
            |family, addr, len| {
                let bytes = match family {
                    4 => {
                        let mut b = [0; 16];
                        b[..4].copy_from_slice(&(addr as u32).to_be_bytes());
                        b
                    }
                    _ => addr.to_be_bytes(),
                };
                trie.push((family, bytes, len));
            },
        );
        SetLayout { blocks, trie }
    }

    /// Calls `block` with every /24 that holds set addresses and its state, and `trie` with
    /// every trie entry: (family, address, length).
    fn walk(&self, mut block: impl FnMut(u32, Block), mut trie: impl FnMut(u8, u128, u8)) {
        for &(lo, hi) in &self.v4 {
            for b in (lo >> 8)..=(hi >> 8) {
                let (first, last) = (b << 8, b << 8 | 0xff);
                if lo <= first && last <= hi {
                    block(b, Block::Full);
                    continue;
                }
                block(b, Block::Partial);
                let span = u128::from(lo.max(first))..=u128::from(hi.min(last));
                for (addr, len) in cidrs(span, 32) {
                    trie(4, addr, len);
                }
            }
        }
        for &(lo, hi) in &self.v6 {
            for (addr, len) in cidrs(lo..=hi, 128) {
                trie(6, addr, len);
            }
        }
    }
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

/// The kernel memory `sets` would take, estimated before loading: a /24 block table per set,
/// and trie nodes (an entry and about one inner node each, with the kernel's allocation
/// overhead).
pub fn kernel_bytes(block_tables: usize, trie_entries: usize) -> u64 {
    const TRIE_ENTRY_BYTES: u64 = 2 * 96;
    block_tables as u64 * SET_BLOCK_WORDS as u64 * 8 + trie_entries as u64 * TRIE_ENTRY_BYTES
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
    fn cidrs_cover_a_range_exactly() {
        assert_eq!(cidrs(0..=u128::from(u32::MAX), 32), vec![(0, 0)]);
        assert_eq!(cidrs(0..=u128::MAX, 128), vec![(0, 0)]);
        assert_eq!(cidrs(5..=5, 32), vec![(5, 32)]);
        assert_eq!(cidrs(1..=6, 32), vec![(1, 32), (2, 31), (4, 31), (6, 32)]);
    }

    /// Every address of a few /24s: the layout's table and trie say what `contains` says.
    #[test]
    fn the_kernel_layout_agrees_with_contains() {
        let s = set("198.51.100.0/25\n198.51.100.200/30\n203.0.113.0/23\n10.0.0.0/8\n");
        let layout = s.kernel_layout();
        let in_layout = |a: u32| {
            let block = a >> 8;
            let state = layout.blocks[(block >> 5) as usize] >> ((block & 31) * 2) & 3;
            state == Block::Full as u64
                || state == Block::Partial as u64
                    && layout.trie.iter().any(|&(f, bytes, len)| {
                        let p = u32::from_be_bytes(bytes[..4].try_into().unwrap());
                        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                        f == 4 && a & mask == p
                    })
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
        // The two /24s below 10/8 are full: only the partial 198.51.100/24 is in the trie.
        assert!(layout.trie.iter().all(|t| t.1[..3] == [198, 51, 100]));
    }
}
