//! The ethtool queries xskit needs: how many queues a device is using now (its channels),
//! which can be fewer than the queues it was created with (veth makes one per possible CPU
//! and uses one); and its link speed and duplex (a bond's `primary_reselect better`).

use std::os::fd::AsRawFd;

use super::{ifreq_named, ioctl_socket, SyscallError};

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_GSET: u32 = 0x1;

/// `struct ethtool_cmd` (the legacy settings query, which every driver with link settings
/// answers through the kernel's compatibility path).
#[repr(C)]
#[derive(Default)]
struct Settings {
    cmd: u32,
    supported: u32,
    advertising: u32,
    speed: u16,
    duplex: u8,
    port: u8,
    phy_address: u8,
    transceiver: u8,
    autoneg: u8,
    mdio_support: u8,
    maxtxpkt: u32,
    maxrxpkt: u32,
    speed_hi: u16,
    eth_tp_mdix: u8,
    eth_tp_mdix_ctrl: u8,
    lp_advertising: u32,
    reserved: [u32; 2],
}

/// The link's speed in Mbit/s and whether it is full duplex, or `None` when the driver does
/// not know (no link, no settings).
pub(crate) fn link_speed(name: &str) -> Result<Option<(u32, bool)>, SyscallError> {
    let Ok(mut req) = ifreq_named(name, "ioctl(ETHTOOL_GSET)") else {
        return Ok(None);
    };
    let sock = ioctl_socket()?;
    let mut settings = Settings {
        cmd: ETHTOOL_GSET,
        ..Settings::default()
    };
    req.ifr_ifru.ifru_data = (&mut settings as *mut Settings).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GSET writes one ethtool_cmd, which `settings` is (the
    // same fields, repr(C)) and outlives the call.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if ret < 0 {
        let e = SyscallError::last("ioctl(ETHTOOL_GSET)");
        return match e.errno() {
            Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(e),
        };
    }
    let speed = u32::from(settings.speed) | u32::from(settings.speed_hi) << 16;
    // SPEED_UNKNOWN is -1 and DUPLEX_UNKNOWN 0xff.
    Ok((speed != 0 && speed != u32::MAX).then_some((speed, settings.duplex == 1)))
}

#[repr(C)]
#[derive(Default)]
struct Channels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// Queues in use, (rx plus combined, tx plus combined) channels, or `None` if the driver does
/// not say.
pub(crate) fn active_queues(name: &str) -> Result<Option<(u32, u32)>, SyscallError> {
    Ok(channels(name)?.map(|c| (c.rx, c.tx)))
}

/// A device's queues by its ethtool channels: in use now, and the most it could use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChannelCounts {
    pub(crate) rx: u32,
    pub(crate) tx: u32,
    /// The most combined channels the driver offers (`ethtool -L IF combined N`'s limit).
    pub(crate) max_combined: u32,
}

/// The device's channels, or `None` when the driver does not report them.
pub(crate) fn channels(name: &str) -> Result<Option<ChannelCounts>, SyscallError> {
    let Ok(mut req) = ifreq_named(name, "ioctl(ETHTOOL_GCHANNELS)") else {
        return Ok(None);
    };
    let sock = ioctl_socket()?;
    let mut channels = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Channels::default()
    };
    req.ifr_ifru.ifru_data = (&mut channels as *mut Channels).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS writes one ethtool_channels, which
    // `channels` is and outlives the call.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if ret < 0 {
        let e = SyscallError::last("ioctl(ETHTOOL_GCHANNELS)");
        return match e.errno() {
            Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(e),
        };
    }
    let rx = channels.rx_count + channels.combined_count;
    let tx = channels.tx_count + channels.combined_count;
    Ok((rx > 0 && tx > 0).then_some(ChannelCounts {
        rx,
        tx,
        max_combined: channels.max_combined,
    }))
}
