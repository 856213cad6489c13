//! UMEM memory and the frame handles that own its chunks.
//!
//! A [`Frame`] is the only way safe code reaches UMEM bytes. Handles are created only by
//! [`Umem::take_frames`] (once per UMEM) and by the rings when the kernel hands a chunk back, and
//! they are neither `Clone` nor `Copy`, so at any time a chunk has at most one handle in user
//! space, and no handle while the kernel owns the chunk. That makes `&mut` access through a
//! handle exclusive, which is what lets [`Umem::data_mut`] be safe.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::SyscallError;
use xskit_os::sync::LockUnpoisoned;
use xskit_os::Mmap;

/// Bytes the kernel reserves in front of every received packet (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: u32 = 256;
/// The smallest chunk the kernel accepts (`XDP_UMEM_MIN_CHUNK_SIZE`).
pub const MIN_FRAME_SIZE: u32 = 2048;
/// The largest chunk the kernel accepts: one page. (Chunks up to 64 KiB on hugetlb memory were
/// proposed upstream in 2023; the kernels xskit targets still reject them with EINVAL, so
/// larger packets use multi-buffer chains instead.)
pub const MAX_FRAME_SIZE: u32 = 4096;
/// The descriptor option that says a transmit descriptor has `struct xsk_tx_metadata` in
/// front of its data (`XDP_TX_METADATA` in linux/if_xdp.h).
pub const XDP_TX_METADATA: u32 = 1 << 1;

/// The bits of a frame's options that are the application's own ([`Frame::note`]): the
/// kernel neither sets nor sees them.
const NOTE_SHIFT: u32 = 30;
const MARK: u32 = 0b11 << NOTE_SHIFT;
/// Bytes of `struct xsk_tx_metadata`: the `tx_metadata_len` for checksum requests.
pub const TX_METADATA_LEN: u32 = 24;
pub(crate) const HUGE_PAGE_SIZE: u64 = 2 * 1024 * 1024;
/// UMEM offsets fit in 48 bits; the top 16 bits of a handle's address hold its UMEM's tag.
const TAG_SHIFT: u32 = 48;
pub(crate) const ADDR_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// How to lay out a UMEM: start from `UmemConfig::default()` (4096 frames of 4096 bytes) and
/// change what you need (`UmemConfig::default().frame_count(8192)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UmemConfig {
    /// Bytes per frame (chunk): 2048 or 4096, or any size between them in unaligned mode.
    pub frame_size: u32,
    /// Number of frames.
    pub frame_count: u32,
    /// Extra headroom the kernel leaves in front of each received packet, beyond its own 256.
    pub headroom: u32,
    /// Unaligned-chunk mode (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`): packets may start anywhere.
    pub unaligned: bool,
    /// Back the UMEM with 2 MiB huge pages (MAP_HUGETLB), which saves TLB misses on large
    /// UMEMs; needs pages reserved in `/proc/sys/vm/nr_hugepages`.
    pub huge_pages: bool,
    /// Bytes of `struct xsk_tx_metadata` space in front of each transmitted packet (0: none).
    pub tx_metadata_len: u32,
    /// Back the UMEM with a memfd ([`Umem::file`]) that another process can map, so that its
    /// sockets and frames can be handed to that process ([`Umem::adopt`]).
    pub shareable: bool,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig {
            frame_size: 4096,
            frame_count: 4096,
            headroom: 0,
            unaligned: false,
            huge_pages: false,
            tx_metadata_len: 0,
            shareable: false,
        }
    }
}

xskit_os::config_setters!(UmemConfig {
    /// Sets the bytes per frame.
    frame_size: u32,
    /// Sets the number of frames.
    frame_count: u32,
    /// Sets the extra headroom.
    headroom: u32,
    /// Turns unaligned-chunk mode on or off.
    unaligned: bool,
    /// Turns huge pages on or off.
    huge_pages: bool,
    /// Sets the transmit metadata room.
    tx_metadata_len: u32,
    /// Backs the UMEM with a memfd, or not.
    shareable: bool,
});

impl UmemConfig {
    /// Total bytes of frames.
    pub fn len(&self) -> u64 {
        u64::from(self.frame_size) * u64::from(self.frame_count)
    }

    /// True when the UMEM holds no frames.
    pub fn is_empty(&self) -> bool {
        self.frame_count == 0
    }

