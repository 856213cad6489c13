//! Promiscuous mode held by a socket: a packet socket's PACKET_MR_PROMISC membership raises
//! the device's promiscuity count, and the kernel lowers it again when the socket closes,
//! however the process ends (SIGKILL included). The socket asks for no protocol, so it
//! receives nothing.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::{cvt, setsockopt, SyscallError};

/// Opens a packet socket that keeps interface `ifindex` promiscuous until it is closed.
pub fn hold(ifindex: u32) -> Result<OwnedFd, SyscallError> {
    // SAFETY: socket(2) takes no pointers; the descriptor is owned from here on.
    let fd = cvt(
        unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) },
        "socket(AF_PACKET)",
    )?;
    // SAFETY: `fd` is a descriptor just returned by socket(2), owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(
        std::os::fd::AsFd::as_fd(&fd),
        libc::SOL_PACKET,
        libc::PACKET_ADD_MEMBERSHIP,
        &mreq,
        "setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)",
    )?;
    Ok(fd)
}
