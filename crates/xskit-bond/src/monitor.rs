//! Link monitoring for a bond: the members' carrier from the kernel's link notifications
//! (bonding's miimon/use_carrier, but event-driven: a carrier loss is seen when the kernel
//! announces it, not at the next poll), with bonding's `updelay` and `downdelay`.

use std::time::{Duration, Instant};

use xskit::netlink::LinkEvents;
use xskit::Interface;

use crate::Result;

/// A member's carrier changed, after its delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberChange {
    /// The member (its index in the bond).
    pub member: usize,
    /// Carrier up (and the link administratively up).
    pub up: bool,
    /// The link was deleted or left the namespace (reported as down).
    pub removed: bool,
}

/// Bonding's `updelay` and `downdelay` over the members' reported states: a change is
/// reported once it has lasted its delay; a flap shorter than that is never reported.
/// Times are any monotonic clock's, as durations since its start.
#[derive(Clone, Debug)]
pub struct LinkDelays {
    /// The state last reported per member.
    reported: Vec<bool>,
    /// A change waiting out its delay: (the state it goes to, when).
    pending: Vec<Option<(bool, Duration)>>,
    updelay: Duration,
    downdelay: Duration,
}

impl LinkDelays {
    /// Members whose states are `reported` to begin with.
    pub fn new(reported: Vec<bool>, updelay: Duration, downdelay: Duration) -> Self {
        LinkDelays {
            pending: vec![None; reported.len()],
            reported,
            updelay,
            downdelay,
        }
    }

    /// Each member's state as last reported.
    pub fn up(&self) -> &[bool] {
        &self.reported
    }

    /// When the next pending change falls due, if any is pending.
    pub fn next_due(&self) -> Option<Duration> {
        self.pending.iter().flatten().map(|&(_, at)| at).min()
    }

    /// What the kernel said of `member` at `now`: its link `up` or not, or `removed`
    /// (reported at once, as down). Returns the change to report now, if any.
    pub fn event(
        &mut self,
        member: usize,
        up: bool,
        removed: bool,
        now: Duration,
    ) -> Option<MemberChange> {
        if removed {
            self.pending[member] = None;
            self.reported[member] = false;
            return Some(MemberChange {
                member,
                up: false,
                removed: true,
            });
        }
        if up == self.reported[member] {
            // A flap shorter than the delay: nothing to report.
            self.pending[member] = None;
        } else if self.pending[member].is_none_or(|(to, _)| to != up) {
            let delay = if up { self.updelay } else { self.downdelay };
            self.pending[member] = Some((up, now + delay));
        }
        None
    }

    /// The pending changes whose delay has run out by `now`, reported.
    pub fn due(&mut self, now: Duration) -> Vec<MemberChange> {
        let mut changes = Vec::new();
        for member in 0..self.pending.len() {
            if let Some((up, at)) = self.pending[member] {
                if at <= now {
                    self.pending[member] = None;
                    self.reported[member] = up;
                    changes.push(MemberChange {
                        member,
                        up,
                        removed: false,
                    });
                }
            }
        }
        changes
    }
}

/// Watches the members' links; [`LinkMonitor::poll`] returns the changes to apply to the
/// bond ([`crate::XdpBond::set_up`], [`crate::BondPort::set_up`]).
#[derive(Debug)]
pub struct LinkMonitor {
    events: LinkEvents,
    ifindexes: Vec<u32>,
    delays: LinkDelays,
    start: Instant,
}

impl LinkMonitor {
    /// Starts watching `members` (in the calling thread's namespace). A member counts as up
    /// when its link is up and has carrier; `updelay`/`downdelay` are how long a change must
    /// last before it is reported (0: at once), as in bonding.
    pub fn new(members: &[Interface], updelay: Duration, downdelay: Duration) -> Result<Self> {
        // Subscribe first, so no change between the reads below and the subscription is lost.
        let events = LinkEvents::subscribe()?;
        let reported = members
            .iter()
            .map(|m| m.link_info().map(|l| l.admin_up && l.carrier))
            .collect::<xskit::Result<Vec<bool>>>()?;
        Ok(LinkMonitor {
            events,
            ifindexes: members.iter().map(Interface::index).collect(),
            delays: LinkDelays::new(reported, updelay, downdelay),
            start: Instant::now(),
        })
    }

    /// Each member's state as last reported.
    pub fn up(&self) -> &[bool] {
        self.delays.up()
    }

    /// Waits up to `timeout` for the next changes (a link event, or a delay running out)
    /// and returns them; empty when nothing changed in time.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<Vec<MemberChange>> {
        let now = self.start.elapsed();
        let changes = self.delays.due(now);
        if !changes.is_empty() {
            return Ok(changes);
        }
        let until_due = self.delays.next_due().map(|at| at.saturating_sub(now));
        let wait = match (timeout, until_due) {
            (t, None) => t,
            (None, due) => due,
            (Some(t), Some(due)) => Some(t.min(due)),
        };
        if let Some(event) = self.events.next(wait)? {
            if let Some(member) = self.ifindexes.iter().position(|&i| i == event.link.ifindex) {
                let up = event.link.admin_up && event.link.carrier;
                let now = self.start.elapsed();
                if let Some(removed) = self.delays.event(member, up, event.removed, now) {
                    return Ok(vec![removed]);
                }
            }
        }
        Ok(self.delays.due(self.start.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn member(member: usize, up: bool) -> MemberChange {
        MemberChange {
            member,
            up,
            removed: false,
        }
    }

    #[test]
    fn a_change_is_reported_once_it_has_lasted_its_delay() {
        let mut d = LinkDelays::new(vec![true, true], 200 * MS, 50 * MS);
        assert_eq!(d.event(0, false, false, 10 * MS), None);
        assert_eq!(
            d.next_due(),
            Some(60 * MS),
            "downdelay from when it went down"
        );
        assert!(d.due(59 * MS).is_empty());
        assert_eq!(d.due(60 * MS), vec![member(0, false)]);
        assert_eq!(d.up(), &[false, true]);

        d.event(0, true, false, 100 * MS);
        assert!(d.due(299 * MS).is_empty(), "updelay: 200 ms");
        assert_eq!(d.due(300 * MS), vec![member(0, true)]);
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_flap_shorter_than_the_delay_is_never_reported_and_a_repeat_keeps_its_deadline() {
        let mut d = LinkDelays::new(vec![true], Duration::ZERO, 100 * MS);
        d.event(0, false, false, Duration::ZERO);
        d.event(0, false, false, 90 * MS);
        assert_eq!(
            d.next_due(),
            Some(100 * MS),
            "the first down starts the clock"
        );
        d.event(0, true, false, 95 * MS);
        assert_eq!(d.next_due(), None);
        assert!(d.due(500 * MS).is_empty());
        assert_eq!(d.up(), &[true]);
    }

    #[test]
    fn no_delay_reports_at_once_and_a_removed_link_is_down_whatever_was_pending() {
        let mut d = LinkDelays::new(vec![false, true], Duration::ZERO, Duration::ZERO);
        d.event(0, true, false, 5 * MS);
        assert_eq!(d.due(5 * MS), vec![member(0, true)]);

        let mut slow = LinkDelays::new(vec![false], 100 * MS, Duration::ZERO);
        slow.event(0, true, false, Duration::ZERO);
        let removed = slow.event(0, true, true, 10 * MS);
        assert_eq!(removed.map(|c| (c.up, c.removed)), Some((false, true)));
        assert_eq!(
            slow.next_due(),
            None,
            "nothing pending for a link that is gone"
        );
        assert!(slow.due(200 * MS).is_empty());
    }
}
