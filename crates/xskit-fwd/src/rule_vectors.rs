//! Rules looked up in bit vectors, as bpf-iptables classifies (Miano et al., "Securing Linux
//! with a Faster and Scalable Iptables", 2019): for each packet field, a table gives every
//! value of it a vector with a bit for each rule that value satisfies; the rules a packet
//! matches are the bits set in all of its fields' vectors, and the first of them is its rule.
//! The cost is a table load per field and one AND per 64 rules, not a comparison per rule.
//! Computed here, without I/O, once for both the XDP filter (which loads the same tables) and
//! the rules stage.
//!
//! A field's values split into the ranges between the rules' boundaries; each range has one
//! vector, and equal vectors are stored once. An IPv4 prefix is the product of a range of its
//! first 16 bits and a range of its last 16 (a prefix of 16 bits or fewer: a range of the
//! first and every value of the last; a longer one: one value of the first and a range of the
//! last), so two tables of 65,536 entries decide every IPv4 prefix. IPv6 prefixes are looked
//! up longest first: the vector of the longest rule prefix that holds an address has every
//! rule whose prefix holds it. Prefix sets are not in the vectors: a rule that names one is a
//! candidate whose set is then asked.

use std::collections::HashMap;

use crate::abi::{
    Field, FIELD_IDS, FIELD_VALUES, MAX_SETS, PLAIN_FIELDS, PLAIN_WORDS, UNTAGGED_VLAN,
    VECTOR_WORDS, WORD_RULES,
};

/// A set of rules, a bit each, laid out as the filter's `struct rule_vector`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RuleVector {
    /// Bit `w` set when `words[w]` is not zero; in the plain path's vectors
    /// ([`RuleVectors::plain_ids`]), when it holds a rule anchored at the value.
    pub(crate) summary: u64,
    pub(crate) words: [u64; VECTOR_WORDS],
}

impl RuleVector {
    const EMPTY: RuleVector = RuleVector {
        summary: 0,
        words: [0; VECTOR_WORDS],
    };

    fn set(&mut self, rule: usize, on: bool) {
        let (w, bit) = (rule / 64, 1u64 << (rule % 64));
        if on {
            self.words[w] |= bit;
        } else {
            self.words[w] &= !bit;
        }
        self.summary &= !(1 << w);
        self.summary |= u64::from(self.words[w] != 0) << w;
    }

    fn has(&self, rule: usize) -> bool {
        self.words[rule / 64] >> (rule % 64) & 1 != 0
    }

    /// The rules of the first `rules` that `pick` says.
    fn of(rules: usize, pick: impl Fn(usize) -> bool) -> Self {
        let mut v = RuleVector::EMPTY;
        (0..rules).filter(|&i| pick(i)).for_each(|i| v.set(i, true));
        v
    }
}

/// The vectors that are not a field's: vector ids for the filter's `struct config`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpecialVectors {
    /// Every rule: the fields a packet lacks (a later fragment's ports) take it.
    pub(crate) all: u32,
    /// The rules that can match what is not IP, before its VLAN.
    pub(crate) non_ip: u32,
    /// The rules an IPv6 source no rule prefix holds can match (those without a source
    /// prefix), and likewise for destinations.
    pub(crate) src6_none: u32,
    pub(crate) dst6_none: u32,
    /// The rules that name source set `s` (`[0][s]`) or destination set `s` (`[1][s]`).
    pub(crate) set_rules: [[u32; MAX_SETS]; 2],
}

/// IPv6 rule prefixes of one field, longest first, each with its vector id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct V6Prefixes {
    by_len: Vec<(u8, HashMap<u128, u32>)>,
}

impl V6Prefixes {
    /// The id of the longest prefix holding `addr`, or `none`.
    pub(crate) fn lookup(&self, addr: u128, none: u32) -> u32 {
        for (len, ids) in &self.by_len {
            let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
            if let Some(&id) = ids.get(&(addr & mask)) {
                return id;
            }
        }
        none
    }

