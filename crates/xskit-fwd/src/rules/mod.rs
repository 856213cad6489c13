//! Forwarding rules: an ordered list read from TOML, matched on prefixes, protocol, ports, TCP
//! flags, ICMP type and code, length and VLAN,
//! split between the kernel (what XDP can decide) and user space (everything else), with
//! token-bucket rate limits.
//!
//! ```
//! use xskit_fwd::rules::{PacketKey, RuleSet, Verdict};
//! let rules = RuleSet::from_toml(r#"
//!     default = "forward"
//!     [[rule]]
//!     name = "no-dns"
//!     protocol = "udp"
//!     dst_port = 53
//!     action = "drop"
//! "#)?;
//! let key = PacketKey { family: 4, protocol: 17, dst_port: 53, ..PacketKey::default() };
//! assert_eq!(rules.classify(&key), Ok(Some(0)));
//! assert_eq!(rules.rules()[0].verdict(), Verdict::Drop);
//! # Ok::<(), xskit_fwd::rules::RulesError>(())
//! ```
//!
//! Matching is the same in both places: a prefix matches only IP packets of its family; ports
//! are TCP and UDP ports (a rule with ports needs `protocol = "tcp"` or `"udp"`), TCP flags
//! need `"tcp"` and ICMP type and code `"icmp"` or `"icmpv6"`; the length is the IP packet's
//! and the VLAN the outer tag's. Only the first fragment of a packet carries its TCP, UDP or
//! ICMP header: a later fragment that reaches a rule with ports, TCP flags or ICMP keys is
//! unclassifiable (see [`RuleSet::classify`]).

mod extra_keys;
mod kernel_share;
mod limit_syntax;
mod matching;
mod packet_key;
mod rate;
mod set_syntax;
mod syntax;
#[cfg(test)]
mod tests;
pub(crate) mod vectors;

pub use crate::bucket::{ticks, Bucket};
pub use crate::rule_vectors::RuleVectors;
pub use crate::sets::{
    first_addresses as set_first_addresses, kernel_bytes as set_kernel_bytes, Element, PortSet,
    PrefixSet, SetLayout, SetLineError, SetOptions, SetStats, MAX_ELEMENT_TIMEOUT,
    MAX_SET_FILE_BYTES, MAX_SET_KERNEL_BYTES, MAX_SET_PREFIXES,
};
pub use kernel_share::KernelShare;
pub use limit_syntax::{
    PerSource, DEFAULT_BLOCK_TABLE, DEFAULT_SOURCE_TABLE, MAX_BLOCK, MAX_BLOCK_TABLE,
    MAX_SOURCE_TABLE,
};
use matching::FastMatches;
pub use matching::{Match, Prefix, TcpFlags};
pub use packet_key::{ChecksumState, PacketKey, Unclassifiable, MAX_VLAN_TAGS};
pub use rate::{Limiter, Rate, RateLimiter, RateUnit, SourceLimiter};
use std::sync::Arc;
pub use syntax::{RulesError, RulesFileError, MAX_RULE_NAME_CHARS};

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Out of the other interface.
    Forward,
    /// Dropped.
    Drop,
    /// To the forwarding host's own kernel stack.
    Pass,
    /// Forwarded while within the rule's rate, dropped above it.
    RateLimit,
}

impl Verdict {
    /// The name used in rules files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Forward => "forward",
            Verdict::Drop => "drop",
            Verdict::Pass => "pass",
            Verdict::RateLimit => "rate-limit",
        }
    }
}

/// One rule of a [`RuleSet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// A name for counters.
    pub name: String,
    /// What it matches.
    pub matcher: Match,
    action: Verdict,
    /// The rate, for [`Verdict::RateLimit`].
    pub rate: Option<Rate>,
    /// A rate limit kept for each source instead of the rule as a whole.
    pub per_source: Option<PerSource>,
}

impl RuleSpec {
    /// What the rule does.
    pub fn verdict(&self) -> Verdict {
        self.action
    }
}

/// An ordered rule list and the verdict for packets no rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSet {
    rules: Vec<RuleSpec>,
    /// The rules' matches as the rules stage tries them, one per rule.
    fast: FastMatches,
    /// For more than [`crate::abi::LINEAR_RULES`] rules, their bit vectors, which say which
    /// to try.
    vectors: Option<Arc<RuleVectors>>,
    default: Verdict,
    unclassifiable: Verdict,
    /// The sets the rules name, by index ([`Match::src_set`]).
    sets: Vec<Arc<PrefixSet>>,
    /// The port sets, by index ([`Match::src_port_set`]).
    port_sets: Vec<Arc<PortSet>>,
    /// Per-source buckets the kernel keeps, for the rules with `per`.
    source_table: u32,
    /// Blocked sources the kernel keeps, for the rules with `block`.
    block_table: u32,
    /// This set's number, kept by a set changed in place ([`RuleSet::with_set`]).
    told_id: crate::told::RulesId,
}

