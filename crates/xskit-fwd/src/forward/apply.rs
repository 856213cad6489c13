//! Changing a running forwarder's rules: all of the new rules or none of them. The new list
//! is checked whole first (it must fit the room the filters were attached with, and keep
//! the sets as they run); then each filter gets it in the table set not in force, which one
//! word puts in force, with every rule's state in the slot its name had; then the workers
//! take it up between two vectors, each rule's counters and rate limiter carried over by
//! name. The supervisor does this between its looks, when a [`RuleChanger`] asks.

use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelRules, RunningFilter};
use crate::live_rules::RulesNow;
use crate::rule_state::ByRule;
use crate::rules::RuleSet;
use crate::set_tables::SetRoom;
use crate::stages::RuleCells;

use super::Forwarding;

/// What an apply did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The generation of the rules now in force (the rules the forwarder started with are
    /// generation 1).
    pub generation: u64,
    /// Rules now in force.
    pub rules: usize,
    /// Of those, rules that kept their name and so their counters and rate-limit state.
    pub kept: usize,
    /// Rules new by name, starting from zero.
    pub added: usize,
    /// Rules that went.
    pub removed: usize,
}

/// The generation of the rules in force and when it was put in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// 1 for the rules the forwarder started with, one more for each apply.
    pub number: u64,
    /// When it was put in force, in milliseconds since the Unix epoch.
    pub applied_timestamp_ms: u64,
}

impl Generation {
    /// Generation `number`, put in force now.
    pub(crate) fn now(number: u64) -> Self {
        let applied_timestamp_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Generation {
            number,
            applied_timestamp_ms,
        }
    }
}

/// What a [`RuleChanger`] asks.
pub(crate) enum Ask {
    /// Put these rules in force.
    Made(RuleSet),
    /// Put the rules of this rules file's text in force (its sets that name a file taken as
    /// they run: [`RuleSet::from_toml_keeping_sets`]).
    Text(String),
    /// Change a set's elements.
    Set(SetChange),
    /// A set's elements.
    List(String),
    /// What a successor takes over with.
    HandOver,
    /// Pause the workers for the successor.
    Pause,
    /// The handover is done (to the successor with this process id), or given up.
    EndHandover(Option<u32>),
}

/// What the supervisor answers.
pub(crate) enum Answer {
    Applied(Applied),
    Elements(Vec<String>),
    Handing(crate::handover::Handing),
    Paused(crate::handover::PausedState),
    Done,
}

/// A request, and where its answer goes.
pub(crate) struct ApplyRequest {
    ask: Ask,
    answer: SyncSender<Result<Answer>>,
}

/// Elements to add to a running set and prefixes to take out of it
/// ([`crate::sets::PrefixSet::changed`]).
#[derive(Clone, Debug, Default)]
pub struct SetChange {
    /// The set's name.
    pub set: String,
    /// Elements to add: a prefix, and `timeout DURATION` in a set with timeouts.
    pub add: Vec<String>,
    /// Prefixes to take out.
    pub del: Vec<String>,
    /// The timeout of added elements without one of their own (a set with timeouts).
    pub timeout: Option<Duration>,
}

/// Asks a running forwarder to put other rules in force ([`crate::Forwarder::rule_changer`]).
/// Cheap to clone; usable from any thread but the one in [`crate::Forwarder::run`], whose
/// supervisor answers it (from `run`'s `on_tick` an apply would wait out its timeout).
#[derive(Clone, Debug)]
pub struct RuleChanger {
    requests: SyncSender<ApplyRequest>,
}

/// Requests waiting for the supervisor at most: more are refused as busy.
pub(crate) const WAITING_APPLIES: usize = 4;

impl RuleChanger {
    pub(crate) fn new(requests: SyncSender<ApplyRequest>) -> Self {
        RuleChanger { requests }
    }

    /// Puts `rules` in force in place of the running ones, whole, and waits up to `timeout`
    /// for the answer. Refused, with the running rules untouched, when they do not fit the
    /// running filter ([`Error::RulesOutgrown`], [`Error::SetsChanged`]).
    pub fn apply(&self, rules: RuleSet, timeout: Duration) -> Result<Applied> {
        self.applied(Ask::Made(rules), timeout)
    }

    /// [`RuleChanger::apply`] for the text of a rules file, read by the forwarder against its
    /// running rules ([`RuleSet::from_toml_keeping_sets`]): a mistake is
    /// [`Error::InvalidRules`], with its line and column.
    pub fn apply_text(&self, text: String, timeout: Duration) -> Result<Applied> {
        self.applied(Ask::Text(text), timeout)
    }

    /// Adds elements to a running set and takes others out, in place in the kernel (each
    /// /24 or trie entry a packet meets is old or new), and puts the rules over the changed
    /// set in force as an apply does. Refused, the set untouched, for an element that is not
    /// one or a set that would outgrow the filter's room.
    pub fn change_set(&self, change: SetChange, timeout: Duration) -> Result<Applied> {
        self.applied(Ask::Set(change), timeout)
    }

