#![doc = include_str!("../README.md")]
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
mod async_port;
pub mod capture;
mod error;
mod interface;
pub mod mode;
/// The netlink queries behind [`Interface`], for xskit's own crates: not part of the API
/// that semver covers (use [`Interface`]).
#[doc(hidden)]
pub mod netlink;
mod packet;
mod port;
pub mod privileges;
pub mod program;
mod socket;
mod stall;
#[allow(unsafe_code)]
mod sys;
mod umem;

#[cfg(feature = "tokio")]
pub use async_port::AsyncPort;
pub use error::{error_chain, Error, Result};
pub use interface::{Driver, Interface, Promiscuous};
pub use mode::{AttachedMode, Mode, ModeInfo};
pub use packet::{packets, whole_packets_len, Packets};
pub use port::{Port, PortConfig};
pub use program::{is_bpf_fs, kept_link, unpin_link, ProgramObject, RxQueues, XdpProgram};
pub use socket::{
    kernel_supports_tx_metadata, BusyPoll, Socket, SocketConfig, SocketHandle, SocketParts,
    Statistics, Wakeups, DEFAULT_TX_SKB_BUDGET, MAX_RING_SIZE, MIN_RING_SIZE,
};
pub use stall::TX_STALL_AFTER;
pub use sys::rings::{
    CompletionRing, FillRing, Forwarded, Front, MovedOn, Onward, RxRing, TxRing, RX_METADATA_MAX,
};
pub use sys::umem::{
    Frame, Umem, UmemConfig, MAX_FRAME_SIZE, MIN_FRAME_SIZE, TX_METADATA_LEN, XDP_PACKET_HEADROOM,
    XDP_TX_METADATA,
};
pub use xskit_os::SyscallError;

/// The map types [`XdpProgram::take_map`] returns, from the aya that xskit loads programs
/// with: name them through this module (`xskit::maps::Array`) so that your types are the
/// ones xskit built. Only these are re-exported, not the whole of aya.
pub mod maps {
    /// Many entries a system call (BPF_MAP_UPDATE_BATCH, BPF_MAP_LOOKUP_BATCH), which aya
    /// does not wrap: a million-entry map written or read in a few calls, not a million.
    pub use crate::sys::bpf::{lookup_batch, update_batch};
    pub use aya::maps::{
        Array, DevMap, HashMap, LpmTrie, Map, MapData, MapError, PerCpuArray, PerCpuHashMap,
        PerCpuValues, XskMap,
    };
    pub use aya::Pod;
}

/// Raw descriptor type of the rx and tx rings, for [`TxRing::send_raw`].
pub use libc::xdp_desc as RawDesc;
/// Descriptor option: the packet continues in the next descriptor (multi-buffer).
pub const XDP_PKT_CONTD: u32 = libc::XDP_PKT_CONTD;
