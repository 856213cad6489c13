//! UDP datagrams.

use crate::checksum;
use crate::{get_u16, set_u16, Error, Result};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
}

/// Bytes of a UDP header.
pub const HEADER_LEN: usize = 8;

/// Where the checksum field lies in the header.
pub const CHECKSUM_AT: usize = field::CHECKSUM;

view! {
    /// A view over a UDP datagram.
    Packet
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the buffer holds the header and as many bytes as the length field says.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN || len > b.len() {
            return Err(Error);
        }
        Ok(())
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// The length field (header plus payload).
    #[inline]
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// True when the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Verifies the checksum given the pseudo-header sum (0 means "not computed" over IPv4).
    #[inline]
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = usize::from(self.len()).min(self.buffer.as_ref().len());
        checksum::fold(checksum::accumulate(pseudo, &self.buffer.as_ref()[..len])) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload, as far as the length field says (after `check_len`).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(get_u16(b, field::LENGTH)).clamp(HEADER_LEN, b.len());
        &b[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Computes and stores the checksum over header and payload (as the length field says),
    /// given the pseudo-header sum. A result of 0 is sent as 0xffff (RFC 768).
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let len = usize::from(get_u16(b, field::LENGTH)).min(b.len());
        let c = !checksum::fold(checksum::accumulate(pseudo, &b[..len]));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
    /// The payload, writable (after `check_len`, or once the length field is set).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let end = usize::from(get_u16(b, field::LENGTH)).clamp(HEADER_LEN, b.len());
        &mut b[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_verify() {
        let mut buf = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(9);
        p.set_dst_port(7);
        p.set_len(12);
        p.payload_mut().copy_from_slice(b"ping");
        let pseudo = checksum::pseudo_header_v4([198, 51, 100, 1], [198, 51, 100, 2], 17, 12);
        p.fill_checksum(pseudo);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(pseudo));
        assert_eq!(p.payload(), b"ping");
        let mut bad = buf;
        bad[10] ^= 1;
        assert!(!Packet::new_checked(&bad[..])
            .unwrap()
            .verify_checksum(pseudo));
    }

    #[test]
    fn lying_length_is_rejected() {
        let mut buf = [0u8; 12];
        buf[4..6].copy_from_slice(&200u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error));
        buf[4..6].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error));
    }
}
