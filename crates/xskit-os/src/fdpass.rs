//! Handing open descriptors to another process over a Unix stream socket (SCM_RIGHTS), and
//! memory another process can map (a memfd): what a forwarder gives its successor.

use std::ffi::CStr;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::SyscallError;

/// The most descriptors one message carries (the kernel's SCM_MAX_FD).
pub const MAX_FDS: usize = 253;

/// The one byte that carries the descriptors: a stream socket attaches them to bytes.
const CARRIER: u8 = b'F';

fn nix_error(call: &'static str, e: nix::errno::Errno) -> SyscallError {
    SyscallError {
        call,
        os_error: std::io::Error::from_raw_os_error(e as i32),
    }
}

/// Sends `fds` over the connected Unix stream socket `sock`, attached to one byte (the byte
/// alone when there are none).
pub fn send_fds(sock: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> Result<(), SyscallError> {
    if fds.len() > MAX_FDS {
        return Err(SyscallError {
            call: "sendmsg(SCM_RIGHTS)",
            os_error: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let byte = [CARRIER];
    let iov = [IoSlice::new(&byte)];
    let with = [ControlMessage::ScmRights(&raw)];
    // No descriptors: the byte alone, as a refusal sends it.
    let cmsg: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &with };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(1) => return Ok(()),
            Ok(_) => {
                return Err(SyscallError {
                    call: "sendmsg(SCM_RIGHTS)",
                    os_error: std::io::Error::from(std::io::ErrorKind::WriteZero),
                })
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(nix_error("sendmsg(SCM_RIGHTS)", e)),
        }
    }
}

/// Receives the descriptors [`send_fds`] sent (at most `max`), reading exactly their one
/// byte from `sock`. A message that carries none, or another byte, is refused (EPROTO); so is
/// one whose descriptors were cut short (more than `max`).
pub fn recv_fds(sock: BorrowedFd<'_>, max: usize) -> Result<Vec<OwnedFd>, SyscallError> {
    const CALL: &str = "recvmsg(SCM_RIGHTS)";
    let max = max.min(MAX_FDS);
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (got, raw, truncated) = loop {
        let mut iov = [IoSliceMut::new(&mut byte)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut raw = Vec::new();
                for c in msg.cmsgs().map_err(|e| nix_error(CALL, e))? {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        raw.extend(fds);
                    }
                }
                let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
                break (msg.bytes, raw, truncated);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(nix_error(CALL, e)),
        }
    };
    // SAFETY: the kernel installed each of these descriptors in this process for this
    // message; nothing else owns them, and each is wrapped exactly once.
    let owned: Vec<OwnedFd> = raw
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if got != 1 || byte[0] != CARRIER || truncated || owned.len() > max {
        return Err(SyscallError {
            call: CALL,
            os_error: std::io::Error::from_raw_os_error(libc::EPROTO),
        });
    }
    Ok(owned)
}

/// Anonymous memory of `len` bytes behind a descriptor (memfd_create), so that another
/// process it is handed to can map the same pages; on huge pages with `huge_pages`.
pub fn memfd(name: &CStr, len: u64, huge_pages: bool) -> Result<OwnedFd, SyscallError> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let mut flags = MemFdCreateFlag::MFD_CLOEXEC;
    if huge_pages {
        flags |= MemFdCreateFlag::MFD_HUGETLB;
    }
    let fd = memfd_create(name, flags).map_err(|e| nix_error("memfd_create", e))?;
    let len = libc::off_t::try_from(len).map_err(|_| SyscallError {
        call: "ftruncate(memfd)",
        os_error: std::io::Error::from_raw_os_error(libc::EFBIG),
    })?;
    nix::unistd::ftruncate(&fd, len).map_err(|e| nix_error("ftruncate(memfd)", e))?;
    Ok(fd)
}

/// The size in bytes of the file behind `fd` (a memfd handed over).
pub fn file_len(fd: BorrowedFd<'_>) -> Result<u64, SyscallError> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| nix_error("fstat", e))?;
    Ok(st.st_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptors_cross_a_socket_and_still_reach_their_file() {
        let (a, b) = UnixStream::pair().unwrap();
        let mem = memfd(c"xskit-test", 4096, false).unwrap();
        assert_eq!(file_len(mem.as_fd()).unwrap(), 4096);
        let (mut r, mut w) = UnixStream::pair().unwrap();
        send_fds(a.as_fd(), &[mem.as_fd(), w.as_fd()]).unwrap();
        (&a).write_all(b"after\n").unwrap();
        let got = recv_fds(b.as_fd(), 4).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(file_len(got[0].as_fd()).unwrap(), 4096);
        let mut rest = [0u8; 6];
        (&b).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"after\n");
        // The received socket end is the same socket: what is written through it arrives.
        let mut passed = UnixStream::from(got.into_iter().nth(1).unwrap());
        passed.write_all(b"x").unwrap();
        drop(w.flush());
        let mut one = [0u8; 1];
        r.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
    }

    #[test]
    fn a_message_without_descriptors_or_with_too_many_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"x").unwrap();
        let e = recv_fds(b.as_fd(), 4).unwrap_err();
        assert_eq!(e.os_error.raw_os_error(), Some(libc::EPROTO));
        let m1 = memfd(c"t", 8, false).unwrap();
        let m2 = memfd(c"t", 8, false).unwrap();
        send_fds(a.as_fd(), &[m1.as_fd(), m2.as_fd()]).unwrap();
        let e = recv_fds(b.as_fd(), 1).unwrap_err();
        assert_eq!(e.os_error.raw_os_error(), Some(libc::EPROTO));
    }
}
