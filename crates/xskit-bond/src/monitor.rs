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

/// Watches the members' links; [`LinkMonitor::poll`] returns the changes to apply to the
/// bond ([`crate::XdpBond::set_up`], [`crate::BondPort::set_up`]).
#[derive(Debug)]
pub struct LinkMonitor {
    events: LinkEvents,
    ifindexes: Vec<u32>,
    /// The state last reported per member.
    reported: Vec<bool>,
    /// A change waiting out its delay: (the state it goes to, when).
    pending: Vec<Option<(bool, Instant)>>,
    updelay: Duration,
    downdelay: Duration,
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
            pending: vec![None; members.len()],
            reported,
            updelay,
            downdelay,
        })
    }

    /// Each member's state as last reported.
    pub fn up(&self) -> &[bool] {
        &self.reported
    }

    /// Waits up to `timeout` for the next changes (a link event, or a delay running out)
    /// and returns them; empty when nothing changed in time.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<Vec<MemberChange>> {
        let mut changes = Vec::new();
        let now = Instant::now();
        self.due(now, &mut changes);
        if !changes.is_empty() {
            return Ok(changes);
        }
        let next_due = self.pending.iter().flatten().map(|&(_, at)| at).min();
        let wait = match (timeout, next_due) {
            (t, None) => t,
            (None, Some(at)) => Some(at.saturating_duration_since(now)),
            (Some(t), Some(at)) => Some(t.min(at.saturating_duration_since(now))),
        };
        if let Some(event) = self.events.next(wait)? {
            if let Some(member) = self.ifindexes.iter().position(|&i| i == event.link.ifindex) {
                let up = !event.removed && event.link.admin_up && event.link.carrier;
                if event.removed {
                    self.pending[member] = None;
                    if self.reported[member] {
                        self.reported[member] = false;
                    }
                    changes.push(MemberChange {
                        member,
                        up: false,
                        removed: true,
                    });
                    return Ok(changes);
                }
                if up == self.reported[member] {
                    // A flap shorter than the delay: nothing to report.
                    self.pending[member] = None;
                } else if self.pending[member].is_none_or(|(to, _)| to != up) {
                    let delay = if up { self.updelay } else { self.downdelay };
                    self.pending[member] = Some((up, Instant::now() + delay));
                }
            }
        }
        self.due(Instant::now(), &mut changes);
        Ok(changes)
    }

    fn due(&mut self, now: Instant, changes: &mut Vec<MemberChange>) {
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
    }
}