    /// Where received packet data starts within a frame.
    pub fn rx_offset(&self) -> u32 {
        XDP_PACKET_HEADROOM + self.headroom
    }
}

/// One chunk of a UMEM, owned by whoever holds this handle: the bytes at `addr()`, `len()` long.
///
/// Frames come from [`Umem::take_frames`] and from the rx and completion rings, and go back
/// through the fill and tx rings. Read and write their bytes with [`Umem::data`] and
/// [`Umem::data_mut`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a dropped Frame takes its chunk out of circulation: give it to a ring or a pool"]
pub struct Frame {
    tagged_addr: u64,
    len: u32,
    options: u32,
}

impl Frame {
    /// The packet's offset in its UMEM.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.tagged_addr & ADDR_MASK
    }

    /// Bytes of packet data.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the frame holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptor option bits (`XDP_PKT_CONTD`, `XDP_TX_METADATA`).
    #[inline]
    pub fn options(&self) -> u32 {
        self.options & !MARK
    }

    /// What the application noted with this frame ([`Frame::set_note`]): 0 to 3.
    #[inline]
    pub fn note(&self) -> u8 {
        (self.options >> NOTE_SHIFT) as u8
    }

    /// Two bits the application may keep with a frame while it holds it, e.g. one stage's
    /// finding for a later one (`note` 0 to 3; higher bits are ignored). The kernel never sees
    /// them: they are left out of every descriptor, and a frame the kernel hands back, or a
    /// pool hands out, has note 0.
    #[inline]
    pub fn set_note(&mut self, note: u8) {
        self.options = (self.options & !MARK) | (u32::from(note & 0b11) << NOTE_SHIFT);
    }

    /// True when the packet continues in the next frame (multi-buffer, `XDP_PKT_CONTD`).
    #[inline]
    pub fn is_continued(&self) -> bool {
        self.options & libc::XDP_PKT_CONTD != 0
    }

    /// Marks (or unmarks) this frame as continued by the next one of the same packet.
    #[inline]
    pub fn set_continued(&mut self, continued: bool) {
        if continued {
            self.options |= libc::XDP_PKT_CONTD;
        } else {
            self.options &= !libc::XDP_PKT_CONTD;
        }
    }

    /// True when the descriptor carries transmit metadata (`XDP_TX_METADATA`).
    #[inline]
    pub fn has_tx_metadata(&self) -> bool {
        self.options & XDP_TX_METADATA != 0
    }

    #[inline]
    pub(crate) fn tag(&self) -> u64 {
        self.tagged_addr >> TAG_SHIFT
    }

    #[inline]
    pub(crate) fn desc(&self) -> libc::xdp_desc {
        libc::xdp_desc {
            addr: self.addr(),
            len: self.len,
            options: self.options & !MARK,
        }
    }
}

/// The chunk arithmetic of one UMEM for a batch of the kernel's addresses: in the usual
/// aligned mode over a power-of-two UMEM, one mask per address; else a clamp and a mask.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunks {
    aligned: bool,
    frame_size: u64,
    /// The UMEM's last byte: an address past it is clamped there.
    last: u64,
    /// In aligned mode over a UMEM whose length is a power of two, the bits of an address
    /// that name a chunk inside it: one AND takes any address to a chunk start inside the
    /// UMEM. Zero otherwise.
    chunk_bits: u64,
    meta: u64,
    /// The UMEM's tag, in place in a frame handle's address.
    tag_bits: u64,
}

/// Writes a transmit checksum request (struct xsk_tx_metadata: the flags, then the
/// request's start and offset, the rest of the union zero) as three words at `to`.
///
/// # Safety
/// `to..to + 24` must lie in a frame's transmit-metadata room inside the UMEM, which nothing
/// else reaches while it is written.
#[inline(always)]
pub(crate) unsafe fn write_checksum_request(to: *mut u8, start: u16, offset: u16) {
    let [s0, s1] = start.to_ne_bytes();
    let [o0, o1] = offset.to_ne_bytes();
    let words = [
        u64::from(libc::XDP_TXMD_FLAGS_CHECKSUM),
        u64::from_ne_bytes([s0, s1, o0, o1, 0, 0, 0, 0]),
        0,
    ];
    let to = to.cast::<u64>();
    // SAFETY: the 24 bytes are the caller's to write. Unaligned writes: the room need not
    // be 8-aligned.
    unsafe {
        for (i, w) in words.into_iter().enumerate() {
            to.add(i).write_unaligned(w);
        }
    }
}

