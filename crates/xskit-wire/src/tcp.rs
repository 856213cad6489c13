//! TCP segments, options included.

use crate::checksum;
use crate::{get_u16, set_u16, Error, Result};

/// Bytes of a TCP header without options.
pub const HEADER_LEN: usize = 20;

/// Where the checksum field lies in the header.
pub const CHECKSUM_AT: usize = 16;

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE (ECN echo).
    pub const ECE: u8 = 0x40;
    /// CWR (congestion window reduced).
    pub const CWR: u8 = 0x80;
}

/// Where the flag byte is: the bytes a header must hold for its flags to be read.
pub const FLAGS_AT: usize = 13;

view! {
    /// A view over a TCP segment.
    Packet
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks a data offset of at least 5 words that fits in the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN || hl > b.len() {
            return Err(Error);
        }
        Ok(())
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }
    /// Sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 4)
    }
    /// Acknowledgement number.
    #[inline]
    pub fn ack(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 8)
    }
    /// Header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }
    /// The flag byte ([`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[13]
    }
    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 14)
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), CHECKSUM_AT)
    }
    /// Options bytes (after `check_len`).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.header_len().clamp(HEADER_LEN, b.len())]
    }
    /// Verifies the checksum over the whole buffer given the pseudo-header sum.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::fold(checksum::accumulate(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload (after `check_len`).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[(usize::from(b[12] >> 4) * 4).clamp(HEADER_LEN, b.len())..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 0, v);
    }
    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }
    /// Sets the sequence number.
    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the acknowledgement number.
    #[inline]
    pub fn set_ack(&mut self, v: u32) {
        self.buffer.as_mut()[8..12].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the header length in bytes (a multiple of 4, 20..60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[12] = ((len / 4) as u8) << 4;
    }
    /// Sets the flags.
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[13] = f;
    }
    /// Sets the window.
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 14, v);
    }
    /// Computes and stores the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        set_u16(self.buffer.as_mut(), CHECKSUM_AT, 0);
        let c = !checksum::fold(checksum::accumulate(pseudo, self.buffer.as_ref()));
        set_u16(self.buffer.as_mut(), CHECKSUM_AT, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_parse_and_checksum() {
        let mut buf = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(40000);
        p.set_dst_port(80);
        p.set_seq(7);
        p.set_header_len(24);
        p.set_flags(flags::SYN);
        p.set_window(65535);
        let pseudo = checksum::pseudo_header_v4([198, 51, 100, 1], [198, 51, 100, 2], 6, 28);
        p.fill_checksum(pseudo);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.seq(), p.flags()),
            (40000, 80, 7, flags::SYN)
        );
        assert_eq!((p.options().len(), p.payload().len()), (4, 4));
        assert!(p.verify_checksum(pseudo));
    }

    #[test]
    fn bad_data_offsets_are_rejected() {
        let mut buf = [0u8; 24];
        buf[12] = 4 << 4;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error));
        buf[12] = 15 << 4;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error));
    }
}
