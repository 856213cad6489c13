//! MSG_ZEROCOPY system calls: SO_ZEROCOPY, sends, and completion notifications read from the
//! socket's error queue.

use std::os::fd::{AsRawFd, BorrowedFd};

use xskit_os::SyscallError;

const SO_ZEROCOPY: libc::c_int = 60;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// One notification: the sends numbered `lo..=hi` (wrapping) are done with their pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) lo: u32,
    pub(crate) hi: u32,
    /// The kernel had to copy the data after all (e.g. delivery to a local socket).
    pub(crate) copied: bool,
}

/// Turns on SO_ZEROCOPY.
pub(crate) fn enable(fd: BorrowedFd<'_>) -> Result<(), SyscallError> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live c_int of the size passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    SyscallError::check(ret, "setsockopt(SO_ZEROCOPY)").map(drop)
}

/// One `send`, with MSG_ZEROCOPY if `zerocopy`. Returns the bytes taken.
pub(crate) fn send(fd: BorrowedFd<'_>, buf: &[u8], zerocopy: bool) -> Result<usize, SyscallError> {
    let mut flags = libc::MSG_NOSIGNAL;
    if zerocopy {
        flags |= libc::MSG_ZEROCOPY;
    }
    // SAFETY: buf is readable for its length. With MSG_ZEROCOPY the kernel pins the pages
    // instead of copying; the caller keeps the buffer until the completion says so.
    let ret = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
    if ret < 0 {
        return Err(SyscallError::last(if zerocopy {
            "send(MSG_ZEROCOPY)"
        } else {
            "send"
        }));
    }
    Ok(ret as usize)
}

/// Reads every pending zero-copy notification from the error queue into `out` (non-blocking);
/// returns how many were read.
pub(crate) fn read_completions(
    fd: BorrowedFd<'_>,
    out: &mut Vec<Completion>,
) -> Result<usize, SyscallError> {
    let mut read = 0;
    loop {
        let mut control = [0u64; 16]; // 128 bytes, aligned for cmsghdr
                                      // SAFETY: a zeroed msghdr is valid (no name, no data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: msg points at a control buffer of the length given and no data buffers.
        let ret = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if ret < 0 {
            let err = SyscallError::last("recvmsg(MSG_ERRQUEUE)");
            return match err.errno() {
                Some(libc::EAGAIN) => Ok(read),
                Some(libc::EINTR) => continue,
                _ => Err(err),
            };
        }
        // SAFETY: msg was filled by the kernel; CMSG_FIRSTHDR/NXTHDR stay within msg_controllen.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: cmsg is non-null and points into `control` (checked by the CMSG macros).
            let header = unsafe { &*cmsg };
            let is_recverr = (header.cmsg_level == libc::SOL_IP
                && header.cmsg_type == libc::IP_RECVERR)
                || (header.cmsg_level == libc::SOL_IPV6 && header.cmsg_type == libc::IPV6_RECVERR);
            let needed = std::mem::size_of::<libc::sock_extended_err>() as u32;
            // SAFETY: CMSG_LEN only computes a length from its argument.
            let min_len = unsafe { libc::CMSG_LEN(needed) } as usize;
            if is_recverr && header.cmsg_len as usize >= min_len {
                // SAFETY: the data holds at least a sock_extended_err (length checked above);
                // read_unaligned because cmsg data has no alignment guarantee for the struct.
                let ee = unsafe {
                    std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                    )
                };
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                    out.push(Completion {
                        lo: ee.ee_info,
                        hi: ee.ee_data,
                        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    });
                    read += 1;
                }
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
    }
}

/// Turns UDP_CORK on or off: while corked, sends accumulate into one datagram.
pub(crate) fn set_udp_cork(fd: BorrowedFd<'_>, on: bool) -> Result<(), SyscallError> {
    let v: libc::c_int = on.into();
    // SAFETY: `v` is a live c_int of the size passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_UDP,
            libc::UDP_CORK,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    SyscallError::check(ret, "setsockopt(UDP_CORK)").map(drop)
}
