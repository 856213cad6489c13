//! [`Lacp`] on real members: driven by the monotonic clock, its frames in and out through an
//! AF_PACKET socket per member bound to the slow protocols' EtherType. The frames reach
//! those sockets because xskit's XDP programs pass them to the kernel (the packet workers
//! never see them), and leave through the member's own device.

use std::time::Instant;

use xskit::Interface;
use xskit_os::packet::PacketProtocolSocket;
use xskit_wire::lacp as wire;

use super::{Lacp, LacpConfig, Received};
use crate::{LinkSpeed, Result};

/// A bond's LACP at work on its members.
#[derive(Debug)]
pub struct LacpControl {
    lacp: Lacp,
    sockets: Vec<PacketProtocolSocket>,
    start: Instant,
    distributing: Vec<bool>,
    /// Frames that could not be sent (a member down or gone).
    pub send_errors: u64,
}

impl LacpControl {
    /// Opens a slow protocols socket on each of `members` (in the calling thread's
    /// namespace); the system is `system` (the bond's MAC address). Links start down: tell
    /// it each member's with [`LacpControl::set_link`].
    pub fn open(config: LacpConfig, system: [u8; 6], members: &[Interface]) -> Result<Self> {
        config.validate()?;
        let macs = members
            .iter()
            .map(|m| Ok(m.link_info()?.mac.unwrap_or([0; 6])))
            .collect::<Result<Vec<_>>>()?;
        let sockets = members
            .iter()
            .map(|m| PacketProtocolSocket::open(m.index(), wire::ETHERTYPE))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LacpControl {
            lacp: Lacp::new(config, system, &macs),
            sockets,
            start: Instant::now(),
            distributing: vec![false; members.len()],
            send_errors: 0,
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Member `member`'s carrier went up (at `speed`) or down.
    pub fn set_link(&mut self, member: usize, up: bool, speed: LinkSpeed) {
        let now = self.now();
        self.lacp.set_link(member, up, speed, now);
    }

    /// Takes what arrived, runs the machines to now and sends what they say; true when the
    /// members that distribute changed ([`LacpControl::distributing`]).
    pub fn poll(&mut self) -> bool {
        let mut buf = [0u8; 256];
        let now = self.now();
        for member in 0..self.sockets.len() {
            // A socket error (the member going away) ends this member's reading; the link
            // monitor reports the member itself.
            while let Ok(Some(len)) = self.sockets[member].recv(&mut buf) {
                if let Received::MarkerResponse(frame) = self.lacp.receive(member, &buf[..len], now)
                {
                    self.send(member, &frame);
                }
            }
        }
        for (member, frame) in self.lacp.step(now) {
            self.send(member, &frame);
        }
        let distributing = self.lacp.distributing();
        if distributing == self.distributing {
            return false;
        }
        self.distributing = distributing;
        true
    }

    fn send(&mut self, member: usize, frame: &[u8]) {
        if self.sockets[member].send(frame).is_err() {
            self.send_errors += 1;
        }
    }

    /// Per member, whether it carries traffic.
    pub fn distributing(&self) -> &[bool] {
        &self.distributing
    }

    /// The machines' state.
    pub fn lacp(&self) -> &Lacp {
        &self.lacp
    }
}
