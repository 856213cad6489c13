//! What stays with a rule while the forwarder runs (its rate limiter's bucket, each
//! worker's counters) is kept by the rule's identity, its name, not by its place in the
//! list: rules built again from a changed list keep the state of every rule that kept its
//! name, wherever it moved, and a new or renamed rule starts afresh.

use std::collections::HashMap;
use std::sync::Arc;

use crate::rules::{Limiter, RuleSet};

pub(crate) use crate::carry::RuleId;

impl RuleId {
    /// Every identity of `rules` in the order of [`RuleSet::decide`]'s index: the rules,
    /// then the default, then unclassifiable packets.
    fn all(rules: &RuleSet) -> Vec<RuleId> {
        let named = rules.rules().iter().map(|r| RuleId::Named(r.name.clone()));
        named
            .chain([RuleId::Default, RuleId::Unclassifiable])
            .collect()
    }
}

/// One `T` per index of [`RuleSet::decide`], each held by its rule's identity.
#[derive(Debug)]
pub(crate) struct ByRule<T> {
    ids: Vec<RuleId>,
    items: Vec<Arc<T>>,
}

impl<T> ByRule<T> {
    /// One item per identity of `rules`: `before`'s item of the same identity where there
    /// is one and `keep(item, index)` accepts it, else `make(index)`.
    pub(crate) fn carried(
        rules: &RuleSet,
        before: Option<&ByRule<T>>,
        keep: impl Fn(&T, usize) -> bool,
        make: impl Fn(usize) -> T,
    ) -> Self {
        let ids = RuleId::all(rules);
        // Looked up by identity once each: a list of thousands of rules rebuilds in linear time.
        let old: HashMap<&RuleId, &Arc<T>> = before
            .map(|b| b.ids.iter().zip(&b.items).collect())
            .unwrap_or_default();
        let items = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                old.get(id)
                    .filter(|item| keep(item, i))
                    .map_or_else(|| Arc::new(make(i)), |item| Arc::clone(item))
            })
            .collect();
        ByRule { ids, items }
    }

    /// Fresh items for every identity of `rules`.
    pub(crate) fn fresh(rules: &RuleSet, make: impl Fn(usize) -> T) -> Self {
        Self::carried(rules, None, |_, _| false, make)
    }

    /// The item of decision index `i`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i).map(|item| &**item)
    }

    /// The items in decision order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|item| &**item)
    }

    /// Each item with its identity.
    pub(crate) fn by_id(&self) -> impl Iterator<Item = (&RuleId, &T)> {
        self.ids.iter().zip(self.items.iter().map(|item| &**item))
    }

    /// How many identities: the rules, the default and unclassifiable packets.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// The rules' rate limiters, one bucket per rate-limited rule shared by every worker; a rule
/// whose rate changed gets a new, full bucket.
pub(crate) fn limiters(
    rules: &RuleSet,
    before: Option<&ByRule<Option<Limiter>>>,
) -> ByRule<Option<Limiter>> {
    let rule = |i: usize| rules.rules().get(i);
    let sources = rules.source_table() as usize;
    ByRule::carried(
        rules,
        before,
        |old, i| match (old, rule(i)) {
            (Some(old), Some(r)) => old.keeps(r),
            (None, r) => r.is_none_or(|r| r.rate.is_none()),
            (Some(_), None) => false,
        },
        |i| rule(i).and_then(|r| Limiter::of(r, sources)),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::counter::RuleCells;

    fn rules(text: &str) -> RuleSet {
        RuleSet::from_toml(text).unwrap()
    }

    const AB: &str = "[[rule]]\nname = \"a\"\naction = \"drop\"\nprotocol = \"udp\"\n\
                      [[rule]]\nname = \"b\"\naction = \"rate-limit\"\nrate = \"10pps\"\nburst = 1\n";

    #[test]
    fn a_rule_keeps_its_counters_and_bucket_where_it_moves_and_a_new_one_starts_afresh() {
        let first = rules(AB);
        let cells = ByRule::fresh(&first, |_| RuleCells::default());
        cells.get(0).unwrap().packets.store(7, Ordering::Relaxed);
        let buckets = limiters(&first, None);
        assert!(buckets.get(1).unwrap().as_ref().unwrap().allow(None, 0, 64));
        assert!(
            !buckets.get(1).unwrap().as_ref().unwrap().allow(None, 0, 64),
            "burst spent"
        );
        // b first, a renamed c: b keeps its spent bucket, c starts at zero.
        let second = rules(
            "[[rule]]\nname = \"b\"\naction = \"rate-limit\"\nrate = \"10pps\"\nburst = 1\n\
             [[rule]]\nname = \"c\"\naction = \"drop\"\nprotocol = \"udp\"\n",
        );
        let cells = ByRule::carried(&second, Some(&cells), |_, _| true, |_| RuleCells::default());
        let buckets = limiters(&second, Some(&buckets));
        assert_eq!(
            cells.get(1).unwrap().packets.load(Ordering::Relaxed),
            0,
            "c is new"
        );
        assert!(
            !buckets.get(0).unwrap().as_ref().unwrap().allow(None, 0, 64),
            "b's bucket moved with it"
        );
        assert_eq!(cells.len(), 4, "two rules, the default, unclassifiable");
        // Back to the first list: a is new again (its old cell was not carried through c).
        let third = ByRule::carried(&first, Some(&cells), |_, _| true, |_| RuleCells::default());
        assert_eq!(third.get(0).unwrap().packets.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_rule_whose_rate_changed_gets_a_full_bucket() {
        let first = rules(AB);
        let buckets = limiters(&first, None);
        let b = |set: &ByRule<Option<Limiter>>| {
            set.get(1).unwrap().as_ref().unwrap().allow(None, 0, 64)
        };
        assert!(b(&buckets));
        let same = limiters(&first, Some(&buckets));
        assert!(!b(&same), "the same rate: the same, spent bucket");
        let faster = rules(&AB.replace("10pps", "20pps"));
        assert!(
            b(&limiters(&faster, Some(&same))),
            "a new rate: a full bucket"
        );
    }
}
