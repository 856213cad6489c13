//! A blocking netlink socket: open, send one request, receive datagrams.
//! Building and parsing the messages is safe code in [`crate::netlink`].

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{cvt, SyscallError};

/// A netlink socket of one protocol (NETLINK_ROUTE or NETLINK_GENERIC).
#[derive(Debug)]
pub(crate) struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    pub(crate) fn open(protocol: libc::c_int) -> Result<Self, SyscallError> {
        // SAFETY: socket() takes no pointers.
        let fd = cvt(
            unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    protocol,
                )
            },
            "socket(AF_NETLINK)",
        )?;
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Ask for extended acks so an error carries the kernel's message; old kernels ignore it.
        let one: libc::c_int = 1;
        // SAFETY: `one` is a live c_int of the size passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_NETLINK,
                libc::NETLINK_EXT_ACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(NetlinkSocket { fd })
    }

    /// Joins the multicast `groups` (RTMGRP_* bits): the kernel's notifications arrive on
    /// this socket from now on.
    pub(crate) fn subscribe(&self, groups: u32) -> Result<(), SyscallError> {
        // SAFETY: a zeroed sockaddr_nl is valid; the fields are set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = groups;
        // SAFETY: addr is a valid sockaddr_nl of the size passed.
        let ret = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        cvt(ret, "bind(netlink groups)")?;
        Ok(())
    }

    pub(crate) fn send(&self, msg: &[u8]) -> Result<(), SyscallError> {
        // SAFETY: a zeroed sockaddr_nl addresses the kernel (pid 0).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: msg is readable for its length; kernel is a valid sockaddr_nl.
        let ret = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(SyscallError::last("sendto(netlink)"));
        }
        Ok(())
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Receives one datagram into `buf`, returning its length.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> Result<usize, SyscallError> {
        loop {
            // SAFETY: buf is writable for its length.
            let ret =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if ret >= 0 {
                return Ok(ret as usize);
            }
            let err = SyscallError::last("recv(netlink)");
            if err.errno() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }
}
