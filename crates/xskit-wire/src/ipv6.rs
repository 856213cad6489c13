//! IPv6 packets (the fixed header; extension headers are walked by the caller through
//! `next_header`).

use crate::checksum;
use crate::{get_u16, set_u16, Error, Result};

mod field {
    pub(super) const VER_TC_FLOW: core::ops::Range<usize> = 0..4;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: core::ops::Range<usize> = 8..24;
    pub(super) const DST_ADDR: core::ops::Range<usize> = 24..40;
}

/// Bytes of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

view! {
    /// A view over an IPv6 packet.
    Packet
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks version 6 and a payload length that fits in the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || self.version() != 6 {
            return Err(Error);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > b.len() {
            return Err(Error);
        }
        Ok(())
    }
    /// The version field.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// The flow label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x000f_ffff
    }
    /// The payload length field.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// The next header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// The hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        a
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        a
    }
    /// The pseudo-header sum for an upper-layer checksum directly after this header.
    #[inline]
    pub fn pseudo_header(&self) -> u32 {
        checksum::pseudo_header_v6(
            self.src_addr(),
            self.dst_addr(),
            self.next_header(),
            u32::from(self.payload_len()),
        )
    }
}

/// IPv6 extension headers that [`Packet::upper_layer`] walks through.
pub mod ext {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing.
    pub const ROUTING: u8 = 43;
    /// Fragment.
    pub const FRAGMENT: u8 = 44;
    /// Authentication header.
    pub const AUTH: u8 = 51;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
}

/// At most this many extension headers are walked before a packet counts as malformed.
pub const MAX_EXT_HEADERS: usize = 8;

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The upper-layer protocol and its bytes, after walking the extension headers (hop-by-hop,
    /// routing, fragment, destination options, AH). Errors on truncated or too many headers.
    #[inline]
    pub fn upper_layer(&self) -> Result<(u8, &'a [u8])> {
        self.upper_layer_fragment()
            .map(|(proto, rest, _)| (proto, rest))
    }

    /// As [`Packet::upper_layer`], with the fragment offset (in 8-byte units) of a fragment
    /// header on the way, 0 if none: a packet with a non-zero offset carries the middle of
    /// a datagram, and its "upper layer" bytes are payload, not headers.
    #[inline]
    pub fn upper_layer_fragment(&self) -> Result<(u8, &'a [u8], u16)> {
        let mut next = self.next_header();
        let mut rest = self.payload();
        let mut offset = 0;
        for _ in 0..=MAX_EXT_HEADERS {
            let len = match next {
                ext::HOP_BY_HOP | ext::ROUTING | ext::DEST_OPTS => {
                    usize::from(*rest.get(1).ok_or(Error)?) * 8 + 8
                }
                ext::FRAGMENT => 8,
                ext::AUTH => usize::from(*rest.get(1).ok_or(Error)?) * 4 + 8,
                proto => return Ok((proto, rest, offset)),
            };
            if rest.len() < len {
                return Err(Error);
            }
            if next == ext::FRAGMENT {
                offset = get_u16(rest, 2) >> 3;
            }
            next = rest[0];
            rest = &rest[len..];
        }
        Err(Error)
    }

    /// The payload, as far as the payload length says (after `check_len`).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(get_u16(b, field::LENGTH))).min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes a fresh header: version 6, no traffic class, `flow_label`, hop limit 64.
    #[inline]
    pub fn init(
        &mut self,
        payload_len: u16,
        next_header: u8,
        src: [u8; 16],
        dst: [u8; 16],
        flow_label: u32,
    ) {
        let b = self.buffer.as_mut();
        let vtf = (6u32 << 28) | (flow_label & 0x000f_ffff);
        b[field::VER_TC_FLOW].copy_from_slice(&vtf.to_be_bytes());
        set_u16(b, field::LENGTH, payload_len);
        b[field::NXT_HDR] = next_header;
        b[field::HOP_LIMIT] = 64;
        b[field::SRC_ADDR].copy_from_slice(&src);
        b[field::DST_ADDR].copy_from_slice(&dst);
    }
    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a);
    }
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a);
    }
    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// The payload, writable (after `check_len`, or once the header is written).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let end = (HEADER_LEN + usize::from(get_u16(b, field::LENGTH))).min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_offsets_are_reported() {
        // A fragment header (offset 185 x 8 bytes, more fragments), then UDP bytes.
        let mut b = [0u8; 40 + 8 + 8];
        Packet::new_unchecked(&mut b[..]).init(16, ext::FRAGMENT, [0; 16], [0; 16], 0);
        b[40] = 17;
        b[42..44].copy_from_slice(&((185u16 << 3) | 1).to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        let (proto, rest, offset) = p.upper_layer_fragment().unwrap();
        assert_eq!((proto, rest.len(), offset), (17, 8, 185));
        b[42..44].copy_from_slice(&1u16.to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer_fragment().unwrap().2, 0, "the first fragment");
    }

    #[test]
    fn init_and_parse() {
        let mut buf = [0u8; 48];
        let src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut dst = src;
        dst[15] = 2;
        Packet::new_unchecked(&mut buf[..]).init(8, 17, src, dst, 0xabcde);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!((p.version(), p.next_header(), p.hop_limit()), (6, 17, 64));
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.dst_addr(), dst);
    }

    #[test]
    fn extension_headers_are_walked() {
        let mut buf = [0u8; 40 + 8 + 8 + 8];
        // hop-by-hop (8 bytes) -> fragment (8 bytes) -> UDP
        Packet::new_unchecked(&mut buf[..]).init(24, ext::HOP_BY_HOP, [0; 16], [0; 16], 0);
        buf[40] = ext::FRAGMENT;
        buf[41] = 0;
        buf[48] = 17;
        let p = Packet::new_checked(&buf[..]).unwrap();
        let (proto, upper) = p.upper_layer().unwrap();
        assert_eq!((proto, upper.len()), (17, 8));
        // A hop-by-hop header claiming more than there is.
        buf[41] = 9;
        assert_eq!(
            Packet::new_checked(&buf[..]).unwrap().upper_layer(),
            Err(Error)
        );
    }

    #[test]
    fn lying_payload_length_is_rejected() {
        let mut buf = [0u8; 48];
        Packet::new_unchecked(&mut buf[..]).init(9, 17, [0; 16], [0; 16], 0);
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error));
        assert_eq!(Packet::new_checked(&buf[..39]), Err(Error));
    }
}
