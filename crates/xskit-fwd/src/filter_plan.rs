//! What each kernel filter is told as the bonds change, as plain data: whether it drops what
//! arrives (an inactive member), passes LACP up (an 802.3ad member), and where it forwards
//! in XDP (the other side's usable members, and how it spreads over them). Computed from
//! the sides' states without I/O and applied through [`FilterControl`], which the kernel
//! filter implements and the tests fake.

use xskit_bond::BondMode;

use crate::error::Result;
use crate::filter::{TxSpread, XdpFilter};

/// A bond side's state as its controller last published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BondState {
    pub(crate) mode: BondMode,
    /// Per member: carrier (and ARP targets, where monitored; LACP: distributing).
    pub(crate) up: Vec<bool>,
    /// active-backup's active member.
    pub(crate) active: Option<usize>,
}

/// One side of the forwarder: its interfaces' indices (a bond's members in order) and its
/// bond, if it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SideState {
    pub(crate) ifindexes: Vec<u32>,
    pub(crate) bond: Option<BondState>,
}

/// What one filter is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FilterSettings {
    /// Drop what arrives: an active-backup member that is not active, or an 802.3ad member
    /// that is not collecting.
    pub(crate) inactive: bool,
    /// Pass slow-protocol frames (LACP) to the kernel's socket.
    pub(crate) lacp: bool,
    /// With forwarding in XDP: the interfaces it forwards out of, and how it picks one.
    pub(crate) forward_out: Option<(Vec<u32>, TxSpread)>,
}

/// The forwarding half of a filter's settings: where a packet forwarded in XDP towards
/// `side` leaves.
fn tx_plan(side: &SideState) -> (Vec<u32>, TxSpread) {
    let Some(bond) = &side.bond else {
        return (side.ifindexes[..1].to_vec(), TxSpread::One { slot: 0 });
    };
    let usable: Vec<usize> = (0..side.ifindexes.len())
        .filter(|&m| bond.up.get(m).copied().unwrap_or(false))
        .collect();
    let spread = match bond.mode {
        BondMode::BalanceXor { policy } | BondMode::Lacp { policy } => TxSpread::Xor(policy),
        BondMode::BalanceRr { packets_per_slave } => TxSpread::Rr { packets_per_slave },
        // active-backup (broadcast is refused with forwarding in XDP).
        _ => TxSpread::One {
            slot: bond
                .active
                .and_then(|a| usable.iter().position(|&u| u == a))
                .unwrap_or(0),
        },
    };
    (usable.iter().map(|&m| side.ifindexes[m]).collect(), spread)
}

/// Every filter's settings, sides in order and a side's members in order.
pub(crate) fn filter_settings(sides: &[SideState], xdp_forward: bool) -> Vec<FilterSettings> {
    let mut out = Vec::new();
    for (s, side) in sides.iter().enumerate() {
        let forward_out = (xdp_forward && sides.len() == 2).then(|| tx_plan(&sides[1 - s]));
        for m in 0..side.ifindexes.len() {
            let (inactive, lacp) = match &side.bond {
                Some(b) => match b.mode {
                    BondMode::ActiveBackup => (b.active != Some(m), false),
                    // 802.3ad collects only on the members that distribute.
                    BondMode::Lacp { .. } => (!b.up.get(m).copied().unwrap_or(false), true),
                    _ => (false, false),
                },
                None => (false, false),
            };
            out.push(FilterSettings {
                inactive,
                lacp,
                forward_out: forward_out.clone(),
            });
        }
    }
    out
}

/// Where a filter's settings go: the kernel filter's maps, or a test's record.
pub(crate) trait FilterControl {
    /// Applies `settings`, the forwarding target before the rest.
    fn apply(&self, settings: &FilterSettings) -> Result<()>;
}

impl FilterControl for XdpFilter {
    fn apply(&self, settings: &FilterSettings) -> Result<()> {
        self.set_lacp(settings.lacp)?;
        self.set_inactive(settings.inactive)?;
        if let Some((usable, spread)) = &settings.forward_out {
            self.set_forward_out(usable, *spread)?;
        }
        Ok(())
    }
}

