//! [`Lacp`] on real members: its frames in and out through [`SlowFrames`], on the caller's
//! clock. [`SlowSockets`] are the real frames: an AF_PACKET socket per member bound to the
//! slow protocols' EtherType. The frames reach those sockets because xskit's XDP programs
//! pass them to the kernel (the packet workers never see them), and leave through the
//! member's own device.

use xskit::Interface;
use xskit_os::packet::PacketProtocolSocket;
use xskit_wire::lacp as wire;

use super::{Lacp, LacpConfig, Received};
use crate::{LinkSpeed, Result};

/// Where a bond's slow-protocol frames come from and go to, per member.
pub trait SlowFrames {
    /// The next frame that arrived on `member` into `buf`, its length; `None` when there
    /// is none (or the member cannot be read: the link monitor reports the member itself).
    fn recv(&mut self, member: usize, buf: &mut [u8]) -> Option<usize>;
    /// Sends `frame` from `member`; false if it could not be sent.
    fn send(&mut self, member: usize, frame: &[u8]) -> bool;
}

/// A slow protocols socket on each member.
#[derive(Debug)]
pub struct SlowSockets(Vec<PacketProtocolSocket>);

impl SlowSockets {
    /// Opens a socket on each of `members` (in the calling thread's namespace).
    pub fn open(members: &[Interface]) -> Result<Self> {
        let sockets = members
            .iter()
            .map(|m| PacketProtocolSocket::open(m.index(), wire::ETHERTYPE))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SlowSockets(sockets))
    }
}

impl SlowFrames for SlowSockets {
    fn recv(&mut self, member: usize, buf: &mut [u8]) -> Option<usize> {
        self.0[member].recv(buf).ok().flatten()
    }

    fn send(&mut self, member: usize, frame: &[u8]) -> bool {
        self.0[member].send(frame).is_ok()
    }
}

/// A bond's LACP at work: the machines, the members that distribute, and the frames that
/// could not be sent.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LacpControl {
    lacp: Lacp,
    distributing: Vec<bool>,
    /// Frames that could not be sent (a member down or gone).
    pub send_errors: u64,
}

impl LacpControl {
    /// LACP for members with MAC addresses `macs`; the system is `system` (the bond's MAC
    /// address). Links start down: tell it each member's with [`LacpControl::set_link`].
    pub fn new(config: LacpConfig, system: [u8; 6], macs: &[[u8; 6]]) -> Result<Self> {
        config.validate()?;
        Ok(LacpControl {
            lacp: Lacp::new(config, system, macs),
            distributing: vec![false; macs.len()],
            send_errors: 0,
        })
    }

    /// Member `member`'s carrier went up (at `speed`) or down, at `now_ms`.
    pub fn set_link(&mut self, member: usize, up: bool, speed: LinkSpeed, now_ms: u64) {
        self.lacp.set_link(member, up, speed, now_ms);
    }

    /// Takes what arrived, runs the machines to `now_ms` and sends what they say; true when
    /// the members that distribute changed ([`LacpControl::distributing`]).
    pub fn poll(&mut self, frames: &mut impl SlowFrames, now_ms: u64) -> bool {
        let mut buf = [0u8; 256];
        for member in 0..self.distributing.len() {
            while let Some(len) = frames.recv(member, &mut buf) {
                let len = len.min(buf.len());
                if let Received::MarkerResponse(frame) =
                    self.lacp.receive(member, &buf[..len], now_ms)
                {
                    self.send_errors += u64::from(!frames.send(member, &frame));
                }
            }
        }
        for (member, frame) in self.lacp.step(now_ms) {
            self.send_errors += u64::from(!frames.send(member, &frame));
        }
        let distributing = self.lacp.distributing();
        if distributing == self.distributing {
            return false;
        }
        self.distributing = distributing;
        true
    }

    /// Per member, whether it carries traffic.
    pub fn distributing(&self) -> &[bool] {
        &self.distributing
    }

    /// The machines' state.
    pub fn lacp(&self) -> &Lacp {
        &self.lacp
    }

    /// Carries on from `handed`, the LACP of the same bond in a process that hands its
    /// members over (a forwarder taking over), read at `handed_ms` of its clock; this one's
    /// clock reads `now_ms`. Every machine goes on where it was and every timer runs out when
    /// it would have, so the partners see nothing change. Refused, this one unchanged, when
    /// `handed` is another bond's (other settings, members or system).
    pub fn carry_on(&mut self, handed: LacpControl, handed_ms: u64, now_ms: u64) -> Result<()> {
        self.lacp.carry_on(handed.lacp, handed_ms, now_ms)?;
        self.distributing = handed.distributing;
        self.send_errors = handed.send_errors;
        Ok(())
    }
}
