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
//! Everything is safe Rust except the `sys` module, which holds every `unsafe` block of this
//! crate; what is not AF_XDP's (system-call errors, memory mappings, poll, clocks, packet
//! sockets) is the `xskit-os` crate's.
//!
//! The rest of xskit builds on this crate: `xskit-pipeline` (vectors, stages, a port trait),
//! `xskit-fwd` (the forwarder and its rules), `xskit-traffic` (probes, generators,
//! baselines) and `xskit-zerocopy` (MSG_ZEROCOPY and io_uring sends on kernel sockets).
//!
//! ```no_run
//! use xskit::{Port, PortConfig};
//! let mut port = Port::open("veth0", 0, &PortConfig::default())?;
//! println!("running in {}", port.mode());
//! let mut frames = Vec::with_capacity(64);
//! let n = port.poll_receive(&mut frames, 64, Some(std::time::Duration::from_secs(1)))?;
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
    pub use xskit_os::{monotonic_ns, process_cpu_ns};
}
/// Rings over plain memory with a fake kernel, for tests and benchmarks of the ring code
/// (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::sys::testing::{
        completion_ring, fill_ring, rx_ring, tx_ring, FakeKernel, RawPair,
    };
}
#[cfg(feature = "tokio")]
#[allow(unsafe_code)]
mod async_port;
pub mod capture;
mod error;
mod interface;
pub mod mode;
pub mod netlink;
mod packet;
mod port;
pub mod program;
mod socket;
#[allow(unsafe_code)]
mod sys;
mod umem;

#[cfg(feature = "tokio")]
pub use async_port::AsyncPort;
pub use error::{error_chain, Error, Result};
pub use interface::{Interface, Promiscuous};
pub use mode::{AttachedMode, Mode, ModeInfo};
pub use packet::{packets, whole_packets_len, Packets};
pub use port::{Port, PortConfig};
pub use program::{ProgramObject, RxQueues, XdpProgram};
pub use socket::{
    kernel_supports_tx_metadata, BusyPoll, Socket, SocketConfig, SocketHandle, SocketParts,
    Statistics, DEFAULT_TX_SKB_BUDGET, MAX_RING_SIZE, MIN_RING_SIZE,
};
pub use sys::rings::{CompletionRing, FillRing, Forwarded, RxRing, TxRing};
pub use sys::umem::{
    Frame, Umem, UmemConfig, MAX_FRAME_SIZE, MIN_FRAME_SIZE, TX_METADATA_LEN, XDP_PACKET_HEADROOM,
    XDP_TX_METADATA,
};
pub use xskit_os::SyscallError;

/// Raw descriptor type of the rx and tx rings, for [`TxRing::send_raw`].
pub use libc::xdp_desc as RawDesc;
/// Descriptor option: the packet continues in the next descriptor (multi-buffer).
pub const XDP_PKT_CONTD: u32 = libc::XDP_PKT_CONTD;
