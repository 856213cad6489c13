//! # xskit
//!
//! Zero-copy packet I/O on Linux AF_XDP.
//!
//! - [`Umem`]: memory shared with the kernel, cut into [`Frame`]s that are unique handles.
//! - [`FillRing`], [`CompletionRing`], [`RxRing`], [`TxRing`]: the four single-producer /
//!   single-consumer rings, driven in batches with cached indices (the protocol of libxdp's
//!   `xsk.h` and the kernel's `Documentation/networking/af_xdp.rst`).
//! - [`Socket`]: an AF_XDP socket bound to one (interface, queue), copy or zero-copy, with
//!   shared UMEM, multi-buffer, busy polling and the six kernel statistics.
//! - [`XdpProgram`]: the program that steers each queue's packets to its socket, attached
//!   through a bpf_link so it never outlives the process.
//! - [`Port`]: all of the above for one queue, with a frame pool.
//!
//! Everything is safe Rust except the `sys` module, which holds every `unsafe` block.
//!
//! ```no_run
//! use xskit::{Port, PortConfig};
//! let mut port = Port::open("veth0", 0, &PortConfig::default())?;
//! println!("running in {}", port.mode());
//! let mut frames = Vec::with_capacity(64);
//! let n = port.poll_receive(&mut frames, 64, 1000)?;
//! for frame in &frames {
//!     println!("{} bytes", port.umem().data(frame).len());
//! }
//! port.recycle(&mut frames);
//! # let _ = n;
//! # Ok::<(), xskit::Error>(())
//! ```
#![deny(unsafe_code)]

/// Clocks for measurements.
pub mod clock {
    /// CLOCK_MONOTONIC in nanoseconds (the clock probes are stamped with).
    pub fn monotonic_ns() -> u64 {
        crate::sys::monotonic_ns()
    }
    /// CPU time (user + system) of this whole process, in nanoseconds.
    pub fn process_cpu_ns() -> u64 {
        crate::sys::process_cpu_ns()
    }
}
/// Baselines xskit is measured against: AF_PACKET with a TPACKET_V3 receive ring and a
/// `sendmmsg` transmitter, written as a tuned AF_PACKET application would.
pub mod baseline {
    pub use crate::sys::afpacket::{PacketRxRing, PacketTx};
}
/// Rings over plain memory with a fake kernel, for tests and benchmarks of the ring code.
pub mod testing {
    pub use crate::sys::testing::{
        completion_ring, fill_ring, rx_ring, tx_ring, FakeKernel, RawPair,
    };
}
mod error;
pub mod forward;
mod interface;
pub mod netlink;
pub mod pipeline;
mod port;
pub mod probe;
mod program;
pub mod rules;
mod socket;
mod sync;
#[allow(unsafe_code)]
mod sys;
pub mod zerocopy;

pub use error::{Error, Result};
pub use interface::Interface;
pub use port::{Mode, ModeInfo, Port, PortConfig};
pub use program::{
    Action, AttachMode, AttachedMode, LiveFrames, Rule, RuleCounter, XdpDropCounter, XdpProgram,
    MAX_RULES,
};
pub use socket::{
    kernel_supports_tx_metadata, BindMode, BusyPoll, Socket, SocketConfig, SocketHandle,
    SocketParts, Statistics, DEFAULT_TX_SKB_BUDGET, MAX_RING_SIZE, MIN_RING_SIZE,
};
pub use sys::rings::{CompletionRing, FillRing, RxRing, TxRing};
pub use sys::umem::{
    Frame, Umem, UmemConfig, MAX_FRAME_SIZE, MIN_FRAME_SIZE, TX_METADATA_LEN, XDP_PACKET_HEADROOM,
    XDP_TX_METADATA,
};
pub use sys::SyscallError;

/// Raw descriptor type of the rx and tx rings, for [`TxRing::send_raw`].
pub use libc::xdp_desc as RawDesc;
/// Descriptor option: the packet continues in the next descriptor (multi-buffer).
pub const XDP_PKT_CONTD: u32 = libc::XDP_PKT_CONTD;
