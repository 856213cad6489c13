//! AF_PACKET sockets: a TPACKET_V3 receive ring and a `sendmmsg` transmitter with qdisc
//! bypass, as a tuned AF_PACKET application would use them (the baseline xskit is measured
//! against, and a capture that sees every frame), and a socket for one ethertype (the slow
//! protocols' LACPDUs, ARP probes).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{Mmap, SyscallError};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then tpacket_hdr_v1).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
/// Offsets in `struct tpacket3_hdr`.
const PKT_NEXT: usize = 0;
const PKT_SNAPLEN: usize = 12;
const PKT_MAC: usize = 24;
const PKT_STATUS: usize = 20;
const PKT_VLAN_TCI: usize = 32;
const PKT_VLAN_TPID: usize = 36;
/// The kernel took a VLAN tag out of the frame into the header (and its TPID).
const TP_STATUS_VLAN_VALID: usize = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: usize = 1 << 6;

const BLOCK_SIZE: u32 = 1 << 20;
const BLOCK_NR: u32 = 64;
const FRAME_SIZE: u32 = 2048;

fn packet_socket(ethertype: u16, flags: libc::c_int) -> Result<OwnedFd, SyscallError> {
    let proto = ethertype.to_be();
    // SAFETY: socket() takes no pointers.
    let fd = SyscallError::check(
        unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
                libc::c_int::from(proto),
            )
        },
        "socket(AF_PACKET)",
    )?;
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(fd)
}

const ALL: u16 = libc::ETH_P_ALL as u16;

fn bind(fd: &OwnedFd, ifindex: u32, ethertype: u16) -> Result<(), SyscallError> {
    // SAFETY: a zeroed sockaddr_ll is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ethertype.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll of the size passed.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    SyscallError::check(ret, "bind(AF_PACKET)").map(drop)
}

fn packet_opt<T: crate::SockOptValue>(
    fd: &OwnedFd,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    crate::setsockopt(std::os::fd::AsFd::as_fd(fd), SOL_PACKET, name, value, call)
}

/// A TPACKET_V3 receive ring bound to one interface: 64 blocks of 1 MiB.
#[derive(Debug)]
pub struct PacketRxRing {
    fd: OwnedFd,
    map: Mmap,
    current: usize,
}

impl PacketRxRing {
    /// Opens the ring on the interface with index `ifindex` (in this thread's namespace).
    pub fn open(ifindex: u32) -> Result<Self, SyscallError> {
        let fd = packet_socket(ALL, 0)?;
        packet_opt(
            &fd,
            PACKET_VERSION,
            &TPACKET_V3,
            "setsockopt(PACKET_VERSION)",
        )?;
        // struct tpacket_req3: block size, block count, frame size, frame count, retire
        // timeout (ms), private size, feature word.
        let req: [u32; 7] = [
            BLOCK_SIZE,
            BLOCK_NR,
            FRAME_SIZE,
            BLOCK_SIZE / FRAME_SIZE * BLOCK_NR,
            10,
            0,
            0,
        ];
        packet_opt(&fd, PACKET_RX_RING, &req, "setsockopt(PACKET_RX_RING)")?;
        let map = Mmap::shared(
            std::os::fd::AsFd::as_fd(&fd),
            (BLOCK_SIZE * BLOCK_NR) as usize,
            0,
        )?;
        bind(&fd, ifindex, ALL)?;
        Ok(PacketRxRing {
            fd,
            map,
            current: 0,
        })
    }

    fn word(&self, block: usize, off: usize) -> &AtomicU32 {
        // SAFETY: block < BLOCK_NR and off + 4 <= the block descriptor size, so the word lies in
        // the mapping; it is 4-byte aligned because blocks are page-aligned.
        unsafe {
            &*self
                .map
                .as_ptr()
                .add(block * BLOCK_SIZE as usize + off)
                .cast::<AtomicU32>()
        }
    }

