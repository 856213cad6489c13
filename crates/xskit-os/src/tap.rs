//! A TAP device: Ethernet frames written to it enter the kernel stack as if received on it,
//! and frames the stack sends through it are read back. The device lives as long as the fd.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{ifreq_named, ioctl_socket, SyscallError};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// An open TAP device, non-blocking, without packet-information headers.
#[derive(Debug)]
pub struct TapFd {
    fd: OwnedFd,
    name: String,
}

impl TapFd {
    /// Creates (or attaches to) TAP device `name` and sets it up.
    pub fn open(name: &str) -> Result<Self, SyscallError> {
        let mut req = ifreq_named(name, "ioctl(TUNSETIFF)")?;
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: a NUL-terminated path literal.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        let raw = SyscallError::check(raw, "open(/dev/net/tun)")?;
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) };
        SyscallError::check(ret, "ioctl(TUNSETIFF)")?;
        set_up(name)?;
        Ok(TapFd {
            fd,
            name: name.to_string(),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hands one frame to the kernel; false if the device's queue is full (the frame is lost,
    /// as on a busy link).
    pub fn write(&self, frame: &[u8]) -> Result<bool, SyscallError> {
        // SAFETY: `frame` is a live slice of the length passed.
        let ret = unsafe { libc::write(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if ret < 0 {
            let e = SyscallError::last("write(tap)");
            return match e.errno() {
                Some(libc::EAGAIN | libc::ENOBUFS) => Ok(false),
                _ => Err(e),
            };
        }
        Ok(true)
    }

    /// Reads one frame the kernel sent, if there is one.
    pub fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, SyscallError> {
        // SAFETY: `buf` is a live, writable slice of the length passed.
        let ret = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if ret < 0 {
            let e = SyscallError::last("read(tap)");
            return match e.errno() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(ret as usize))
    }
}

impl std::os::fd::AsFd for TapFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }
}

/// Sets IFF_UP on interface `name`.
fn set_up(name: &str) -> Result<(), SyscallError> {
    let sock = ioctl_socket()?;
    let mut req = ifreq_named(name, "ioctl(SIOCGIFFLAGS)")?;
    // SAFETY: SIOCGIFFLAGS fills the flags of one ifreq, which `req` is.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) };
    SyscallError::check(ret, "ioctl(SIOCGIFFLAGS)")?;
    // SAFETY: the kernel just wrote the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads one ifreq, which `req` is.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) };
    SyscallError::check(ret, "ioctl(SIOCSIFFLAGS)").map(drop)
}