    /// The elements of the running set `name` (merged prefixes for a set without timeouts or
    /// counters; each element, with `timeout` and the time left, for one with).
    pub fn set_elements(&self, name: &str, timeout: Duration) -> Result<Vec<String>> {
        match self.ask(Ask::List(name.to_string()), timeout)? {
            Answer::Elements(e) => Ok(e),
            _ => Err(Error::ForwarderStopped),
        }
    }

    /// What a successor takes over with: the descriptors of the forwarder's UMEM, links and
    /// sockets, and what it runs. Nothing stops: [`RuleChanger::pause_for_successor`] does.
    pub fn hand_over(&self, timeout: Duration) -> Result<crate::handover::Handing> {
        match self.ask(Ask::HandOver, timeout)? {
            Answer::Handing(h) => Ok(h),
            _ => Err(Error::ForwarderStopped),
        }
    }

    /// Pauses the forwarder's workers between two rounds (packets wait in the sockets'
    /// rings) and says where every frame is. The workers resume when
    /// [`RuleChanger::end_handover`] gives the handover up, or by themselves after
    /// [`crate::handover::HANDOVER_WAIT`].
    pub fn pause_for_successor(&self, timeout: Duration) -> Result<crate::handover::PausedState> {
        match self.ask(Ask::Pause, timeout)? {
            Answer::Paused(p) => Ok(p),
            _ => Err(Error::ForwarderStopped),
        }
    }

    /// Ends a handover: `Some(pid)` when the successor `pid` has committed (the forwarder's
    /// workers end without touching a ring again and [`crate::Forwarder::run`] returns),
    /// `None` to resume. Refused when the pause had already ended.
    pub fn end_handover(&self, successor: Option<u32>, timeout: Duration) -> Result<()> {
        match self.ask(Ask::EndHandover(successor), timeout)? {
            Answer::Done => Ok(()),
            _ => Err(Error::ForwarderStopped),
        }
    }

    fn applied(&self, ask: Ask, timeout: Duration) -> Result<Applied> {
        match self.ask(ask, timeout)? {
            Answer::Applied(a) => Ok(a),
            _ => Err(Error::ForwarderStopped),
        }
    }

    fn ask(&self, ask: Ask, timeout: Duration) -> Result<Answer> {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        match self.requests.try_send(ApplyRequest { ask, answer }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(Error::ApplyBusy),
            Err(TrySendError::Disconnected(_)) => return Err(Error::ForwarderStopped),
        }
        match answered.recv_timeout(timeout) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Error::ApplyTimedOut {
                seconds: timeout.as_secs_f64(),
            }),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(Error::ForwarderStopped),
        }
    }
}

/// Refuses `next` where it does not fit the filters attached with `room` for `running`:
/// its sets must be the running ones, its tables within the room.
fn check_fits(running: &RuleSet, next: &RuleSet, room: &SetRoom) -> Result<()> {
    if running.sets() != next.sets() || running.port_sets() != next.port_sets() {
        let names = |r: &RuleSet| {
            let mut n: Vec<String> = r.sets().iter().map(|s| s.name().to_string()).collect();
            n.extend(r.port_sets().iter().map(|s| s.name().to_string()));
            n.join(", ")
        };
        return Err(Error::SetsChanged {
            running: names(running),
            wanted: names(next),
        });
    }
    let outgrown = |wanted: String, room: String| Err(Error::RulesOutgrown { wanted, room });
    if next.limits_sources() && next.source_table() as usize > room.sources {
        return outgrown(
            format!("a per-source table of {} sources", next.source_table()),
            format!("{} sources", room.sources),
        );
    }
    if next.blocks_sources() && next.block_table() as usize > room.blocked {
        return outgrown(
            format!("a block table of {} sources", next.block_table()),
            format!("{} blocked sources", room.blocked),
        );
    }
    if let Some(v) = next.vectors() {
        if v.len() > room.vectors || v.trie_entries() > room.rule_prefixes {
            return outgrown(
                format!(
                    "{} rule vectors and {} IPv6 rule prefixes",
                    v.len(),
                    v.trie_entries()
                ),
                format!("{} and {}", room.vectors, room.rule_prefixes),
            );
        }
    }
    Ok(())
}

impl<K: Kernel> Forwarding<K> {
    /// Answers the applies waiting, between the supervisor's looks.
    pub(crate) fn answer_applies(&mut self) {
        self.resume_if_abandoned();
        while let Ok(request) = self.apply_requests.try_recv() {
            let result = match request.ask {
                Ask::Made(rules) => self.apply(rules).map(Answer::Applied),
                Ask::Text(text) => RuleSet::from_toml_keeping_sets(&text, &self.rules)
                    .map_err(|e| Error::InvalidRules {
                        line: e.line,
                        column: e.column,
                        message: e.message,
                    })
                    .and_then(|rules| self.apply(rules))
                    .map(Answer::Applied),
                Ask::Set(change) => self.change_set(change).map(Answer::Applied),
                Ask::List(name) => self.set_elements(&name).map(Answer::Elements),
                Ask::HandOver => self.handing().map(Answer::Handing),
                Ask::Pause => self.pause_for_successor().map(Answer::Paused),
                Ask::EndHandover(pid) => self.end_handover(pid).map(|()| Answer::Done),
            };
            // The asker may have given up waiting: nothing to tell then.
            let _ = request.answer.try_send(result);
        }
    }