impl Chunks {
    /// The kernel's `addr` as a UMEM offset: in unaligned mode with the offset in its top
    /// bits applied, and clamped into the UMEM.
    #[inline]
    pub(crate) fn resolve(&self, addr: u64) -> u64 {
        if self.chunk_bits != 0 {
            // A power-of-two UMEM: the bits below its length keep any address inside it.
            return addr & self.last;
        }
        if self.aligned {
            return addr.min(self.last);
        }
        ((addr & ADDR_MASK) + (addr >> TAG_SHIFT)).min(self.last)
    }

    /// The start of the chunk holding UMEM offset `offset`.
    #[inline]
    pub(crate) fn chunk_of(&self, offset: u64) -> u64 {
        if self.aligned {
            offset & !(self.frame_size - 1)
        } else {
            offset - offset % self.frame_size
        }
    }

    /// The start of the chunk holding the kernel's `addr`.
    #[inline]
    pub(crate) fn chunk(&self, addr: u64) -> u64 {
        if self.chunk_bits != 0 {
            return addr & self.chunk_bits;
        }
        self.chunk_of(self.resolve(addr))
    }

    /// A received frame at the kernel's `addr` with `len` bytes, as a transmit descriptor's
    /// start and length: the length clamped to the chunk's end; `None` if nothing is left or
    /// the start leaves no transmit-metadata room in front.
    #[inline]
    pub(crate) fn tx_span(&self, addr: u64, len: u32) -> Option<(u64, u32)> {
        self.tx_span_in_chunk(addr, len)
            .map(|(start, len, _)| (start, len))
    }

    /// [`Chunks::tx_span`], also giving how far into its chunk the frame starts.
    #[inline]
    pub(crate) fn tx_span_in_chunk(&self, addr: u64, len: u32) -> Option<(u64, u32, u64)> {
        let start = self.resolve(addr);
        let offset = start - self.chunk_of(start);
        let len = u64::from(len).min(self.frame_size - offset);
        (len > 0 && (self.meta == 0 || offset >= self.meta)).then_some((start, len as u32, offset))
    }

    /// A handle for a frame the kernel handed back at `addr` with `len` bytes: a value out of
    /// range is held inside the UMEM, so the handle can never reach outside the mapping, and
    /// the application's note is 0.
    #[inline]
    pub(crate) fn frame(&self, addr: u64, len: u32, options: u32) -> Frame {
        let addr = self.resolve(addr);
        Frame {
            tagged_addr: self.tag_bits | addr,
            len: u64::from(len).min(self.last + 1 - addr) as u32,
            options: options & !MARK,
        }
    }

    /// Whether `frame` is one of this UMEM's.
    #[inline]
    pub(crate) fn owns(&self, frame: &Frame) -> bool {
        frame.tagged_addr & !ADDR_MASK == self.tag_bits
    }

    /// Whether the kernel would take `frame` as a transmit descriptor of this UMEM: one of its
    /// own, not empty, inside its chunk, past the transmit-metadata room.
    #[inline]
    pub(crate) fn sendable(&self, frame: &Frame) -> bool {
        // One XOR both checks the tag and leaves the address: another UMEM's tag leaves
        // bits above the address's.
        let addr = frame.tagged_addr ^ self.tag_bits;
        let len = u64::from(frame.len);
        let offset = addr - self.chunk_of(addr);
        addr <= ADDR_MASK
            && len > 0
            && addr + len <= self.last + 1
            && offset + len <= self.frame_size
            && offset >= self.meta
    }

    /// True when the transmit-metadata room in front of each frame holds a request
    /// ([`TX_METADATA_LEN`] bytes).
    #[inline]
    pub(crate) fn holds_tx_metadata(&self) -> bool {
        self.meta >= u64::from(TX_METADATA_LEN)
    }

    /// Where the transmit-metadata request of a frame whose data is at `addr` starts, as an
    /// offset into the UMEM: the room in front of the data.
    #[inline]
    pub(crate) fn tx_metadata_at(&self, addr: u64) -> usize {
        (addr - self.meta) as usize
    }

