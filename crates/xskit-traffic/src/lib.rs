//! # xskit-traffic
//!
//! Traffic for xskit's tests, demo and benchmarks, and for yours:
//! - [`probe`]: numbered, timestamped UDP probes, their templates (flows, VLAN tags, IPv6) and
//!   the checks a receiver makes (loss, reordering, damage, latency);
//! - [`LiveFrames`]: the kernel's live-frames generator, several Mpps from one core;
//! - [`XdpCounter`]: the XDP_DROP ceiling receive benchmarks are measured against, and the
//!   XDP_TX one for l2fwd;
//! - [`baseline`]: AF_PACKET with a TPACKET_V3 ring and `sendmmsg`, written as a tuned
//!   AF_PACKET application would, to measure xskit against.
#![deny(unsafe_code)]

mod error;
mod live;
mod packet;
pub mod probe;

pub use error::{Error, Result};
pub use live::{LiveFrames, XdpCounter};

/// AF_PACKET: the baselines xskit is measured against (a TPACKET_V3 receive ring and a
/// `sendmmsg` transmitter), and a socket for a control protocol's few frames.
pub mod baseline {
    pub use xskit_os::packet::{PacketProtocolSocket, PacketRxRing, PacketTx};
}
