#![doc = include_str!("../README.md")]
#![no_std]
#![deny(unsafe_code)]

/// Declares a view type over a byte buffer with the constructors every view shares;
/// the module then supplies `check_len` and the accessors.
macro_rules! view {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buffer` without checks.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps `buffer`, checking it with `check_len`: after this no accessor panics.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// The underlying buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod arp;
pub mod bond_hash;
pub mod checksum;
pub mod ethernet;
pub mod gso;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod lacp;
pub mod offload;
pub mod tcp;
pub mod udp;
pub mod vlan;

/// A buffer too short for what it claims to hold, or a field with an impossible value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error;

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("truncated or malformed packet")
    }
}

/// Results of packet parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// EtherType values xskit knows; others round-trip as `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherType {
    /// IPv4 (0x0800).
    Ipv4,
    /// ARP (0x0806).
    Arp,
    /// IPv6 (0x86dd).
    Ipv6,
    /// 802.1Q VLAN tag (0x8100).
    Vlan,
    /// 802.1ad service tag (0x88a8).
    QinQ,
    /// Anything else.
    Unknown(u16),
}

// Inlined across crates: a parser's fast path compares the result with one constant, which
// then costs one comparison instead of a call.
impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Unknown(other) => other,
        }
    }
}

/// IP protocol numbers used here.
pub mod ip_protocol {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

#[inline]
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the bytes, a view that passed its check answers every getter without panic.
        #[test]
        fn no_accessor_panics_after_check(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(f) = ethernet::Frame::new_checked(&data[..]) {
                let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.payload());
            }
            if let Ok(t) = vlan::Tag::new_checked(&data[..]) {
                let _ = (t.vid(), t.priority(), t.ethertype(), t.payload());
            }
            if let Ok(p) = ipv4::Packet::new_checked(&data[..]) {
                let _ = (p.options(), p.payload(), p.verify_checksum(), p.pseudo_header(), p.frag_offset());
            }
            if let Ok(p) = ipv6::Packet::new_checked(&data[..]) {
                let _ = (p.payload(), p.pseudo_header(), p.flow_label());
            }
            if let Ok(p) = udp::Packet::new_checked(&data[..]) {
                let _ = (p.payload(), p.verify_checksum(0), p.is_empty());
            }
            if let Ok(p) = tcp::Packet::new_checked(&data[..]) {
                let _ = (p.options(), p.payload(), p.verify_checksum(0), p.flags(), p.seq(), p.ack());
            }
            if let Ok(p) = arp::Packet::new_checked(&data[..]) {
                let _ = (p.operation(), p.sender_mac(), p.sender_ip(), p.target_mac(), p.target_ip());
            }
            if let Ok(p) = icmp::Packet::new_checked(&data[..]) {
                let _ = (p.kind(), p.code(), p.payload(), p.verify_checksum(0), p.echo_seq());
            }
            if let Ok(f) = ethernet::Frame::new_checked(&data[..]) {
                let _ = f.untagged();
            }
            if let Ok(p) = ipv6::Packet::new_checked(&data[..]) {
                let _ = p.upper_layer();
            }
        }
    }
}