    /// Where a transmit from the chunk holding `addr` starts: past its metadata room.
    #[inline]
    pub(crate) fn room_start(&self, addr: u64) -> u64 {
        self.chunk(addr) + self.meta
    }
}

/// The kernel-facing part of a UMEM: which sockets currently hold its registration.
#[derive(Debug, Default)]
pub(crate) struct Registration {
    /// Sockets bound with this UMEM: (netns inode, ifindex, queue) and the socket's fd.
    pub(crate) bound: Vec<(u64, u32, u32, Weak<OwnedFd>)>,
}

#[derive(Debug)]
struct UmemInner {
    map: Mmap,
    /// The memfd behind a shareable UMEM.
    file: Option<OwnedFd>,
    config: UmemConfig,
    /// `config.len()`, kept apart: every packet's data access is bounded by it.
    len: u64,
    tag: u64,
    frames_taken: AtomicBool,
    registration: Mutex<Registration>,
}

/// A region of memory shared with the kernel and cut into frames.
///
/// Cloning a `Umem` is cheap and shares the same memory; the memory stays mapped until the
/// last clone and the last socket using it are gone.
///
/// ```no_run
/// use xskit::{Umem, UmemConfig};
/// let umem = Umem::new(UmemConfig::default().frame_count(8192))?;
/// let frames = umem.take_frames().expect("first call");
/// assert_eq!(frames.len(), 8192);
/// # Ok::<(), xskit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Umem {
    inner: Arc<UmemInner>,
}

static NEXT_TAG: AtomicU16 = AtomicU16::new(1);

impl Umem {
    /// Maps memory for a UMEM laid out as `config` says (already validated).
    pub(crate) fn map(config: UmemConfig) -> Result<Self, SyscallError> {
        let mut len = config.len();
        if config.huge_pages {
            len = len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE;
        }
        if config.shareable {
            let file = xskit_os::fdpass::memfd(c"xskit-umem", len, config.huge_pages)?;
            return Self::map_file(file, len, config);
        }
        let map = Mmap::anonymous(len as usize, config.huge_pages)?;
        Ok(Self::wrap(map, None, config))
    }

    /// Maps `len` bytes of the memfd `file` (its own, or one handed over) as a UMEM.
    pub(crate) fn map_file(
        file: OwnedFd,
        len: u64,
        config: UmemConfig,
    ) -> Result<Self, SyscallError> {
        let map = Mmap::shared(std::os::fd::AsFd::as_fd(&file), len as usize, 0)?;
        Ok(Self::wrap(map, Some(file), config))
    }

    fn wrap(map: Mmap, file: Option<OwnedFd>, config: UmemConfig) -> Self {
        let tag = u64::from(NEXT_TAG.fetch_add(1, Ordering::Relaxed));
        Umem {
            inner: Arc::new(UmemInner {
                map,
                file,
                len: config.len(),
                config,
                tag,
                frames_taken: AtomicBool::new(false),
                registration: Mutex::new(Registration::default()),
            }),
        }
    }

    /// The memfd behind a [`UmemConfig::shareable`] UMEM, to hand to another process.
    pub fn file(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.file.as_ref().map(std::os::fd::AsFd::as_fd)
    }

    /// The frames that hold UMEM offsets `addrs` (any offset inside each, as a frame handed
    /// back by the kernel has it), each empty and positioned for transmit as
    /// [`Umem::take_frames`] gives them: the frames a process that handed this UMEM over had
    /// free. Like `take_frames`, only once: `None` after the first call, or when an offset lies
    /// outside the UMEM or two fall in one frame.
    pub fn take_frames_at(&self, addrs: &[u64]) -> Option<Vec<Frame>> {
        let cfg = &self.inner.config;
        let (size, meta) = (u64::from(cfg.frame_size), u64::from(cfg.tx_metadata_len));
        let mut seen = vec![false; cfg.frame_count as usize];
        for &a in addrs {
            let slot = seen.get_mut((a / size) as usize)?;
            if *slot {
                return None;
            }
            *slot = true;
        }
        if self.inner.frames_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(
            addrs
                .iter()
                .map(|&a| self.frame_at(a / size * size + meta, 0, 0))
                .collect(),
        )
    }

    /// The layout.
    pub fn config(&self) -> &UmemConfig {
        &self.inner.config
    }

