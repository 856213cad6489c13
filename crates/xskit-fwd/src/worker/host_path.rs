//! The forwarding host's own path: frames for its kernel go through a TAP device (in
//! tests, memory), and the kernel's frames come back out of the port their destination was
//! learnt behind.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use xskit::Frame;
use xskit_os::sync::LockUnpoisoned;
use xskit_os::SyscallError;
use xskit_wire::ethernet;
use xskit_wire::offload::L4Checksum;

use super::Worker;
use crate::bonded::SidePort;
use crate::counter::bump;
use crate::error::{Error, Result};

/// TAP frames read per visit.
const TAP_BATCH: usize = 32;

/// The host's side of the forwarder: where frames for the forwarding host's own kernel go,
/// and where the kernel's frames come from (a TAP device; in tests, memory).
pub(crate) trait HostLink: Send + Sync + std::fmt::Debug {
    /// Hands a frame to the host; false when its queue is full (the frame is dropped).
    fn write(&self, frame: &[u8]) -> Result<bool, SyscallError>;
    /// Takes a frame from the host into `buf`; `None` when there is none.
    fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, SyscallError>;
    /// A descriptor that turns readable when the host has a frame.
    fn readiness(&self) -> Option<BorrowedFd<'_>>;
}

impl HostLink for xskit_os::tap::TapFd {
    fn write(&self, frame: &[u8]) -> Result<bool, SyscallError> {
        xskit_os::tap::TapFd::write(self, frame)
    }
    fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, SyscallError> {
        xskit_os::tap::TapFd::read(self, buf)
    }
    fn readiness(&self) -> Option<BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(self))
    }
}

/// The host link and what it has learnt: which port each MAC address is behind.
#[derive(Debug)]
pub(crate) struct TapPath {
    pub(crate) link: Box<dyn HostLink>,
    pub(crate) mac: [u8; 6],
    pub(crate) learnt: Mutex<HashMap<[u8; 6], u16>>,
}

impl TapPath {
    fn learn(&self, frame: &[u8], port: u16) {
        let Ok(eth) = ethernet::Frame::new_checked(frame) else {
            return;
        };
        let src = eth.src_addr();
        if src[0] & 1 == 0 {
            self.learnt.lock_unpoisoned().insert(src, port);
        }
    }
}

impl<P: SidePort> Worker<P> {
    /// Broadcast and multicast (ARP requests, neighbour discovery) are also the forwarding
    /// host's business: its kernel gets a copy of those in the input vector. The original is
    /// forwarded whatever becomes of the copy, so a copy the TAP device refused is a drop on
    /// the kernel's path, not the forwarder's end.
    #[inline(always)]
    pub(crate) fn copy_group_frames_to_host(&self, p: usize) {
        let Some(tap) = &self.tap else {
            return;
        };
        let (mut copied, mut refused) = (0, 0);
        for f in self.input.iter() {
            let data = self.umem.data(f);
            if data.first().is_some_and(|b| b & 1 == 1) && !f.is_continued() {
                tap.learn(data, p as u16);
                match tap.link.write(data) {
                    Ok(true) => copied += 1,
                    Ok(false) | Err(_) => refused += 1,
                }
            }
        }
        let cells = &self.port_cells[p];
        bump(&cells.copies, copied);
        bump(&cells.to_kernel_dropped, refused);
    }

    pub(crate) fn hand_to_kernel(&mut self, port: usize, frames: &mut Vec<Frame>) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let cells = &self.port_cells[port];
        match &self.tap {
            Some(tap) => {
                for f in frames.iter_mut() {
                    // The host's kernel reads bytes, not skb state: the packet goes whole, its
                    // checksum finished.
                    let data = match self.chains.take_tail(f) {
                        Some(mut tail) => {
                            self.gathered.clear();
                            self.gathered.extend_from_slice(self.umem.data(f));
                            for t in &tail {
                                self.gathered.extend_from_slice(self.umem.data(t));
                            }
                            self.pool.free(&mut tail);
                            self.chains.recycle_vec(tail);
                            &mut self.gathered[..]
                        }
                        None => self.umem.data_mut(f),
                    };
                    if let Some(c) = L4Checksum::locate(data, data.len()) {
                        if c.is_partial(data) {
                            c.complete(data);
                            bump(&cells.checksums_completed, 1);
                        }
                    }
                    let data = &*data;
                    tap.learn(data, port as u16);
                    if tap.link.write(data).map_err(Error::Syscall)? {
                        bump(&cells.to_kernel, 1);
                        bump(&cells.copies, 1);
                    } else {
                        bump(&cells.to_kernel_dropped, 1);
                    }
                }
            }
            None => {
                bump(&cells.to_kernel_dropped, frames.len() as u64);
                self.chains.release_tails(frames, &mut self.raw);
                frames.append(&mut self.raw);
            }
        }
        self.ports[port].recycle(frames, &mut self.pool);
        Ok(())
    }

    /// Frames the kernel sent through the TAP device go out of the port their destination was
    /// learnt on, or every port when it is unknown or a group address.
    pub(crate) fn send_kernel_frames(&mut self) -> Result<()> {
        let out = &mut self.out;
        let Some(tap) = self.tap.clone() else {
            return Ok(());
        };
        let nports = self.ports.len();
        for _ in 0..TAP_BATCH {
            if self.pool.alloc(&mut self.tap_frames, 1) == 0 {
                return Ok(());
            }
            let Some(mut f) = self.tap_frames.pop() else {
                return Ok(());
            };
            let len = match tap.link.read(self.umem.buffer_mut(&mut f)) {
                Ok(Some(len)) if len >= 14 => len,
                Ok(_) => {
                    self.pool.free_one(f);
                    return Ok(());
                }
                Err(e) => {
                    self.pool.free_one(f);
                    return Err(Error::Syscall(e));
                }
            };
            self.umem.set_len(&mut f, len)?;
            let data = self.umem.data(&f);
            // At least 14 bytes were read: the view cannot fail.
            let dst = ethernet::Frame::new_checked(data).map_or([0xff; 6], |e| e.dst_addr());
            let port = if dst[0] & 1 == 0 {
                tap.learnt.lock_unpoisoned().get(&dst).copied()
            } else {
                None
            };
            match port {
                Some(p) if usize::from(p) < nports => {
                    let cells = &self.port_cells[usize::from(p)];
                    bump(&cells.from_kernel, 1);
                    bump(&cells.copies, 1);
                    out.tx[usize::from(p)].push(f);
                }
                _ => {
                    // Flood: a copy for every port after the first.
                    for p in 1..nports {
                        self.pool.alloc(&mut self.tap_frames, 1);
                        if let Some(mut c) = self.tap_frames.pop() {
                            self.umem.write(&mut c, self.umem.data(&f))?;
                            bump(&self.port_cells[p].from_kernel, 1);
                            bump(&self.port_cells[p].copies, 1);
                            out.tx[p].push(c);
                        }
                    }
                    bump(&self.port_cells[0].from_kernel, 1);
                    bump(&self.port_cells[0].copies, 1);
                    out.tx[0].push(f);
                }
            }
        }
        Ok(())
    }
}