    /// Every (network, length, id), for the filter's trie.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u128, u8, u32)> + '_ {
        self.by_len
            .iter()
            .flat_map(|(len, ids)| ids.iter().map(move |(&a, &id)| (a, *len, id)))
    }

    fn len(&self) -> usize {
        self.by_len.iter().map(|(_, ids)| ids.len()).sum()
    }
}

/// A rule list's bit vectors and the tables that find them, made by
/// [`crate::rules::RuleSet`] for more than [`crate::abi::LINEAR_RULES`] rules and loaded
/// into the XDP filter beside its rules ([`crate::filter::XdpFilter::set_rules`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleVectors {
    /// The rules they were made for.
    pub(crate) rules: usize,
    /// Every field's table of vector ids ([`Field::base`]), as the filter's `field_ids`.
    pub(crate) ids: Box<[u32]>,
    /// For at most [`WORD_RULES`] rules, the plain path's tables of vectors themselves, one
    /// word each; empty for more.
    pub(crate) plain_words: Box<[u64]>,
    /// For more than [`WORD_RULES`] rules, the plain path's tables (the plain fields', by
    /// [`Field::base`]), as the XDP filter's plain path and the rules stage read them for a
    /// plain packet: for each value, the id of a vector with its full vector's words (the
    /// protocol's holding only the rules a plain packet can match: no VLAN, no ICMP keys)
    /// and, for summary, the words that hold a rule anchored at the value (the protocol's
    /// also those of the rules anchored at none). Each rule is anchored at one field it
    /// names, the one that takes fewest packets ([`anchor_fields`]); a rule a packet matches
    /// is in its anchor's summary, so only those words are ANDed. Empty for fewer rules.
    pub(crate) plain_ids: Box<[u32]>,
    /// The vectors, by id.
    pub(crate) vectors: Vec<RuleVector>,
    pub(crate) src6: V6Prefixes,
    pub(crate) dst6: V6Prefixes,
    pub(crate) special: SpecialVectors,
}

/// Vectors stored once each, by id.
#[derive(Default)]
struct Arena {
    vectors: Vec<RuleVector>,
    index: HashMap<RuleVector, u32>,
}

impl Arena {
    fn id(&mut self, v: &RuleVector) -> u32 {
        if let Some(&id) = self.index.get(v) {
            return id;
        }
        let id = self.vectors.len() as u32;
        self.vectors.push(*v);
        self.index.insert(*v, id);
        id
    }

    /// The id of the vector with the rules `pick` says.
    fn of(&mut self, rules: usize, pick: impl Fn(usize) -> bool) -> u32 {
        self.id(&RuleVector::of(rules, pick))
    }
}

/// Values of a field a rule accepts: inclusive ranges, sorted and apart.
pub(crate) type Ranges = Vec<(u32, u32)>;

/// Whether a rule names a prefix of one address, and the prefix as (network, length) when
/// it is an IPv6 one.
pub(crate) type V6Key = (bool, Option<(u128, u8)>);

/// What one rule asks of each field: what its vectors are made from
/// (`crate::rules::RuleSet` makes it from the rule's match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RuleShape {
    /// The values of each field, in [`Field`] order, that it accepts.
    pub(crate) accepts: Vec<Ranges>,
    /// It can match some packet: its prefixes' families agree.
    pub(crate) live: bool,
    /// It can match IPv6.
    pub(crate) takes_v6: bool,
    /// Its source prefix, as IPv6 vectors need it.
    pub(crate) src6: V6Key,
    /// The same of its destination.
    pub(crate) dst6: V6Key,
    /// It can match what is not IP, but for its VLAN.
    pub(crate) non_ip: bool,
    /// The prefix sets it names.
    pub(crate) src_set: Option<usize>,
    pub(crate) dst_set: Option<usize>,
}

