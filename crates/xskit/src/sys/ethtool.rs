//! The one ethtool query xskit needs: how many queues a device is using now (its channels),
//! which can be fewer than the queues it was created with (veth makes one per possible CPU
//! and uses one).

use std::os::fd::AsRawFd;

use super::{ifreq_named, ioctl_socket, SyscallError};

const ETHTOOL_GCHANNELS: u32 = 0x3c;

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
    Ok((rx > 0 && tx > 0).then_some((rx, tx)))
}
