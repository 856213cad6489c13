//! ARP monitoring, bonding's `arp_interval` and `arp_ip_target`: every interval each member
//! asks the targets for their MAC address, and a member whose targets stop answering is
//! taken out after `arp_missed_max` checks in a row, even while its carrier stays up (a dead
//! switch uplink, a port moved to another VLAN). One answered check brings it back.
//!
//! The decisions are here, without I/O: the caller sends [`arp_probe`] frames out of each
//! member and, at each check, hands over how many ARP packets from a target each member has
//! received so far (a counter the receive path keeps, in XDP for the forwarder).

use std::net::Ipv4Addr;
use std::time::Duration;

use xskit::Interface;
use xskit_os::packet::PacketTx;
#[cfg(test)]
use xskit_wire::{arp, ethernet};

use crate::{Error, Result};

/// The most targets, as Linux's `BOND_MAX_ARP_TARGETS`.
pub const MAX_ARP_TARGETS: usize = 16;

/// ARP monitoring's settings, named as in Linux's bonding.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArpConfig {
    /// How often every member checks its targets (`arp_interval`).
    pub interval: Duration,
    /// The addresses asked (`arp_ip_target`, 1 to 16).
    pub targets: Vec<Ipv4Addr>,
    /// Checks in a row without an answer that take a member out (`arp_missed_max`, 1 to 255;
    /// Linux's default is 2).
    pub missed_max: u32,
}

impl ArpConfig {
    /// Checks every `interval` for `targets`, out after 2 missed checks.
    pub fn new(interval: Duration, targets: Vec<Ipv4Addr>) -> Self {
        ArpConfig {
            interval,
            targets,
            missed_max: 2,
        }
    }

    /// Sets the checks that must fail in a row.
    pub fn missed_max(mut self, missed_max: u32) -> Self {
        self.missed_max = missed_max;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        let why = if self.interval.is_zero() {
            Some("arp_interval must be more than 0 ms".to_string())
        } else if self.targets.is_empty() || self.targets.len() > MAX_ARP_TARGETS {
            Some(format!(
                "ARP monitoring takes 1 to {MAX_ARP_TARGETS} arp_ip_target addresses, not {}",
                self.targets.len()
            ))
        } else if let Some(t) = self
            .targets
            .iter()
            .find(|t| t.is_unspecified() || t.is_broadcast() || t.is_multicast())
        {
            Some(format!(
                "arp_ip_target {t} is not a host's address: give the address of a host that \
                 answers ARP (a gateway, a neighbour)"
            ))
        } else if self.missed_max == 0 || self.missed_max > 255 {
            Some(format!(
                "arp_missed_max is 1 to 255, not {}",
                self.missed_max
            ))
        } else {
            None
        };
        match why {
            Some(reason) => Err(Error::ArpConfig { reason }),
            None => Ok(()),
        }
    }
}

/// An ARP probe (RFC 5227) from `mac` for `target`: sender address 0.0.0.0, so it asks
/// without claiming an address; Linux answers it with a reply to `mac` whose target address
/// is 0.0.0.0.
pub fn arp_probe(mac: [u8; 6], target: Ipv4Addr) -> [u8; 42] {
    crate::announce::arp_request(mac, [0; 4], target.octets())
}

/// Sends the probes: one AF_PACKET socket per member, a probe per target from the member's
/// own MAC address.
#[derive(Debug)]
pub struct ArpProber {
    members: Vec<(PacketTx, Vec<[u8; 42]>)>,
}