/// Applies every filter's settings, in order.
pub(crate) fn program<F: FilterControl>(
    filters: &[F],
    sides: &[SideState],
    xdp_forward: bool,
) -> Result<()> {
    for (filter, settings) in filters.iter().zip(filter_settings(sides, xdp_forward)) {
        filter.apply(&settings)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use xskit_bond::XmitHashPolicy;

    use super::*;

    /// A filter that records what it was told.
    #[derive(Default)]
    struct Recorded(RefCell<Vec<FilterSettings>>);

    impl FilterControl for Recorded {
        fn apply(&self, settings: &FilterSettings) -> Result<()> {
            self.0.borrow_mut().push(settings.clone());
            Ok(())
        }
    }

    fn plain(ifindex: u32) -> SideState {
        SideState {
            ifindexes: vec![ifindex],
            bond: None,
        }
    }

    fn bonded(mode: BondMode, up: &[bool], active: Option<usize>) -> SideState {
        SideState {
            ifindexes: (10..10 + up.len() as u32).collect(),
            bond: Some(BondState {
                mode,
                up: up.to_vec(),
                active,
            }),
        }
    }

    #[test]
    fn two_plain_sides_forward_to_each_other_in_xdp_only_when_asked() {
        let sides = [plain(1), plain(2)];
        let on = filter_settings(&sides, true);
        assert_eq!(
            on[0].forward_out,
            Some((vec![2], TxSpread::One { slot: 0 }))
        );
        assert_eq!(
            on[1].forward_out,
            Some((vec![1], TxSpread::One { slot: 0 }))
        );
        assert!(on.iter().all(|s| !s.inactive && !s.lacp));
        assert!(filter_settings(&sides, false)
            .iter()
            .all(|s| s.forward_out.is_none()));
    }

    #[test]
    fn an_active_backup_failover_moves_the_inactive_flag_and_the_forwarding_slot() {
        let before = [
            bonded(BondMode::ActiveBackup, &[true, true], Some(0)),
            plain(2),
        ];
        let after = [
            bonded(BondMode::ActiveBackup, &[false, true], Some(1)),
            plain(2),
        ];
        let (b, a) = (
            filter_settings(&before, true),
            filter_settings(&after, true),
        );
        assert_eq!((b[0].inactive, b[1].inactive), (false, true));
        assert_eq!((a[0].inactive, a[1].inactive), (true, false));
        // c's filter forwards towards the bond: out of member 1, the only usable one.
        assert_eq!(
            b[2].forward_out,
            Some((vec![10, 11], TxSpread::One { slot: 0 }))
        );
        assert_eq!(
            a[2].forward_out,
            Some((vec![11], TxSpread::One { slot: 0 }))
        );
    }

    #[test]
    fn lacp_members_pass_lacp_up_and_collect_only_while_distributing() {
        let policy = XmitHashPolicy::Layer34;
        let sides = [
            bonded(BondMode::Lacp { policy }, &[true, false, true], None),
            plain(2),
        ];
        let s = filter_settings(&sides, true);
        assert!(s[..3].iter().all(|m| m.lacp));
        assert_eq!(
            s[..3].iter().map(|m| m.inactive).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert_eq!(
            s[3].forward_out,
            Some((vec![10, 12], TxSpread::Xor(policy)))
        );
    }

    #[test]
    fn round_robin_and_no_usable_member_are_told_as_they_are() {
        let rr = BondMode::BalanceRr {
            packets_per_slave: 3,
        };
        let sides = [plain(1), bonded(rr, &[false, false], None)];
        let s = filter_settings(&sides, true);
        assert_eq!(
            s[0].forward_out,
            Some((
                vec![],
                TxSpread::Rr {
                    packets_per_slave: 3
                }
            ))
        );
        assert!(!s[1].inactive && !s[2].inactive);
    }

    #[test]
    fn program_tells_each_filter_its_own_settings_in_order() {
        let sides = [
            bonded(BondMode::ActiveBackup, &[true, true], Some(1)),
            plain(2),
        ];
        let filters: Vec<Recorded> = (0..3).map(|_| Recorded::default()).collect();
        program(&filters, &sides, false).unwrap();
        let told: Vec<bool> = filters.iter().map(|f| f.0.borrow()[0].inactive).collect();
        assert_eq!(told, [true, false, false]);
        assert!(filters.iter().all(|f| f.0.borrow().len() == 1));
    }
}