/// Fills `table` (a field's domain) with the ids of its values' vectors, rule `i` accepting
/// `accepts[i]`: one vector for each stretch between the rules' boundaries.
fn fill_field(table: &mut [u32], accepts: &[Ranges], arena: &mut Arena) {
    let mut edges: Vec<(u32, usize)> = Vec::new();
    for (rule, ranges) in accepts.iter().enumerate() {
        for &(lo, hi) in ranges {
            edges.push((lo, rule));
            if (hi as usize) + 1 < table.len() {
                edges.push((hi + 1, rule));
            }
        }
    }
    edges.sort_unstable();
    let mut current = RuleVector::EMPTY;
    let mut from = 0usize;
    let mut edges = edges.into_iter().peekable();
    while let Some(&(at, _)) = edges.peek() {
        if at as usize > from {
            table[from..at as usize].fill(arena.id(&current));
            from = at as usize;
        }
        while let Some((_, rule)) = edges.next_if(|&(next, _)| next == at) {
            let on = !current.has(rule);
            current.set(rule, on);
        }
    }
    table[from..].fill(arena.id(&current));
}

/// The whole of a field's domain.
pub(crate) fn all(domain: usize) -> Ranges {
    vec![(0, domain as u32 - 1)]
}

/// The IPv6 prefixes of one field and their vectors: each holds the rules of family 6 or
/// either whose prefix holds it.
fn v6_prefixes(
    shapes: &[RuleShape],
    pick: fn(&RuleShape) -> V6Key,
    arena: &mut Arena,
) -> V6Prefixes {
    let mut distinct: Vec<(u128, u8)> = shapes
        .iter()
        .filter(|r| r.live)
        .filter_map(|r| pick(r).1)
        .collect();
    distinct.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    distinct.dedup();
    let mut by_len: Vec<(u8, HashMap<u128, u32>)> = Vec::new();
    for (net, len) in distinct {
        let id = arena.of(shapes.len(), |i| {
            let (named, prefix) = pick(&shapes[i]);
            shapes[i].takes_v6
                && (!named
                    || prefix.is_some_and(|(qnet, qlen)| qlen <= len && net & mask(qlen) == qnet))
        });
        match by_len.last_mut() {
            Some((l, ids)) if *l == len => {
                ids.insert(net, id);
            }
            _ => by_len.push((len, HashMap::from([(net, id)]))),
        }
    }
    V6Prefixes { by_len }
}

/// The mask of an IPv6 prefix of `len` bits.
fn mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// How much traffic a field's ranges take, lower for a rarer match: the share of the
/// domain, weighed by how traffic crowds into part of it (most packets are TCP or UDP, of
/// a few flag sets, 40 to 1,500 bytes long). `None` when they take every value.
fn share(field: Field, ranges: &Ranges) -> Option<f64> {
    let domain = field.domain() as u64;
    let taken: u64 = ranges.iter().map(|&(lo, hi)| u64::from(hi - lo) + 1).sum();
    if taken >= domain {
        return None;
    }
    let crowding = match field {
        Field::Protocol => 128.0,
        Field::TcpFlags => 16.0,
        Field::Length => 40.0,
        _ => 1.0,
    };
    Some(taken as f64 / domain as f64 * crowding)
}