    /// Every frame of the UMEM, empty and positioned for transmit. Returns `None` after the
    /// first call: frames are unique handles, so they can be handed out only once.
    pub fn take_frames(&self) -> Option<Vec<Frame>> {
        if self.inner.frames_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let cfg = &self.inner.config;
        Some(
            (0..u64::from(cfg.frame_count))
                .map(|i| {
                    self.frame_at(
                        i * u64::from(cfg.frame_size) + u64::from(cfg.tx_metadata_len),
                        0,
                        0,
                    )
                })
                .collect(),
        )
    }

    #[inline]
    pub(crate) fn frame_at(&self, addr: u64, len: u32, options: u32) -> Frame {
        Frame {
            tagged_addr: (self.inner.tag << TAG_SHIFT) | (addr & ADDR_MASK),
            len,
            options,
        }
    }

    /// The start of the frame (chunk) that holds UMEM offset `addr`.
    #[inline]
    pub(crate) fn chunk_base(&self, addr: u64) -> u64 {
        let fs = u64::from(self.inner.config.frame_size);
        if fs.is_power_of_two() {
            addr & !(fs - 1)
        } else {
            addr - addr % fs
        }
    }

    /// Bytes a frame can hold from its current start to the end of its chunk. (Transmit
    /// metadata lies in front of the start, so it takes nothing from this: the kernel's rule
    /// is that the data's offset in the chunk plus its length fit the chunk.)
    #[inline]
    pub fn capacity(&self, frame: &Frame) -> usize {
        let addr = frame.addr();
        let end = self.chunk_base(addr) + u64::from(self.inner.config.frame_size);
        (end - addr) as usize
    }

    /// Bytes of packet data a frame holds from the start of its room (its chunk less the
    /// transmit-metadata room in front).
    #[inline]
    pub fn room(&self) -> usize {
        self.inner
            .config
            .frame_size
            .saturating_sub(self.inner.config.tx_metadata_len) as usize
    }

    /// Where the room of the chunk holding UMEM offset `addr` starts: past its
    /// transmit-metadata room.
    #[inline]
    pub(crate) fn room_start(&self, addr: u64) -> u64 {
        self.chunk_base(addr) + u64::from(self.inner.config.tx_metadata_len)
    }

    /// How to turn the kernel's addresses into chunk starts, worked out once for a batch.
    #[inline]
    pub(crate) fn chunks(&self) -> Chunks {
        let c = &self.inner.config;
        let fs = u64::from(c.frame_size);
        let aligned = !c.unaligned && fs.is_power_of_two();
        let len = c.len();
        Chunks {
            aligned,
            frame_size: fs,
            last: len.saturating_sub(1),
            chunk_bits: if aligned && len.is_power_of_two() && len >= fs {
                (len - 1) & !(fs - 1)
            } else {
                0
            },
            meta: u64::from(c.tx_metadata_len),
            tag_bits: self.inner.tag << TAG_SHIFT,
        }
    }

    /// Puts a frame back at the start of its chunk, empty, ready to be written for transmit.
    pub fn reset(&self, frame: &mut Frame) {
        *frame = self.frame_at(self.room_start(frame.addr()), 0, 0);
    }

    /// Sets how many bytes of the frame are packet data, if they fit; else returns the
    /// frame's capacity.
    pub(crate) fn try_set_len(&self, frame: &mut Frame, len: usize) -> Result<(), usize> {
        let cap = self.capacity(frame);
        if len > cap {
            return Err(cap);
        }
        frame.len = len as u32;
        Ok(())
    }

    /// Whether `frame` is one of this UMEM's. A frame of another UMEM here is a bug in the
    /// caller: debug builds stop at it; release builds show it no bytes (never another
    /// UMEM's memory).
    fn check_tag(&self, frame: &Frame) -> bool {
        let ours = frame.tag() == self.inner.tag;
        debug_assert!(ours, "a Frame of another UMEM was used with this one");
        ours
    }

    /// The frame's packet data. A frame of another UMEM panics in debug builds and reads as
    /// empty in release builds.
    #[inline]
    pub fn data(&self, frame: &Frame) -> &[u8] {
        if !self.check_tag(frame) {
            return &[];
        }
        let len = frame.len().min(self.capacity_from_addr(frame.addr()));
        // SAFETY: addr + len lies inside the mapping (clamped above), the frame handle is the
        // only user-space handle to this chunk, and the kernel does not write a chunk while a
        // handle to it exists (the kernel owns a chunk only between fill/tx and rx/completion).
        unsafe {
            std::slice::from_raw_parts(self.inner.map.as_ptr().add(frame.addr() as usize), len)
        }
    }

