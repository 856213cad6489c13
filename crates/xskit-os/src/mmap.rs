//! Owned memory mappings: anonymous (optionally huge-page) memory for UMEMs and test rings, and
//! the kernel's ring mappings of an AF_XDP socket.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::SyscallError;

/// A mapping that is unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner to another thread
// does not change who may access it.
unsafe impl Send for Mmap {}
// SAFETY: Mmap hands out only raw pointers; every user that dereferences them synchronises
// through the ring protocol or through exclusive frame handles.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Zeroed private anonymous memory, backed by huge pages when `huge_pages` is set.
    pub fn anonymous(len: usize, huge_pages: bool) -> Result<Self, SyscallError> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if huge_pages {
            flags |= libc::MAP_HUGETLB;
        }
        // SAFETY: an anonymous mapping at a kernel-chosen address touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        Self::from_raw(ptr, len, "mmap(anonymous)")
    }

    /// A shared mapping of `len` bytes of `fd` at the page offset `offset` (the AF_XDP rings).
    pub fn shared(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Self, SyscallError> {
        // SAFETY: mapping a file descriptor at a kernel-chosen address touches no existing
        // memory; MAP_POPULATE only pre-faults the new mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        Self::from_raw(ptr, len, "mmap(ring)")
    }

    fn from_raw(
        ptr: *mut libc::c_void,
        len: usize,
        call: &'static str,
    ) -> Result<Self, SyscallError> {
        if ptr == libc::MAP_FAILED {
            return Err(SyscallError::last(call));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| SyscallError::last(call))?;
        Ok(Mmap { ptr, len })
    }

    /// The start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The mapping as 64-bit words another party (the kernel, a BPF program) may read while
    /// they are stored: each store is whole, never torn.
    pub fn words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: a mapping starts on a page boundary, so it is aligned for AtomicU64; it holds
        // len / 8 whole words and lives as long as the returned borrow of self; AtomicU64 has
        // the size of u64, any bit pattern is a valid value, and shared references to atomics
        // may be stored through.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>(),
                self.len / 8,
            )
        }
    }

    /// True for an empty mapping (never: mmap refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps; every
        // borrower holds an Arc to the owner, so no reference outlives this call.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