/// The plain path's field each rule is anchored at (`None`: it names none), given what each
/// rule accepts of each plain field.
fn anchor_fields(accepts: &[Vec<Ranges>]) -> Vec<Option<usize>> {
    let rules = accepts.first().map_or(0, Vec::len);
    (0..rules)
        .map(|r| {
            (0..PLAIN_FIELDS)
                .filter_map(|f| share(Field::ALL[f], &accepts[f][r]).map(|s| (f, s)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(f, _)| f)
        })
        .collect()
}

/// The plain fields' tables of words (`plain_words`, [`Field::word_base`]) from their
/// tables of ids, every plain packet's `plain` word folded into the protocol's.
fn plain_words(ids: &[u32], vectors: &[RuleVector], plain: u64) -> Box<[u64]> {
    let mut words = vec![0u64; PLAIN_WORDS].into_boxed_slice();
    for &field in &Field::ALL[..PLAIN_FIELDS] {
        let table = &ids[field.base()..field.base() + field.domain()];
        let to = &mut words[field.word_base()..field.word_base() + field.domain()];
        for (word, &id) in to.iter_mut().zip(table) {
            *word = vectors[id as usize].words[0];
            if field == Field::Protocol {
                *word &= plain;
            }
        }
    }
    words
}

/// The rules a packet of the XDP filter's plain path (untagged IPv4 TCP or UDP) can match
/// at all: no VLAN, no ICMP keys.
fn plain_rules(ids: &[u32], vectors: &[RuleVector], rules: usize) -> RuleVector {
    let at = |field: Field, value: usize| &vectors[ids[field.base() + value] as usize];
    let (untagged, no_icmp) = (at(Field::Vlan, UNTAGGED_VLAN), at(Field::Icmp, 0));
    RuleVector::of(rules, |i| untagged.has(i) && no_icmp.has(i))
}

/// The plain path's tables past [`WORD_RULES`] rules ([`RuleVectors::plain_ids`]), for rules
/// accepting `accepts` and anchored at `anchored`, whose fields' tables are `ids`.
fn plain_ids(
    ids: &[u32],
    accepts: &[Vec<Ranges>],
    anchored: &[Option<usize>],
    arena: &mut Arena,
) -> Box<[u32]> {
    let plain = plain_rules(ids, &arena.vectors, anchored.len());
    let always = RuleVector::of(anchored.len(), |i| plain.has(i) && anchored[i].is_none());
    let mut table = vec![0u32; PLAIN_FIELDS * FIELD_VALUES].into_boxed_slice();
    let mut made = HashMap::new();
    for (f, &field) in Field::ALL[..PLAIN_FIELDS].iter().enumerate() {
        let protocol = field == Field::Protocol;
        for (value, summary) in anchored_words(f, accepts, anchored).into_iter().enumerate() {
            let at = field.base() + value;
            let summary = summary | if protocol { always.summary } else { 0 };
            table[at] = *made.entry((ids[at], summary)).or_insert_with(|| {
                let mut v = arena.vectors[ids[at] as usize];
                if protocol {
                    v.words
                        .iter_mut()
                        .zip(&plain.words)
                        .for_each(|(w, p)| *w &= p);
                }
                v.summary = summary;
                arena.id(&v)
            });
        }
    }
    table
}

/// For each value of plain field `f`, the words that hold a rule anchored there
/// (`anchored`) that accepts the value.
fn anchored_words(f: usize, accepts: &[Vec<Ranges>], anchored: &[Option<usize>]) -> Vec<u64> {
    let only: Vec<Ranges> = accepts[f]
        .iter()
        .zip(anchored)
        .map(|(ranges, &a)| {
            if a == Some(f) {
                ranges.clone()
            } else {
                Vec::new()
            }
        })
        .collect();
    let mut vectors = Arena::default();
    let mut ids = vec![0u32; Field::ALL[f].domain()];
    fill_field(&mut ids, &only, &mut vectors);
    ids.iter()
        .map(|&id| vectors.vectors[id as usize].summary)
        .collect()
}

/// The vectors that are not a field's, for rules `shapes`.
fn special_vectors(shapes: &[RuleShape], arena: &mut Arena) -> SpecialVectors {
    let n = shapes.len();
    let mut special = SpecialVectors {
        all: arena.of(n, |i| shapes[i].live),
        non_ip: arena.of(n, |i| shapes[i].non_ip),
        src6_none: arena.of(n, |i| shapes[i].takes_v6 && !shapes[i].src6.0),
        dst6_none: arena.of(n, |i| shapes[i].takes_v6 && !shapes[i].dst6.0),
        set_rules: [[0; MAX_SETS]; 2],
    };
    for s in 0..MAX_SETS {
        let live = |i: usize| shapes[i].live;
        special.set_rules[0][s] = arena.of(n, |i| live(i) && shapes[i].src_set == Some(s));
        special.set_rules[1][s] = arena.of(n, |i| live(i) && shapes[i].dst_set == Some(s));
    }
    special
}

impl RuleVectors {
    /// The number of rules they were made for.
    pub fn rules(&self) -> usize {
        self.rules
    }

    /// Distinct vectors: what the filter's `vectors` map holds ([`crate::filter::SetRoom`]).
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// About what the XDP filter's tables for them take on each interface: two table sets
    /// (one in force, one for the next rules), each with the vectors, every field's table of
    /// ids, the plain fields' words and the trie's IPv6 prefixes (about 64 bytes a node).
    pub fn kernel_bytes(&self) -> u64 {
        let vectors = self.vectors.len() * std::mem::size_of::<RuleVector>();
        let tables = FIELD_IDS * 4 + PLAIN_WORDS * 8;
        let trie = self.trie_entries() * 64;
        2 * (vectors + tables + trie) as u64
    }

    /// The vectors of rules of these shapes (at most [`crate::MAX_RULES`]).
    pub(crate) fn build(shapes: &[RuleShape]) -> Self {
        debug_assert!(shapes.len() <= crate::MAX_RULES);
        let mut arena = Arena::default();
        let mut ids = vec![0u32; FIELD_IDS].into_boxed_slice();
        let accepts: Vec<Vec<Ranges>> = (0..Field::ALL.len())
            .map(|f| shapes.iter().map(|r| r.accepts[f].clone()).collect())
            .collect();
        for (&field, accepts) in Field::ALL.iter().zip(&accepts) {
            let table = &mut ids[field.base()..field.base() + field.domain()];
            fill_field(table, accepts, &mut arena);
        }
        let special = special_vectors(shapes, &mut arena);
        let src6 = v6_prefixes(shapes, |r| r.src6, &mut arena);
        let dst6 = v6_prefixes(shapes, |r| r.dst6, &mut arena);
        let (plain_words, plain_ids) = if shapes.len() <= WORD_RULES {
            let plain = plain_rules(&ids, &arena.vectors, shapes.len()).words[0];
            (plain_words(&ids, &arena.vectors, plain), Box::default())
        } else {
            let anchored = anchor_fields(&accepts[..PLAIN_FIELDS]);
            let table = plain_ids(&ids, &accepts, &anchored, &mut arena);
            (Box::default(), table)
        };
        RuleVectors {
            rules: shapes.len(),
            ids,
            plain_words,
            plain_ids,
            vectors: arena.vectors,
            src6,
            dst6,
            special,
        }
    }

    /// IPv6 prefixes in the filter's trie.
    pub fn trie_entries(&self) -> usize {
        self.src6.len() + self.dst6.len()
    }

    pub(crate) fn field(&self, field: Field, value: usize) -> &RuleVector {
        &self.vectors[self.ids[field.base() + value] as usize]
    }

    pub(crate) fn special(&self, id: u32) -> &RuleVector {
        &self.vectors[id as usize]
    }
}

/// Vectors a packet picks: at most one per field, and the specials.
const MAX_PICKED: usize = 12;

/// The rules set in every one of a packet's vectors, first to last.
pub(crate) struct Candidates<'a> {
    full: [&'a RuleVector; MAX_PICKED],
    full_len: usize,
    /// Words still to look at.
    summary: u64,
    word: usize,
    /// Rules of `word` still to give.
    bits: u64,
}

impl<'a> Candidates<'a> {
    /// None picked yet; `filler` fills the unused places.
    pub(crate) fn default_for(filler: &'a RuleVector) -> Self {
        Candidates {
            full: [filler; MAX_PICKED],
            full_len: 0,
            summary: 0,
            word: 0,
            bits: 0,
        }
    }

    pub(crate) fn full(&mut self, v: &'a RuleVector) {
        self.full[self.full_len] = v;
        self.full_len += 1;
    }

    /// Ready to give the rules of the words every vector holds one in.
    pub(crate) fn start(self) -> Self {
        let full = &self.full[..self.full_len];
        let words = full.iter().fold(u64::MAX, |s, v| s & v.summary);
        self.start_in(words)
    }

    /// Ready to give the rules of `words` alone.
    pub(crate) fn start_in(mut self, words: u64) -> Self {
        self.summary = words;
        self
    }
}

impl Iterator for Candidates<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            if self.summary == 0 {
                return None;
            }
            self.word = self.summary.trailing_zeros() as usize;
            self.summary &= self.summary - 1;
            let w = self.word;
            let full = &self.full[..self.full_len];
            self.bits = full.iter().fold(u64::MAX, |acc, v| acc & v.words[w]);
        }
        let bit = self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(self.word * 64 + bit)
    }
}

#[cfg(test)]
mod tests;
