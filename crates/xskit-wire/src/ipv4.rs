//! IPv4 packets, options included.

use crate::checksum;
use crate::{get_u16, set_u16, Error, Result};

mod field {
    pub(super) const VER_IHL: usize = 0;
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const LENGTH: usize = 2;
    pub(super) const IDENT: usize = 4;
    pub(super) const FLG_OFF: usize = 6;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: usize = 10;
    pub(super) const SRC_ADDR: core::ops::Range<usize> = 12..16;
    pub(super) const DST_ADDR: core::ops::Range<usize> = 16..20;
}

/// Bytes of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

view! {
    /// A view over an IPv4 packet.
    Packet
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks version 4, a header length of at least 20 that fits, and a total length that
    /// covers the header and fits in the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || self.version() != 4 {
            return Err(Error);
        }
        let hl = self.header_len();
        let total = usize::from(self.total_len());
        if hl < HEADER_LEN || hl > b.len() || total < hl || total > b.len() {
            return Err(Error);
        }
        Ok(())
    }
    /// The version field.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN byte.
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// Total length (header plus payload).
    #[inline]
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }
    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (get_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) * 8
    }
    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// The payload's protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// The header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        a
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        a
    }
    /// The options bytes (after `check_len`).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.header_len().clamp(HEADER_LEN, b.len())]
    }
    /// True if the header checksum is right (after `check_len`).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        checksum::fold(checksum::accumulate(
            0,
            &b[..self.header_len().min(b.len())],
        )) == 0xffff
    }
    /// The pseudo-header sum for the payload's checksum.
    #[inline]
    pub fn pseudo_header(&self) -> u32 {
        let payload_len = usize::from(self.total_len()).saturating_sub(self.header_len());
        checksum::pseudo_header_v4(
            self.src_addr(),
            self.dst_addr(),
            self.protocol(),
            payload_len as u16,
        )
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload, as far as the total length says (after `check_len`).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let start = (usize::from(b[field::VER_IHL] & 0x0f) * 4).min(b.len());
        let end = usize::from(get_u16(b, field::LENGTH)).clamp(start, b.len());
        &b[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes a fresh option-less header: version 4, IHL 5, DF set, TTL 64, the given total
    /// length, protocol and addresses, and a correct checksum.
    #[inline]
    pub fn init(&mut self, total_len: u16, protocol: u8, src: [u8; 4], dst: [u8; 4]) {
        let b = self.buffer.as_mut();
        b[..HEADER_LEN].copy_from_slice(&[
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        set_u16(b, field::LENGTH, total_len);
        b[field::PROTOCOL] = protocol;
        b[field::SRC_ADDR].copy_from_slice(&src);
        b[field::DST_ADDR].copy_from_slice(&dst);
        self.fill_checksum();
    }
    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Sets the TTL.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a);
    }
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a);
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Recomputes the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self
            .header_len()
            .clamp(HEADER_LEN, self.buffer.as_ref().len());
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
    /// The payload, writable (after `check_len`, or once the header is written).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let start = (usize::from(b[field::VER_IHL] & 0x0f) * 4).min(b.len());
        let end = usize::from(get_u16(b, field::LENGTH)).clamp(start, b.len());
        &mut b[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real header (from a capture) with a correct checksum.
    static HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn deconstruct_known_header() {
        let mut buf = [0u8; 0x73];
        buf[..20].copy_from_slice(&HEADER);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.protocol(), 17);
        assert!(p.dont_frag());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.src_addr(), [192, 168, 0, 1]);
        assert_eq!(p.payload().len(), 0x73 - 20);
    }

    #[test]
    fn init_writes_valid_header() {
        let mut buf = [0u8; 40];
        Packet::new_unchecked(&mut buf[..]).init(40, 17, [198, 51, 100, 1], [198, 51, 100, 2]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 20);
    }

    #[test]
    fn options_are_honoured() {
        let mut buf = [0u8; 32];
        Packet::new_unchecked(&mut buf[..]).init(32, 6, [1, 2, 3, 4], [5, 6, 7, 8]);
        buf[0] = 0x46; // IHL 6: 4 bytes of options
        buf[20..24].copy_from_slice(&[1, 1, 1, 0]);
        Packet::new_unchecked(&mut buf[..]).fill_checksum();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload().len(), 8);
        assert!(p.verify_checksum());
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let mut buf = [0u8; 40];
        Packet::new_unchecked(&mut buf[..]).init(40, 17, [0; 4], [0; 4]);
        let mut bad = buf;
        bad[0] = 0x65; // version 6
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error));
        let mut bad = buf;
        bad[0] = 0x44; // IHL below 5
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error));
        let mut bad = buf;
        bad[2..4].copy_from_slice(&400u16.to_be_bytes()); // longer than the buffer
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error));
        assert_eq!(Packet::new_checked(&buf[..19]), Err(Error));
    }
}
