//! A bond controller's decisions as plain logic: which members are up (carrier, ARP targets
//! answering where monitored, LACP distributing under 802.3ad) and which is active, from the
//! events its I/O reports. No sockets and no clock: the controller
//! ([`crate::bond_runtime::BondRuntime`]) feeds it, publishes what it decides, and announces a
//! failover; the tests feed it directly.

use xskit_bond::{LinkSpeed, PrimaryReselect};

/// The members' states and the active member, with the changes counted.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct BondDecisions {
    carrier: Vec<bool>,
    /// Per member, whether its ARP targets answer (None: not monitored).
    arp_up: Option<Vec<bool>>,
    /// Per member, whether LACP lets it distribute (None: not 802.3ad).
    distributing: Option<Vec<bool>>,
    up: Vec<bool>,
    active: Option<usize>,
    primary: Option<usize>,
    reselect: PrimaryReselect,
    speeds: Vec<LinkSpeed>,
    /// Times the active member changed since the start.
    pub(crate) failovers: u64,
    /// Member changes (carrier or ARP) since the start.
    pub(crate) link_changes: u64,
}

impl BondDecisions {
    /// The first decisions: `carrier` and `speeds` per member, the `primary` and its
    /// reselection rule; ARP monitoring starts with every member answering, LACP (given the
    /// distributing members) as it says.
    pub(crate) fn new(
        carrier: Vec<bool>,
        speeds: Vec<LinkSpeed>,
        primary: Option<usize>,
        reselect: PrimaryReselect,
        arp: bool,
        distributing: Option<Vec<bool>>,
    ) -> Self {
        let members = carrier.len();
        let mut d = BondDecisions {
            arp_up: arp.then(|| vec![true; members]),
            distributing,
            up: carrier.clone(),
            carrier,
            active: None,
            primary,
            reselect,
            speeds,
            failovers: 0,
            link_changes: 0,
        };
        d.settle(0);
        d.failovers = 0;
        d
    }

    /// Member `m`'s carrier changed; a link that comes back may come back at another `speed`.
    pub(crate) fn set_carrier(&mut self, m: usize, up: bool, speed: LinkSpeed) {
        self.carrier[m] = up;
        if up {
            self.speeds[m] = speed;
        }
    }

    /// ARP monitoring's verdict per member.
    pub(crate) fn set_arp_up(&mut self, up: &[bool]) {
        self.arp_up = Some(up.to_vec());
    }

    /// 802.3ad: the members LACP lets distribute.
    pub(crate) fn set_distributing(&mut self, distributing: &[bool]) {
        self.distributing = Some(distributing.to_vec());
    }

    /// Decides again after `changes` member changes. Returns the new active member when
    /// another member was active before (a failover to announce).
    pub(crate) fn settle(&mut self, changes: usize) -> Option<usize> {
        self.link_changes += changes as u64;
        for (m, up) in self.up.iter_mut().enumerate() {
            *up = self.carrier[m]
                && self.arp_up.as_ref().is_none_or(|a| a[m])
                && self.distributing.as_ref().is_none_or(|d| d[m]);
        }
        let before = self.active;
        self.active = xskit_bond::choose_active(
            &self.up,
            self.active,
            self.primary,
            self.reselect,
            &self.speeds,
        );
        if self.active == before {
            return None;
        }
        self.failovers += 1;
        before.and(self.active)
    }

    pub(crate) fn up(&self) -> &[bool] {
        &self.up
    }

    pub(crate) fn carrier(&self) -> &[bool] {
        &self.carrier
    }

    pub(crate) fn active(&self) -> Option<usize> {
        self.active
    }

    pub(crate) fn speed(&self, m: usize) -> LinkSpeed {
        self.speeds[m]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bond(members: usize, primary: Option<usize>, reselect: PrimaryReselect) -> BondDecisions {
        BondDecisions::new(
            vec![true; members],
            vec![Some((1000, true)); members],
            primary,
            reselect,
            false,
            None,
        )
    }

    #[test]
    fn the_active_member_fails_over_on_carrier_loss_and_stays() {
        let mut b = bond(2, None, PrimaryReselect::Always);
        assert_eq!((b.active(), b.failovers), (Some(0), 0));
        b.set_carrier(0, false, None);
        assert_eq!(b.settle(1), Some(1), "announced from member 1");
        assert_eq!(
            (b.up(), b.failovers, b.link_changes),
            (&[false, true][..], 1, 1)
        );
        b.set_carrier(0, true, Some((1000, true)));
        assert_eq!(b.settle(1), None, "no primary: the active member stays");
        assert_eq!(b.active(), Some(1));
    }

    #[test]
    fn the_primary_takes_over_again_as_reselect_says() {
        for (reselect, back) in [
            (PrimaryReselect::Always, Some(0)),
            (PrimaryReselect::Failure, Some(1)),
            (PrimaryReselect::Better, Some(1)),
        ] {
            let mut b = bond(2, Some(0), reselect);
            b.set_carrier(0, false, None);
            b.settle(1);
            // The primary comes back slower than the active member.
            b.set_carrier(0, true, Some((100, true)));
            b.settle(1);
            assert_eq!(b.active(), back, "{reselect:?}");
        }
    }

    #[test]
    fn a_member_whose_arp_targets_are_silent_is_down_whatever_its_carrier() {
        let mut b = BondDecisions::new(
            vec![true, true],
            vec![None, None],
            None,
            PrimaryReselect::Always,
            true,
            None,
        );
        b.set_arp_up(&[false, true]);
        assert_eq!(b.settle(1), Some(1));
        assert_eq!(b.carrier(), &[true, true]);
        assert_eq!(b.up(), &[false, true]);
    }

    #[test]
    fn under_lacp_only_distributing_members_are_up() {
        let mut b = BondDecisions::new(
            vec![true, true, true],
            vec![None; 3],
            None,
            PrimaryReselect::Always,
            false,
            Some(vec![false, false, false]),
        );
        assert_eq!((b.up(), b.active()), (&[false, false, false][..], None));
        b.set_distributing(&[true, false, true]);
        assert_eq!(b.settle(0), None, "a first active member is no failover");
        assert_eq!(b.up(), &[true, false, true]);
        assert_eq!(b.link_changes, 0);
    }

    #[test]
    fn every_member_down_leaves_no_active_member() {
        let mut b = bond(2, None, PrimaryReselect::Always);
        b.set_carrier(0, false, None);
        b.set_carrier(1, false, None);
        assert_eq!(b.settle(2), None);
        assert_eq!((b.active(), b.failovers), (None, 1));
        b.set_carrier(1, true, None);
        assert_eq!(b.settle(1), None, "back from none: nothing to announce");
        assert_eq!(b.active(), Some(1));
    }
}