impl RuleSet {
    /// A rule set with no rules: everything takes `default`.
    pub fn with_default(default: Verdict) -> Self {
        RuleSet {
            rules: Vec::new(),
            fast: FastMatches::default(),
            vectors: None,
            default,
            unclassifiable: Verdict::Drop,
            sets: Vec::new(),
            port_sets: Vec::new(),
            source_table: DEFAULT_SOURCE_TABLE,
            block_table: DEFAULT_BLOCK_TABLE,
            told_id: crate::told::RulesId::fresh(),
        }
    }

    /// Forwarding rules that match `rules`, on `sets` and `port_sets`, looked up by their
    /// vectors or walked one by one (`vectored`).
    #[cfg(test)]
    pub(crate) fn for_tests(
        rules: Vec<Match>,
        sets: Vec<Arc<PrefixSet>>,
        port_sets: Vec<Arc<PortSet>>,
        vectored: bool,
    ) -> Self {
        let fast = FastMatches::new(&rules, &sets, &port_sets);
        let vectors = vectored.then(|| Arc::new(vectors::build(&rules, &port_sets)));
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(i, matcher)| RuleSpec {
                name: format!("r{i}"),
                matcher,
                action: Verdict::Forward,
                rate: None,
                per_source: None,
            })
            .collect();
        RuleSet {
            rules,
            fast,
            vectors,
            sets,
            port_sets,
            ..RuleSet::with_default(Verdict::Drop)
        }
    }

    /// Per-source buckets the kernel keeps (`source_table`), for the rules with `per`: the
    /// sources seen longest ago give way to new ones.
    pub fn source_table(&self) -> u32 {
        self.source_table
    }

    /// Blocked sources the kernel keeps (`block_table`), for the rules with `block`: when it
    /// is full, new blocks are refused and counted, and the blocked stay blocked.
    pub fn block_table(&self) -> u32 {
        self.block_table
    }

    /// Whether any rule keeps its rate per source.
    pub fn limits_sources(&self) -> bool {
        self.rules.iter().any(|r| r.per_source.is_some())
    }

    /// Whether any rule blocks sources.
    pub fn blocks_sources(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.per_source.is_some_and(|p| p.block.is_some()))
    }

    /// The file's port sets, in the order declared.
    pub fn port_sets(&self) -> &[Arc<PortSet>] {
        &self.port_sets
    }

    /// The file's sets, in the order declared.
    pub fn sets(&self) -> &[Arc<PrefixSet>] {
        &self.sets
    }

    /// These rules with set `index` ([`RuleSet::sets`]) replaced by `set`: the same rules,
    /// matching the set's new elements.
    pub fn with_set(&self, index: usize, set: Arc<PrefixSet>) -> RuleSet {
        let mut sets = self.sets.clone();
        if let Some(slot) = sets.get_mut(index) {
            *slot = set;
        }
        RuleSet {
            fast: FastMatches::new(
                self.rules.iter().map(|r| &r.matcher),
                &sets,
                &self.port_sets,
            ),
            sets,
            ..self.clone()
        }
    }

    /// The number the XDP filter tells its decisions under ([`crate::told`]): this set's,
    /// which a set changed in place keeps, since the filter changes its sets in place too.
    pub(crate) fn told_id(&self) -> crate::told::RulesId {
        self.told_id
    }

    /// The verdict for packets that cannot be classified ([`Unclassifiable`]): `drop` unless
    /// the file's `unclassifiable` says otherwise.
    pub fn unclassifiable_verdict(&self) -> Verdict {
        self.unclassifiable
    }

    /// Sets the verdict for unclassifiable packets.
    pub fn set_unclassifiable_verdict(&mut self, v: Verdict) {
        self.unclassifiable = v;
    }

    /// The verdict for `frame`'s packet and the index of what decided it: a rule, the default
    /// (`rules().len()`), or unclassifiable (`rules().len() + 1`).
    #[inline]
    pub fn decide(&self, key: &Result<PacketKey, Unclassifiable>) -> (usize, Verdict) {
        if self.fast.is_empty() {
            // No rules: the default, without a call.
            return self.decide_without_rules(key.is_ok());
        }
        match key.as_ref().map(|k| self.classify(k)) {
            Ok(Ok(Some(i))) => (i, self.rules[i].action),
            Ok(Ok(None)) => (self.rules.len(), self.default),
            Err(_) | Ok(Err(_)) => (self.rules.len() + 1, self.unclassifiable),
        }
    }

    /// [`RuleSet::decide`] for a rule set without rules, which needs only whether the packet
    /// could be classified (`classified`; [`PacketKey::classifiable_noting_checksum`]).
    #[inline]
    pub fn decide_without_rules(&self, classified: bool) -> (usize, Verdict) {
        if classified {
            (self.rules.len(), self.default)
        } else {
            (self.rules.len() + 1, self.unclassifiable)
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[RuleSpec] {
        &self.rules
    }

    /// The verdict when no rule matches.
    pub fn default_verdict(&self) -> Verdict {
        self.default
    }

    /// What [`RuleSet::decide`] gives a packet rule `i` decided (`rules().len()` for the
    /// default); `None` past that.
    #[inline]
    pub(crate) fn verdict_at(&self, i: usize) -> Option<Verdict> {
        match self.rules.get(i) {
            Some(r) => Some(r.action),
            None => (i == self.rules.len()).then_some(self.default),
        }
    }

    /// The index of the first rule that matches, or `None` for the default. A later
    /// fragment that reaches a rule with ports, its other fields matching, is unclassifiable:
    /// whether that rule is its packet's cannot be told from it, and the rules after it (and
    /// the default) must not take it for want of ports.
    #[inline]
    pub fn classify(&self, key: &PacketKey) -> Result<Option<usize>, Unclassifiable> {
        // A plain packet's word, inline in the caller's loop; the rest out of line.
        if let Some(word) = self
            .vectors
            .as_ref()
            .and_then(|v| vectors::plain_word(v, key))
        {
            return Ok(self.fast.first_in_word(key, word));
        }
        self.classify_unplain(key)
    }

    /// [`RuleSet::classify`] for a packet without a plain word.
    #[inline(never)]
    fn classify_unplain(&self, key: &PacketKey) -> Result<Option<usize>, Unclassifiable> {
        match &self.vectors {
            Some(v) => self.first_of(key, vectors::candidates(v, key)),
            None => self.first_of(key, 0..self.fast.len()),
        }
    }

    /// For a plain packet (untagged IPv4 TCP or UDP, not a later fragment), each rule the
    /// XDP filter's plain path decides by its vectors alone (one naming no set): its index,
    /// whether the plain path's lookup holds it (the word up to 64 rules, the candidates of
    /// its vectors past), and whether its match takes `key`.
    #[cfg(test)]
    pub(crate) fn plain_decisions(&self, key: &PacketKey) -> Vec<(usize, bool, bool)> {
        let Some(v) = self.vectors.as_ref() else {
            return Vec::new();
        };
        let held: Vec<usize> = match vectors::plain_word(v, key) {
            Some(word) => (0..64).filter(|i| word >> i & 1 != 0).collect(),
            None if vectors::is_plain(key) => vectors::candidates(v, key).collect(),
            None => return Vec::new(),
        };
        let (src, dst) = (u128::from_be_bytes(key.src), u128::from_be_bytes(key.dst));
        (0..self.fast.len())
            .filter(|&i| self.fast.decides_alone(i))
            .map(|i| {
                let matched = self.fast.get(i).is_some_and(|m| m.matches(key, src, dst));
                (i, held.contains(&i), matched)
            })
            .collect()
    }

    /// The vectors of these rules, when there are more than [`crate::abi::LINEAR_RULES`]:
    /// the XDP filter looks them up by these too ([`crate::filter::XdpFilter::set_rules`]).
    pub fn vectors(&self) -> Option<&Arc<RuleVectors>> {
        self.vectors.as_ref()
    }

    /// [`RuleSet::classify`] over `candidates`: in order, every rule `key` may match.
    fn first_of(
        &self,
        key: &PacketKey,
        candidates: impl Iterator<Item = usize>,
    ) -> Result<Option<usize>, Unclassifiable> {
        let (src, dst) = (u128::from_be_bytes(key.src), u128::from_be_bytes(key.dst));
        let mut candidates = candidates.filter_map(|i| Some((i, self.fast.get(i)?)));
        if !key.later_fragment {
            return Ok(candidates
                .find(|(_, m)| m.matches(key, src, dst))
                .map(|(i, _)| i));
        }
        for (i, m) in candidates {
            if !m.matches_but_l4(key, src, dst) {
                continue;
            }
            if m.needs_l4() {
                return Err(Unclassifiable(
                    "a later fragment reached a rule with ports, TCP flags or ICMP keys: its \
                     TCP, UDP or ICMP header is not in it",
                ));
            }
            return Ok(Some(i));
        }
        Ok(None)
    }
}
