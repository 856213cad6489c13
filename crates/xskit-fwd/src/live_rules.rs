//! The rules as the workers run them, changed while they run: the supervisor publishes a new
//! set (the rules, their rate limiters and each worker's counters, carried over by name) and
//! bumps a generation; a worker looks at the generation once a vector and takes the new set
//! between two vectors, so that every packet is decided by one whole set.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use xskit_os::sync::LockUnpoisoned;

use crate::counter::RuleCells;
use crate::rule_state::ByRule;
use crate::rules::{Limiter, RuleSet};

/// One set of rules as the workers run it.
pub(crate) struct RulesNow {
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) limiters: Arc<ByRule<Option<Limiter>>>,
    /// Each worker's counters, by worker index.
    pub(crate) cells: Vec<Arc<ByRule<RuleCells>>>,
}

/// Where the supervisor publishes the rules the workers take up.
pub(crate) struct LiveRules {
    /// Bumped, under `now`'s lock, after each publication: the first set is generation 1.
    generation: AtomicU64,
    now: Mutex<Option<Arc<RulesNow>>>,
    /// Whether any rule limits a rate (the workers then read the clock once a vector).
    needs_clock: AtomicBool,
}

impl LiveRules {
    /// Generation 1, the rules the workers were built with; `needs_clock` as they ask.
    pub(crate) fn new(needs_clock: bool) -> Self {
        LiveRules {
            generation: AtomicU64::new(1),
            now: Mutex::new(None),
            needs_clock: AtomicBool::new(needs_clock),
        }
    }

    /// The generation in force: a worker that took up another looks again.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the rules in force limit a rate.
    #[inline]
    pub(crate) fn needs_clock(&self) -> bool {
        self.needs_clock.load(Ordering::Relaxed)
    }

    /// Publishes `now` as the next generation; returns its number.
    pub(crate) fn publish(&self, now: RulesNow) -> u64 {
        let clock = now.limiters.iter().any(Option::is_some);
        let mut slot = self.now.lock_unpoisoned();
        *slot = Some(Arc::new(now));
        // Before the generation, so that a worker that sees the new rules reads the clock.
        self.needs_clock.fetch_or(clock, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation in force and its rules (`None` for the first, which the workers were
    /// built with).
    pub(crate) fn current(&self) -> (u64, Option<Arc<RulesNow>>) {
        let slot = self.now.lock_unpoisoned();
        (self.generation(), slot.clone())
    }
}