    /// The frame's packet data, writable. Empty if the frame belongs to another UMEM.
    #[inline]
    pub fn data_mut<'a>(&'a self, frame: &'a mut Frame) -> &'a mut [u8] {
        if !self.check_tag(frame) {
            return &mut [];
        }
        let len = frame.len().min(self.capacity_from_addr(frame.addr()));
        // SAFETY: as in `data`; the `&mut Frame` borrow makes this the only live slice of the
        // chunk for its lifetime, because no other handle to the chunk can exist.
        unsafe {
            std::slice::from_raw_parts_mut(self.inner.map.as_ptr().add(frame.addr() as usize), len)
        }
    }

    /// The frame's whole writable room, from its start to the end of its chunk (ignoring its
    /// current length): write a packet here, then [`Umem::set_len`].
    #[inline]
    pub fn buffer_mut<'a>(&'a self, frame: &'a mut Frame) -> &'a mut [u8] {
        if !self.check_tag(frame) {
            return &mut [];
        }
        let len = self
            .capacity(frame)
            .min(self.capacity_from_addr(frame.addr()));
        // SAFETY: as in `data_mut`; the range stays within the frame's own chunk.
        unsafe {
            std::slice::from_raw_parts_mut(self.inner.map.as_ptr().add(frame.addr() as usize), len)
        }
    }

    /// Asks the kernel (or the device) to finish the frame's TCP or UDP checksum on transmit:
    /// sum from byte `start` of the packet to its end and store the result at `start +
    /// offset`, as for a CHECKSUM_PARTIAL skb. Writes `struct xsk_tx_metadata` into the
    /// `tx_metadata_len` bytes in front of the data and marks the descriptor. Returns false
    /// (and changes nothing) when the UMEM has no metadata room or it lies outside the chunk.
    pub fn request_tx_checksum(&self, frame: &mut Frame, start: u16, offset: u16) -> bool {
        let room = self.inner.config.tx_metadata_len;
        if room < TX_METADATA_LEN
            || !self.check_tag(frame)
            || frame.addr() - self.chunk_base(frame.addr()) < u64::from(room)
        {
            return false;
        }
        // SAFETY: checked just above; the `&mut Frame` borrow makes this handle the only one
        // to the chunk, and its address is inside the UMEM.
        unsafe { self.write_tx_checksum_request(frame.addr(), start, offset) };
        frame.options |= XDP_TX_METADATA;
        true
    }

    /// Writes the request of [`Umem::request_tx_checksum`] in front of the data at `addr`.
    ///
    /// # Safety
    /// The UMEM's transmit-metadata room must be at least [`TX_METADATA_LEN`] bytes, `addr`
    /// inside the UMEM and at least that room into its chunk ([`Chunks::tx_span`] checks
    /// the last two), and no other handle or slice may reach the chunk.
    pub(crate) unsafe fn write_tx_checksum_request(&self, addr: u64, start: u16, offset: u16) {
        let at = self.chunks().tx_metadata_at(addr);
        // SAFETY: `at` is the room in front of `addr`'s data, in its chunk, inside the UMEM,
        // as the caller promises.
        unsafe { write_checksum_request(self.as_ptr().add(at), start, offset) }
    }

    fn capacity_from_addr(&self, addr: u64) -> usize {
        (self.inner.len.saturating_sub(addr)) as usize
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.inner.map.as_ptr()
    }

