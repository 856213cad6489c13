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
    test_run_output(prog, frame).map(|(verdict, _)| verdict)
}

/// [`test_run`], also returning the packet as the program left it, from its XDP metadata
/// (what the program put in front of it, if anything) to its end.
pub(crate) fn test_run_output(
    prog: BorrowedFd<'_>,
    frame: &[u8],
) -> Result<(u32, Vec<u8>), SyscallError> {
    // The frame comes back in data_out, with room for the headroom the program may grow into.
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestRunAttr::new(prog, frame, 1);
    attr.put32(12, out.len() as u32);
    attr.0[24..32].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: data_in is `frame` (read) and data_out is `out` (written, of the size given);
    // both outlive the call.
    let verdict = unsafe { attr.run("bpf(BPF_PROG_TEST_RUN)") }?;
    let written = u32::from_ne_bytes([attr.0[12], attr.0[13], attr.0[14], attr.0[15]]);
    out.truncate(written as usize);
    Ok((verdict, out))
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// Entries a batch command moves per system call: large enough that the call's own cost
/// vanishes, small enough that a buffer of them stays a few MiB.
const BATCH_ENTRIES: usize = 16_384;

/// The `batch` member of union bpf_attr: in_batch 0, out_batch 8, keys 16, values 24, count
/// 32, map_fd 36, elem_flags 40, flags 48.
struct BatchAttr([u8; 56]);

impl BatchAttr {
    fn new(map: BorrowedFd<'_>, count: usize) -> Self {
        let mut a = BatchAttr([0; 56]);
        a.put(32, &(count as u32).to_ne_bytes());
        a.put(36, &(map.as_raw_fd() as u32).to_ne_bytes());
        a
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn pointer(&mut self, at: usize, p: *const u8) {
        self.put(at, &(p as u64).to_ne_bytes());
    }

    fn count(&self) -> usize {
        u32::from_ne_bytes([self.0[32], self.0[33], self.0[34], self.0[35]]) as usize
    }

    /// Issues batch command `cmd`; the OS error when it fails.
    ///
    /// # Safety
    /// Every pointer in the attribute must point at memory alive for the call and as large
    /// as `count` entries of the map's key (keys, and in_batch, out_batch: one key) or value
    /// (values) size, writable where the command writes.
    unsafe fn run(&mut self, cmd: libc::c_long) -> std::io::Result<()> {
        // SAFETY: the caller vouches for the pointers; the attribute is 56 bytes, the size
        // passed, and the kernel writes only `count` into it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_uint,
            )
        };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Refuses a key or value type whose size is not the map's: the kernel would read or write
/// that many bytes per entry.
fn check_sizes<'m, K, V>(
    map: &'m aya::maps::MapData,
    call: &'static str,
) -> Result<BorrowedFd<'m>, SyscallError> {
    let info = map.info().map_err(|e| SyscallError {
        call,
        os_error: std::io::Error::other(e.to_string()),
    })?;
    if info.key_size() as usize != std::mem::size_of::<K>()
        || info.value_size() as usize != std::mem::size_of::<V>()
    {
        return Err(SyscallError {
            call,
            os_error: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    Ok(std::os::fd::AsFd::as_fd(map.fd()))
}

/// Writes `keys[i]` with `values[i]` into `map` (created or replaced), with
/// BPF_MAP_UPDATE_BATCH: a system call per `BATCH_ENTRIES` entries instead of one an entry.
/// The types must be the map's key and value (checked), and the slices as long as each other.
/// Fails at the first entry the kernel refuses, with the entries before it written; a kernel
/// or map type without the command answers EINVAL or ENOTSUPP before writing any.
pub fn update_batch<K: aya::Pod, V: aya::Pod>(
    map: &aya::maps::MapData,
    keys: &[K],
    values: &[V],
) -> Result<(), SyscallError> {
    const CALL: &str = "bpf(BPF_MAP_UPDATE_BATCH)";
    let fd = check_sizes::<K, V>(map, CALL)?;
    assert_eq!(keys.len(), values.len(), "a value for each key");
    for (k, v) in keys.chunks(BATCH_ENTRIES).zip(values.chunks(BATCH_ENTRIES)) {
        let mut attr = BatchAttr::new(fd, k.len());
        attr.pointer(16, k.as_ptr().cast());
        attr.pointer(24, v.as_ptr().cast());
        // SAFETY: keys and values hold `k.len()` entries each of the map's key and value
        // sizes (checked above), alive for the call and only read.
        unsafe { attr.run(BPF_MAP_UPDATE_BATCH) }.map_err(|os_error| SyscallError {
            call: CALL,
            os_error,
        })?;
    }
    Ok(())
}

/// Every entry of `map`, read with BPF_MAP_LOOKUP_BATCH: a system call per `BATCH_ENTRIES`
/// entries. The types must be the map's key and value (checked). Entries changed while it
/// reads may be seen or not, as with iterating key by key.
pub fn lookup_batch<K: aya::Pod, V: aya::Pod>(
    map: &aya::maps::MapData,
) -> Result<Vec<(K, V)>, SyscallError> {
    const CALL: &str = "bpf(BPF_MAP_LOOKUP_BATCH)";
    let fd = check_sizes::<K, V>(map, CALL)?;
    let mut keys: Vec<K> = Vec::with_capacity(BATCH_ENTRIES);
    let mut values: Vec<V> = Vec::with_capacity(BATCH_ENTRIES);
    // The kernel's place in the map between calls: a key, opaque here.
    let mut token = vec![0u8; std::mem::size_of::<K>().max(8)];
    let mut started = false;
    let mut all = Vec::new();
    loop {
        let mut attr = BatchAttr::new(fd, BATCH_ENTRIES);
        if started {
            attr.pointer(0, token.as_ptr());
        }
        attr.pointer(8, token.as_mut_ptr());
        attr.pointer(16, keys.as_mut_ptr().cast());
        attr.pointer(24, values.as_mut_ptr().cast());
        // SAFETY: keys and values have room for BATCH_ENTRIES entries of the map's sizes
        // (checked above); the token has room for a key; all outlive the call. The kernel
        // writes at most `count` entries and reads the token it wrote the call before.
        let result = unsafe { attr.run(BPF_MAP_LOOKUP_BATCH) };
        let got = attr.count().min(BATCH_ENTRIES);
        // SAFETY: the kernel wrote `got` whole entries of plain-old-data types.
        unsafe {
            keys.set_len(got);
            values.set_len(got);
        }
        all.extend(keys.drain(..).zip(values.drain(..)));
        match result {
            Ok(()) => started = true,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(all),
            Err(os_error) => {
                return Err(SyscallError {
                    call: CALL,
                    os_error,
                })
            }
        }
    }
}

const BPF_LINK_UPDATE: libc::c_long = 29;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
/// BPF_LINK_UPDATE only when the link still runs `old_prog_fd`.
const BPF_F_REPLACE: u32 = 1 << 2;

/// Issues bpf command `cmd` with the 16-byte attribute `attr`.
///
/// # Safety
/// Any pointer `attr` holds must point at memory alive for the call, as large as the command
/// reads or writes there, and writable where it writes.
unsafe fn small_command(
    cmd: libc::c_long,
    attr: &mut [u32; 4],
    call: &'static str,
) -> Result<libc::c_long, SyscallError> {
    // SAFETY: the attribute is 16 bytes, the size passed; the caller vouches for the
    // pointers in it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(SyscallError::last(call));
    }
    Ok(ret)
}

/// A new descriptor of the bpf_link with id `id` (BPF_LINK_GET_FD_BY_ID: link_id at 0).
pub(crate) fn link_fd_by_id(id: u32) -> Result<std::os::fd::OwnedFd, SyscallError> {
    let mut attr = [id, 0, 0, 0];
    // SAFETY: the attribute holds no pointer.
    let fd = unsafe {
        small_command(
            BPF_LINK_GET_FD_BY_ID,
            &mut attr,
            "bpf(BPF_LINK_GET_FD_BY_ID)",
        )
    }?;
    // SAFETY: the command returned a new descriptor that nothing else owns.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// Puts program `prog` on `link` in one step (BPF_LINK_UPDATE: link_fd 0, new_prog_fd 4,
/// flags 8, old_prog_fd 12); with `old`, only if the link still runs that program.
pub(crate) fn link_update(
    link: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    old: Option<BorrowedFd<'_>>,
) -> Result<(), SyscallError> {
    let mut attr = [
        link.as_raw_fd() as u32,
        prog.as_raw_fd() as u32,
        if old.is_some() { BPF_F_REPLACE } else { 0 },
        old.map_or(0, |o| o.as_raw_fd() as u32),
    ];
    // SAFETY: the attribute holds no pointer.
    unsafe { small_command(BPF_LINK_UPDATE, &mut attr, "bpf(BPF_LINK_UPDATE)") }.map(drop)
}

const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// statfs's f_type of a BPF file system.
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;

/// The `obj` member of union bpf_attr: pathname 0, bpf_fd 8, file_flags 12.
fn obj_attr(path: &std::ffi::CStr, fd: u32) -> [u32; 4] {
    let p = path.as_ptr() as u64;
    [p as u32, (p >> 32) as u32, fd, 0]
}

/// Pins the BPF object `fd` (a link) at `path`, on a BPF file system.
pub(crate) fn obj_pin(fd: BorrowedFd<'_>, path: &std::ffi::CStr) -> Result<(), SyscallError> {
    let mut attr = obj_attr(path, fd.as_raw_fd() as u32);
    // SAFETY: the attribute's pointer is `path`, alive for the call, which the kernel reads
    // up to its terminating zero.
    unsafe { small_command(BPF_OBJ_PIN, &mut attr, "bpf(BPF_OBJ_PIN)") }.map(drop)
}

/// The BPF object pinned at `path`, opened.
pub(crate) fn obj_get(path: &std::ffi::CStr) -> Result<std::os::fd::OwnedFd, SyscallError> {
    let mut attr = obj_attr(path, 0);
    // SAFETY: as for obj_pin, `path` is only read, during the call.
    let fd = unsafe { small_command(BPF_OBJ_GET, &mut attr, "bpf(BPF_OBJ_GET)") }?;
    // SAFETY: the command returned a new descriptor that nothing else owns.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// A bpf_link's program id and, for an XDP link, its interface (0 once the interface is
/// gone): `struct bpf_link_info` type 0, id 4, prog_id 8, then xdp.ifindex at 16.
pub(crate) fn link_program(link: BorrowedFd<'_>) -> Result<(u32, u32), SyscallError> {
    let mut info = [0u32; 6];
    let p = info.as_mut_ptr() as u64;
    let mut attr = [
        link.as_raw_fd() as u32,
        std::mem::size_of_val(&info) as u32,
        p as u32,
        (p >> 32) as u32,
    ];
    // SAFETY: the attribute's pointer is `info`, 24 writable bytes alive for the call, the
    // length given; the kernel writes at most that much of the link's information into it.
    unsafe {
        small_command(
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr,
            "bpf(BPF_OBJ_GET_INFO_BY_FD)",
        )
    }?;
    Ok((info[2], info[4]))
}

/// Whether `dir` is on a BPF file system, where objects can be pinned.
pub(crate) fn is_bpf_fs(dir: &std::ffi::CStr) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `dir` is a valid C string and `st` a writable statfs, both alive for the call.
    let ret = unsafe { libc::statfs(dir.as_ptr(), st.as_mut_ptr()) };
    // SAFETY: statfs filled `st` when it returned 0; it was zeroed before either way.
    // f_type is a signed word of the platform's width: its low 32 bits hold the magic.
    ret == 0 && (unsafe { st.assume_init() }.f_type as u64) & 0xffff_ffff == BPF_FS_MAGIC
}