    /// Puts `next` in force, whole, or leaves the running rules untouched and says why.
    pub(crate) fn apply(&mut self, next: RuleSet) -> Result<Applied> {
        check_fits(&self.rules, &next, &self.room)?;
        let names: Vec<&str> = next.rules().iter().map(|r| r.name.as_str()).collect();
        let slots = self.slots.next(&names);
        let share = next
            .kernel_share(self.xdp_forward)
            .passing_to_tap(self.pass_to_tap);
        let kernel = KernelRules::of(&share, Some(&slots.slots))?;
        self.install_everywhere(&kernel, &slots.to_clear)?;
        self.slots.advance(&names, &slots);
        let count = names.len();
        let next = Arc::new(next);
        self.take_up_in_workers(&next);
        self.rules = next;
        self.reasons
            .set(crate::reasons::Reasons::new(self.kernel_share()));
        self.generation = Generation::now(self.generation.number + 1);
        Ok(Applied {
            generation: self.generation.number,
            rules: count,
            kept: slots.kept,
            added: slots.added,
            removed: slots.removed,
        })
    }

    /// The index of the running set `name`.
    fn set_index(&self, name: &str) -> Result<usize> {
        let sets = self.rules.sets();
        sets.iter()
            .position(|s| s.name() == name)
            .ok_or_else(|| Error::NoSuchSet {
                name: name.to_string(),
                sets: sets
                    .iter()
                    .map(|s| s.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Changes a set's elements in place in every filter, then the workers' rules.
    pub(crate) fn change_set(&mut self, change: SetChange) -> Result<Applied> {
        let index = self.set_index(&change.set)?;
        let now = xskit_os::monotonic_coarse_ns();
        let set = self.rules.sets()[index]
            .changed(&change.add, &change.del, change.timeout, now)
            .map_err(|e| Error::InvalidElement {
                set: change.set.clone(),
                position: e.line,
                message: e.message,
            })?;
        let next = self.rules.with_set(index, Arc::new(set));
        for (i, filter) in self.filters.iter().enumerate() {
            if let Err(e) = filter.set_sets(next.sets()) {
                for earlier in &self.filters[..i] {
                    earlier.set_sets(self.rules.sets())?;
                }
                return Err(e);
            }
        }
        let next = Arc::new(next);
        self.take_up_in_workers(&next);
        self.rules = next;
        self.generation = Generation::now(self.generation.number + 1);
        let count = self.rules.rules().len();
        Ok(Applied {
            generation: self.generation.number,
            rules: count,
            kept: count,
            added: 0,
            removed: 0,
        })
    }

    /// The running set `name`'s elements, for people.
    fn set_elements(&self, name: &str) -> Result<Vec<String>> {
        let set = &self.rules.sets()[self.set_index(name)?];
        Ok(set.listed(xskit_os::monotonic_coarse_ns()))
    }

    /// Installs `kernel` in every filter, `to_clear` cleared first. A filter that fails
    /// gets the running rules back, as do those before it, so that every interface keeps
    /// running one set.
    fn install_everywhere(&self, kernel: &KernelRules, to_clear: &[u16]) -> Result<()> {
        for (i, filter) in self.filters.iter().enumerate() {
            let done = filter
                .reset_slots(to_clear)
                .and_then(|()| self._kernel.install(filter, kernel));
            if let Err(e) = done {
                let running = self.running_kernel_rules()?;
                for earlier in &self.filters[..=i] {
                    self._kernel.install(earlier, &running)?;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// The kernel's share of the rules in force, in their slots.
    fn running_kernel_rules(&self) -> Result<KernelRules> {
        KernelRules::of(&self.kernel_share(), Some(self.slots.in_force()))
    }

    /// Publishes `next` for the workers, with their counters and the rate limiters carried
    /// over by name.
    fn take_up_in_workers(&mut self, next: &Arc<RuleSet>) {
        self.limiters = Arc::new(crate::rule_state::limiters(next, Some(&self.limiters)));
        let cells: Vec<Arc<ByRule<RuleCells>>> = self
            .cells
            .iter()
            .map(|w| {
                let carried =
                    ByRule::carried(next, Some(&w.rules), |_, _| true, |_| RuleCells::default());
                Arc::new(carried)
            })
            .collect();
        for (w, c) in self.cells.iter_mut().zip(&cells) {
            w.rules = Arc::clone(c);
        }
        self.live.publish(RulesNow {
            rules: Arc::clone(next),
            limiters: Arc::clone(&self.limiters),
            cells,
        });
    }
}
