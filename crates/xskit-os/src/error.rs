//! System-call errors.

use std::io;

/// A failed system call: which call, and the error the kernel returned. The message holds
/// the OS error, so it is not also given as `source()` (an error chain would print it twice).
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {os_error}")]
pub struct SyscallError {
    /// The name of the call (`setsockopt(XDP_UMEM_REG)`, `bind`, ...).
    pub call: &'static str,
    /// The error the kernel returned.
    pub os_error: io::Error,
}

impl SyscallError {
    /// The error of the system call `call` that just failed (errno).
    pub fn last(call: &'static str) -> Self {
        SyscallError {
            call,
            os_error: io::Error::last_os_error(),
        }
    }

    /// `ret` for a C-style return value, or the errno when it is negative.
    pub fn check<T: Copy + Default + PartialOrd>(ret: T, call: &'static str) -> Result<T, Self> {
        if ret < T::default() {
            Err(Self::last(call))
        } else {
            Ok(ret)
        }
    }

    /// An error of call `call` with errno `errno`, for failures found before the call.
    pub fn from_errno(call: &'static str, errno: i32) -> Self {
        SyscallError {
            call,
            os_error: io::Error::from_raw_os_error(errno),
        }
    }

    /// The raw errno, if the error came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        self.os_error.raw_os_error()
    }
}