impl ArpProber {
    /// Opens a socket on each of `members` (in the calling thread's namespace).
    pub fn open(members: &[Interface], targets: &[Ipv4Addr]) -> Result<Self> {
        let members = members
            .iter()
            .map(|m| {
                let mac = m.link_info()?.mac.unwrap_or([0; 6]);
                let probes = targets.iter().map(|&t| arp_probe(mac, t)).collect();
                Ok((PacketTx::open(m.index())?, probes))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ArpProber { members })
    }

    /// Sends every member's probes; a member whose link cannot send (down) is skipped: its
    /// silence is what the monitor is there to notice.
    pub fn send(&self) {
        for (tx, probes) in &self.members {
            for p in probes {
                let _ = tx.send_copies(p, 1);
            }
        }
    }
}

/// The members' ARP state, check by check.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ArpMonitor {
    missed_max: u32,
    /// Each member's count of ARP packets from a target at the last check.
    seen: Vec<u64>,
    /// Checks in a row each member has missed.
    missed: Vec<u32>,
    up: Vec<bool>,
}

impl ArpMonitor {
    /// `members` members, all up until they miss `missed_max` checks.
    pub fn new(members: usize, missed_max: u32) -> Self {
        ArpMonitor {
            missed_max: missed_max.max(1),
            seen: vec![0; members],
            missed: vec![0; members],
            up: vec![true; members],
        }
    }

    /// One check: `counts[m]` is member m's count of ARP packets from a target so far.
    /// Returns the members whose state changed; [`ArpMonitor::up`] has the states.
    pub fn check(&mut self, counts: &[u64]) -> Vec<usize> {
        let mut changed = Vec::new();
        for (m, &count) in counts.iter().enumerate().take(self.up.len()) {
            let answered = count != self.seen[m];
            self.seen[m] = count;
            self.missed[m] = if answered { 0 } else { self.missed[m] + 1 };
            let up = self.missed[m] < self.missed_max;
            if up != self.up[m] {
                self.up[m] = up;
                changed.push(m);
            }
        }
        changed
    }

    /// Each member's ARP state.
    pub fn up(&self) -> &[bool] {
        &self.up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_goes_down_after_missed_max_silent_checks_and_up_after_one_answer() {
        let mut m = ArpMonitor::new(2, 2);
        assert!(m.check(&[1, 1]).is_empty(), "both answered");
        assert!(m.check(&[1, 2]).is_empty(), "member 0 missed one check");
        assert_eq!(m.check(&[1, 3]), vec![0], "and a second: down");
        assert_eq!(m.up(), &[false, true]);
        assert!(m.check(&[1, 4]).is_empty(), "still silent, still down");
        assert_eq!(m.check(&[2, 5]), vec![0], "one answer brings it back");
        assert_eq!(m.up(), &[true, true]);
    }

    #[test]
    fn missed_max_one_takes_a_member_out_at_the_first_silent_check() {
        let mut m = ArpMonitor::new(1, 1);
        assert_eq!(m.check(&[0]), vec![0]);
        assert_eq!(m.up(), &[false]);
    }

    #[test]
    fn a_probe_asks_without_claiming_an_address() {
        let f = arp_probe([2, 0, 0, 0, 0, 7], Ipv4Addr::new(203, 0, 113, 10));
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), [0xff; 6]);
        assert_eq!(eth.src_addr(), [2, 0, 0, 0, 0, 7]);
        let a = arp::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(a.operation(), arp::operation::REQUEST);
        assert_eq!(a.sender_ip(), [0; 4]);
        assert_eq!(a.target_ip(), [203, 0, 113, 10]);
        assert_eq!(a.sender_mac(), [2, 0, 0, 0, 0, 7]);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let ok = ArpConfig::new(
            Duration::from_millis(100),
            vec![Ipv4Addr::new(203, 0, 113, 1)],
        );
        assert!(ok.validate().is_ok());
        for (bad, why) in [
            (ok.clone().missed_max(0), "arp_missed_max"),
            (
                ArpConfig::new(Duration::ZERO, ok.targets.clone()),
                "more than 0",
            ),
            (ArpConfig::new(ok.interval, vec![]), "1 to 16"),
            (
                ArpConfig::new(ok.interval, vec![Ipv4Addr::BROADCAST]),
                "not a host's address",
            ),
            (
                ArpConfig::new(ok.interval, vec![ok.targets[0]; 17]),
                "not 17",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
