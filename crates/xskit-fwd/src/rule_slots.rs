//! Which of the kernel filter's slots keeps each rule's state (its counter, its rate limit's
//! bucket and counts, its per-source buckets and blocks), by the rule's name: a rule whose
//! name stays keeps its slot, and so its state, wherever it moves in a changed list. A new
//! rule gets a slot that no rule of the table in force uses (there are twice as many slots as
//! rules), so that the filter can clear it while the old rules still run; a slot never used
//! is preferred, as it needs no clearing.

use std::collections::HashMap;

use crate::abi::RULE_SLOTS;

/// The slots of the rules in force.
#[derive(Clone, Debug)]
pub(crate) struct RuleSlots {
    /// Each rule's slot, in rule order.
    in_force: Vec<u16>,
    by_name: HashMap<String, u16>,
    /// Whether a slot has ever held a rule's state.
    used: Vec<bool>,
}

/// The slots of a changed list of rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NextSlots {
    /// Each rule's slot, in rule order.
    pub(crate) slots: Vec<u16>,
    /// The slots given to new rules that held another rule's state before: clear them before
    /// the new rules are put in force.
    pub(crate) to_clear: Vec<u16>,
    /// Rules that kept their slot (and state), were new, and went.
    pub(crate) kept: usize,
    pub(crate) added: usize,
    pub(crate) removed: usize,
}

impl RuleSlots {
    /// The first rules, each in the slot of its index (as the filter starts).
    pub(crate) fn first<'a>(names: impl IntoIterator<Item = &'a str>) -> RuleSlots {
        let mut slots = RuleSlots {
            in_force: Vec::new(),
            by_name: HashMap::new(),
            used: vec![false; RULE_SLOTS],
        };
        for (i, name) in names.into_iter().enumerate() {
            slots.in_force.push(i as u16);
            slots.by_name.insert(name.to_string(), i as u16);
            slots.used[i] = true;
        }
        slots
    }

    /// The slots for `names` (distinct, at most [`crate::abi::MAX_RULES`]) following these.
    pub(crate) fn next(&self, names: &[&str]) -> NextSlots {
        let mut taken = vec![false; RULE_SLOTS];
        for &s in &self.in_force {
            taken[usize::from(s)] = true;
        }
        let kept: Vec<Option<u16>> = names
            .iter()
            .map(|n| self.by_name.get(*n).copied())
            .collect();
        // Never used first, then the lowest used before: both are free of the rules in force.
        let mut fresh = (0..RULE_SLOTS).filter(|&s| !taken[s] && !self.used[s]);
        let mut reused = (0..RULE_SLOTS).filter(|&s| !taken[s] && self.used[s]);
        let mut next = NextSlots {
            slots: Vec::with_capacity(names.len()),
            to_clear: Vec::new(),
            kept: 0,
            added: 0,
            removed: 0,
        };
        for slot in kept {
            let slot = match slot {
                Some(s) => {
                    next.kept += 1;
                    s
                }
                None => {
                    next.added += 1;
                    match fresh.next() {
                        Some(s) => s as u16,
                        None => {
                            let s = reused.next().expect("twice as many slots as rules") as u16;
                            next.to_clear.push(s);
                            s
                        }
                    }
                }
            };
            next.slots.push(slot);
        }
        next.removed = self.in_force.len() - next.kept;
        next
    }

    /// These slots, changed to `next` (for `names`, as [`RuleSlots::next`] was given).
    pub(crate) fn advance(&mut self, names: &[&str], next: &NextSlots) {
        self.by_name = names
            .iter()
            .zip(&next.slots)
            .map(|(n, &s)| (n.to_string(), s))
            .collect();
        for &s in &next.slots {
            self.used[usize::from(s)] = true;
        }
        self.in_force = next.slots.clone();
    }

    /// Each rule's slot, in rule order.
    pub(crate) fn in_force(&self) -> &[u16] {
        &self.in_force
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::MAX_RULES;

    #[test]
    fn a_rule_keeps_its_slot_by_name_and_a_new_one_takes_a_slot_never_used() {
        let mut slots = RuleSlots::first(["a", "b", "c"]);
        assert_eq!(slots.in_force(), &[0, 1, 2]);
        let names = ["c", "d", "a"];
        let next = slots.next(&names);
        assert_eq!(
            next.slots,
            vec![2, 3, 0],
            "c and a kept theirs wherever they moved"
        );
        assert_eq!((next.kept, next.added, next.removed), (2, 1, 1));
        assert!(next.to_clear.is_empty(), "slot 3 never held a rule");
        slots.advance(&names, &next);
        // b's old slot 1 is free; slots never used still come first.
        let next = slots.next(&["e"]);
        assert_eq!(next.slots, vec![4]);
        assert_eq!((next.kept, next.added, next.removed), (0, 1, 3));
    }

    #[test]
    fn once_every_slot_was_used_a_new_rule_takes_one_the_rules_in_force_do_not_use_cleared() {
        let names: Vec<String> = (0..MAX_RULES).map(|i| format!("r{i}")).collect();
        let first: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut slots = RuleSlots::first(first.iter().copied());
        let others: Vec<String> = (0..MAX_RULES).map(|i| format!("s{i}")).collect();
        let second: Vec<&str> = others.iter().map(String::as_str).collect();
        let next = slots.next(&second);
        assert!(next.slots.iter().all(|&s| usize::from(s) >= MAX_RULES));
        assert!(next.to_clear.is_empty());
        slots.advance(&second, &next);
        // Every slot used now: back to the first names, into the first half, cleared.
        let next = slots.next(&first);
        assert_eq!(next.slots, (0..MAX_RULES as u16).collect::<Vec<_>>());
        assert_eq!(next.to_clear, next.slots);
        assert_eq!(
            (next.kept, next.added, next.removed),
            (0, MAX_RULES, MAX_RULES)
        );
    }
}
