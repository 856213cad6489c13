#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

mod error;
mod live;
mod packet;
pub mod probe;
pub mod sender;

pub use error::{Error, Result};
pub use live::{LiveFrames, XdpCounter};

/// AF_PACKET: the baselines xskit is measured against (a TPACKET_V3 receive ring and a
/// `sendmmsg` transmitter), and a socket for a control protocol's few frames.
pub mod baseline {
    pub use xskit_os::packet::{PacketProtocolSocket, PacketRxRing, PacketTx};
}
