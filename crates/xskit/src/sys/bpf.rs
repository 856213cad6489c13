//! BPF_PROG_TEST_RUN (the one bpf command aya does not wrap): a dry run of an XDP program over
//! one frame, and live-frames mode, where the verdicts are carried out.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::SyscallError;

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// The `test` member of union bpf_attr: prog_fd 0, retval 4, data_size_in 8, data_size_out
/// 12, data_in 16, data_out 24, repeat 32, duration 36, ctx sizes and pointers 40..64, flags
/// 64, cpu 68, batch_size 72. Unused bytes must be zero.
struct TestRunAttr([u8; 128]);

impl TestRunAttr {
    fn new(prog: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> Self {
        let mut a = TestRunAttr([0; 128]);
        a.put32(0, prog.as_raw_fd() as u32);
        a.put32(8, frame.len() as u32);
        a.0[16..24].copy_from_slice(&(frame.as_ptr() as u64).to_ne_bytes());
        a.put32(32, repeat);
        a
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// Issues the command.
    ///
    /// # Safety
    /// Every pointer in the attribute must point at memory that is alive for the call, at
    /// least as large as its size field says, and writable where the kernel writes (data_out).
    unsafe fn run(&mut self, call: &'static str) -> Result<u32, SyscallError> {
        // SAFETY: the caller vouches for the pointers; the attribute itself is 128 bytes, the
        // size passed, and the kernel writes only retval, the sizes and duration into it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_uint,
            )
        };
        if ret < 0 {
            return Err(SyscallError::last(call));
        }
        Ok(u32::from_ne_bytes([
            self.0[4], self.0[5], self.0[6], self.0[7],
        ]))
    }
}

/// Runs the XDP program `prog` over `repeat` fresh copies of `frame`, carrying out what it
/// returns (a redirect transmits the copy). `batch` copies are handled per kernel iteration.
pub(crate) fn test_run_live(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    repeat: u32,
    batch: u32,
) -> Result<(), SyscallError> {
    let mut attr = TestRunAttr::new(prog, frame, repeat);
    attr.put32(64, BPF_F_TEST_XDP_LIVE_FRAMES);
    attr.put32(72, batch);
    // SAFETY: the only pointer is data_in, `frame`, which outlives the call and is only read.
    unsafe { attr.run("bpf(BPF_PROG_TEST_RUN, live frames)") }.map(drop)
}

/// Runs the XDP program `prog` once over a copy of `frame` without carrying out its verdict;
/// returns the verdict (XDP_ABORTED 0, DROP 1, PASS 2, TX 3, REDIRECT 4).
pub(crate) fn test_run(prog: BorrowedFd<'_>, frame: &[u8]) -> Result<u32, SyscallError> {
    // The frame comes back in data_out, with room for the headroom the program may grow into.
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestRunAttr::new(prog, frame, 1);
    attr.put32(12, out.len() as u32);
    attr.0[24..32].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: data_in is `frame` (read) and data_out is `out` (written, of the size given);
    // both outlive the call.
    unsafe { attr.run("bpf(BPF_PROG_TEST_RUN)") }
}