    /// `len` bytes of the UMEM from `offset`, writable.
    ///
    /// # Safety
    /// `offset + len` must lie inside the UMEM, and no other slice or frame handle may reach
    /// those bytes while the returned slice lives (a frame the kernel just handed back, before
    /// it is handed on).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, offset: u64, len: usize) -> &mut [u8] {
        debug_assert!(offset + len as u64 <= self.inner.config.len());
        // SAFETY: in bounds and unaliased, as the caller promises.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(offset as usize), len) }
    }

    pub(crate) fn registration(&self) -> std::sync::MutexGuard<'_, Registration> {
        self.inner.registration.lock_unpoisoned()
    }

    /// Two handles refer to the same UMEM.
    pub fn same(&self, other: &Umem) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn umem(cfg: UmemConfig) -> Umem {
        Umem::new(cfg).expect("anonymous memory")
    }

    #[test]
    fn handed_frames_are_whole_frames_taken_once_and_never_twice() {
        let cfg = UmemConfig::default().frame_count(8).tx_metadata_len(24);
        let u = umem(cfg);
        // Offsets inside frames 1 and 5 (as received, past the headroom).
        let frames = u.take_frames_at(&[4096 + 256, 5 * 4096 + 24]).unwrap();
        let addrs: Vec<u64> = frames.iter().map(Frame::addr).collect();
        assert_eq!(addrs, [4096 + 24, 5 * 4096 + 24]);
        assert!(u.take_frames_at(&[0]).is_none(), "only once");
        assert!(u.take_frames().is_none());
        let u = umem(cfg);
        assert!(u.take_frames_at(&[8 * 4096]).is_none(), "outside");
        assert!(u.take_frames_at(&[100, 200]).is_none(), "one frame twice");
        assert!(
            u.take_frames_at(&[100]).is_some(),
            "a refusal takes nothing"
        );
    }

    #[test]
    fn frames_are_handed_out_once() {
        let u = umem(UmemConfig {
            frame_count: 16,
            ..Default::default()
        });
        let frames = u.take_frames().unwrap();
        assert_eq!(frames.len(), 16);
        assert_eq!(frames[3].addr(), 3 * 4096);
        assert!(u.take_frames().is_none());
    }

    #[test]
    fn write_and_read_back() {
        let u = umem(UmemConfig {
            frame_count: 2,
            ..Default::default()
        });
        let mut f = u.take_frames().unwrap().pop().unwrap();
        u.write(&mut f, b"hello").unwrap();
        assert_eq!(u.data(&f), b"hello");
        assert!(u.write(&mut f, &[0; 4097]).is_err());
    }

    #[test]
    fn foreign_frames_are_refused() {
        let a = umem(UmemConfig {
            frame_count: 2,
            ..Default::default()
        });
        let b = umem(UmemConfig {
            frame_count: 2,
            ..Default::default()
        });
        let mut f = a.take_frames().unwrap().pop().unwrap();
        a.write(&mut f, b"x").unwrap();
        assert!(a.chunks().sendable(&f), "its own UMEM's rings submit it");
        assert!(!b.chunks().sendable(&f), "the rings never submit it");
        a.try_set_len(&mut f, 0).unwrap();
        assert!(!a.chunks().sendable(&f), "nor an empty frame");
        a.try_set_len(&mut f, 1).unwrap();
        let read = std::panic::catch_unwind(|| b.data(&f).len());
        if cfg!(debug_assertions) {
            assert!(read.is_err(), "debug builds stop at a foreign frame");
        } else {
            assert_eq!(read.ok(), Some(0), "release builds show it nothing");
        }
    }

    #[test]
    fn kernel_addresses_are_clamped_and_unaligned_offsets_resolved() {
        let u = umem(UmemConfig {
            frame_count: 2,
            ..Default::default()
        });
        let f = u.chunks().frame(1 << 40, 9000, 0);
        assert!(f.addr() < 8192);
        assert!(f.addr() + f.len() as u64 <= 8192);
        let un = umem(UmemConfig {
            frame_count: 2,
            frame_size: 3000,
            unaligned: true,
            ..Default::default()
        });
        let f = un.chunks().frame(3000 | (256 << 48), 60, 0);
        assert_eq!(f.addr(), 3256);
        assert_eq!(un.chunk_base(f.addr()), 3000);
    }

    #[test]
    fn a_note_stays_with_the_frame_and_never_reaches_the_kernel() {
        let u = umem(UmemConfig {
            frame_count: 2,
            ..Default::default()
        });
        let mut f = u.chunks().frame(0, 60, libc::XDP_PKT_CONTD | MARK);
        assert_eq!(f.note(), 0, "the kernel's options carry no note");
        for note in [1, 2, 3, 7] {
            f.set_note(note);
            assert!(f.note() == note & 3 && f.is_continued());
            assert_eq!(f.options(), libc::XDP_PKT_CONTD);
            assert_eq!(f.desc().options, libc::XDP_PKT_CONTD);
        }
        f.set_note(0);
        assert!(f.note() == 0 && f.is_continued());
    }
}
