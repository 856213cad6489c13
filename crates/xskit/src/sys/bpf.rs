//! BPF_PROG_TEST_RUN in live-frames mode (the one bpf command aya does not wrap).

use std::os::fd::{AsRawFd, BorrowedFd};

use super::SyscallError;

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// Runs the XDP program `prog` over `repeat` fresh copies of `frame`, carrying out what it
/// returns (a redirect transmits the copy). `batch` copies are handled per kernel iteration.
pub(crate) fn test_run_live(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    repeat: u32,
    batch: u32,
) -> Result<(), SyscallError> {
    // The `test` member of union bpf_attr: prog_fd, retval, data_size_in, data_size_out,
    // data_in, data_out, repeat, duration, ctx_size_in, ctx_size_out, ctx_in, ctx_out,
    // flags, cpu, batch_size. Unused bytes must be zero.
    let mut attr = [0u8; 128];
    let put32 =
        |a: &mut [u8; 128], at: usize, v: u32| a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    put32(&mut attr, 0, prog.as_raw_fd() as u32);
    put32(&mut attr, 8, frame.len() as u32);
    attr[16..24].copy_from_slice(&(frame.as_ptr() as u64).to_ne_bytes());
    put32(&mut attr, 32, repeat);
    put32(&mut attr, 64, BPF_F_TEST_XDP_LIVE_FRAMES);
    put32(&mut attr, 72, batch);
    // SAFETY: attr is a zero-padded bpf_attr whose only pointer (data_in) points at `frame`,
    // which outlives the call and is only read by the kernel.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            attr.as_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(SyscallError::last("bpf(BPF_PROG_TEST_RUN, live frames)"));
    }
    Ok(())
}

/// Runs the XDP program `prog` once over a copy of `frame` without carrying out its verdict;
/// returns the verdict (XDP_ABORTED 0, DROP 1, PASS 2, TX 3, REDIRECT 4).
pub(crate) fn test_run(prog: BorrowedFd<'_>, frame: &[u8]) -> Result<u32, SyscallError> {
    // The `test` member of union bpf_attr, as above; the kernel writes retval at offset 4.
    // XDP needs room for the frame out: data_out gets a buffer of the frame's size plus the
    // headroom it may grow into.
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = [0u8; 128];
    let put32 =
        |a: &mut [u8; 128], at: usize, v: u32| a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    put32(&mut attr, 0, prog.as_raw_fd() as u32);
    put32(&mut attr, 8, frame.len() as u32);
    put32(&mut attr, 12, out.len() as u32);
    attr[16..24].copy_from_slice(&(frame.as_ptr() as u64).to_ne_bytes());
    attr[24..32].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
    put32(&mut attr, 32, 1);
    // SAFETY: attr is a zero-padded bpf_attr whose pointers are `frame` (read) and `out`
    // (written, of the size passed), both alive for the call; the kernel writes only into
    // `attr` (retval, sizes, duration) and `out`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            attr.as_mut_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(SyscallError::last("bpf(BPF_PROG_TEST_RUN)"));
    }
    Ok(u32::from_ne_bytes([attr[4], attr[5], attr[6], attr[7]]))
}