    /// Hands every packet of the next ready block to `f` (waiting up to `timeout` for one),
    /// returns the block to the kernel, and returns the number of packets. A VLAN tag the
    /// receiving device took out of a frame is put back, so `f` sees the frame as it was
    /// sent.
    pub fn receive(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&[u8]),
    ) -> Result<u64, SyscallError> {
        let block = self.current;
        // Acquire pairs with the kernel's release of the block to user space.
        if self.word(block, BLOCK_STATUS).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            crate::poll(
                std::os::fd::AsFd::as_fd(&self.fd),
                libc::POLLIN | libc::POLLERR,
                timeout,
            )?;
            if self.word(block, BLOCK_STATUS).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return Ok(0);
            }
        }
        let base = block * BLOCK_SIZE as usize;
        // SAFETY: the block is ours until we hand it back below, and lies in the mapping.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(base), BLOCK_SIZE as usize) };
        let get = |at: usize| {
            bytes
                .get(at..at + 4)
                .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let get16 = |at: usize| {
            bytes
                .get(at..at + 2)
                .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]) as usize)
        };
        let count = get(BLOCK_NUM_PKTS);
        let mut pkt = get(BLOCK_FIRST_PKT);
        let mut tagged = Vec::new();
        for _ in 0..count {
            let (mac, len) = (get16(pkt + PKT_MAC), get(pkt + PKT_SNAPLEN));
            let status = get(pkt + PKT_STATUS);
            match bytes.get(pkt + mac..pkt + mac + len) {
                Some(data) if status & TP_STATUS_VLAN_VALID != 0 && data.len() >= 12 => {
                    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                        get16(pkt + PKT_VLAN_TPID) as u16
                    } else {
                        0x8100
                    };
                    let tci = get(pkt + PKT_VLAN_TCI) as u16;
                    tagged.clear();
                    tagged.extend_from_slice(&data[..12]);
                    tagged.extend_from_slice(&tpid.to_be_bytes());
                    tagged.extend_from_slice(&tci.to_be_bytes());
                    tagged.extend_from_slice(&data[12..]);
                    f(&tagged);
                }
                Some(data) => f(data),
                None => {}
            }
            let next = get(pkt + PKT_NEXT);
            if next == 0 {
                break;
            }
            pkt += next;
        }
        // Release: our reads of the block are done before the kernel may refill it.
        self.word(block, BLOCK_STATUS)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.current = (block + 1) % BLOCK_NR as usize;
        Ok(count as u64)
    }
}

/// An AF_PACKET transmitter that sends batches with `sendmmsg`, bypassing the qdisc layer.
#[derive(Debug)]
pub struct PacketTx {
    fd: OwnedFd,
}

impl PacketTx {
    /// Opens the transmitter on the interface with index `ifindex`.
    pub fn open(ifindex: u32) -> Result<Self, SyscallError> {
        let fd = packet_socket(ALL, 0)?;
        let one: libc::c_int = 1;
        packet_opt(
            &fd,
            PACKET_QDISC_BYPASS,
            &one,
            "setsockopt(PACKET_QDISC_BYPASS)",
        )?;
        bind(&fd, ifindex, ALL)?;
        Ok(PacketTx { fd })
    }

    /// Sends `frame` `n` times (n <= 256) in one `sendmmsg`; returns how many went out.
    pub fn send_copies(&self, frame: &[u8], n: usize) -> Result<usize, SyscallError> {
        let n = n.min(256);
        let mut iov = libc::iovec {
            iov_base: frame.as_ptr() as *mut libc::c_void,
            iov_len: frame.len(),
        };
        // SAFETY: a zeroed mmsghdr is a valid value (null pointers, zero lengths).
        let mut msgs: [libc::mmsghdr; 256] = unsafe { std::mem::zeroed() };
        for m in msgs.iter_mut().take(n) {
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs holds n initialised headers whose single iovec points at `frame`, which
        // outlives the call; the kernel only reads from it.
        let ret = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if ret < 0 {
            let err = SyscallError::last("sendmmsg(AF_PACKET)");
            if matches!(err.errno(), Some(libc::EAGAIN | libc::ENOBUFS)) {
                return Ok(0);
            }
            return Err(err);
        }
        Ok(ret as usize)
    }
}

/// A nonblocking AF_PACKET socket for one EtherType on one interface: a control protocol's
/// frames in and out, one at a time (LACP's slow protocols: a few a second).
#[derive(Debug)]
pub struct PacketProtocolSocket {
    fd: OwnedFd,
}

impl PacketProtocolSocket {
    /// Opens the socket for `ethertype` frames on the interface with index `ifindex` (in this
    /// thread's namespace).
    pub fn open(ifindex: u32, ethertype: u16) -> Result<Self, SyscallError> {
        let fd = packet_socket(ethertype, libc::SOCK_NONBLOCK)?;
        bind(&fd, ifindex, ethertype)?;
        Ok(PacketProtocolSocket { fd })
    }

    /// The next frame received into `buf` (its length; a longer frame is cut to `buf`),
    /// or None when none is waiting. Frames this host sent are skipped.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, SyscallError> {
        loop {
            // SAFETY: a zeroed sockaddr_ll is a valid value.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buf and sll are valid for writes of the lengths passed, and outlive the
            // call.
            let ret = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                    (&mut sll as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if ret < 0 {
                let err = SyscallError::last("recvfrom(AF_PACKET)");
                return match err.errno() {
                    Some(libc::EAGAIN) => Ok(None),
                    Some(libc::EINTR) => continue,
                    _ => Err(err),
                };
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            return Ok(Some((ret as usize).min(buf.len())));
        }
    }

    /// Sends one whole frame.
    pub fn send(&self, frame: &[u8]) -> Result<(), SyscallError> {
        // SAFETY: frame is valid for reads of its length during the call.
        let ret = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        SyscallError::check(ret as libc::c_int, "send(AF_PACKET)").map(drop)
    }

    /// The descriptor, to wait on.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }
}
