//! ICMP (IPv4) and ICMPv6 messages: type, code, checksum, and the echo fields.

use crate::checksum;
use crate::{get_u16, set_u16, Error, Result};

/// Bytes of an ICMP header (type, code, checksum, 4 bytes of rest).
pub const HEADER_LEN: usize = 8;

/// Message types used here.
pub mod kind {
    /// ICMP echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// ICMP destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// ICMP echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// ICMPv6 echo request.
    pub const V6_ECHO_REQUEST: u8 = 128;
    /// ICMPv6 echo reply.
    pub const V6_ECHO_REPLY: u8 = 129;
    /// ICMPv6 neighbour solicitation.
    pub const V6_NEIGHBOR_SOLICIT: u8 = 135;
    /// ICMPv6 neighbour advertisement.
    pub const V6_NEIGHBOR_ADVERT: u8 = 136;
}

view! {
    /// A view over an ICMP or ICMPv6 message (the same layout; only the checksum differs: ICMPv6
    /// covers an IPv6 pseudo-header, ICMP none).
    Packet
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the buffer holds a whole header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }
    /// Message type ([`kind`]).
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Message code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }
    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }
    /// Verifies the checksum; `pseudo` is 0 for ICMP and the IPv6 pseudo-header sum for ICMPv6.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::fold(checksum::accumulate(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the 8-byte header.
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets type and code.
    pub fn set_kind(&mut self, kind: u8, code: u8) {
        let b = self.buffer.as_mut();
        b[0] = kind;
        b[1] = code;
    }
    /// Sets the echo identifier and sequence number.
    pub fn set_echo(&mut self, ident: u16, seq: u16) {
        set_u16(self.buffer.as_mut(), 4, ident);
        set_u16(self.buffer.as_mut(), 6, seq);
    }
    /// Stores a checksum (after an incremental update, RFC 1624).
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }
    /// The bytes after the 8-byte header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let at = HEADER_LEN.min(b.len());
        &mut b[at..]
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        set_u16(self.buffer.as_mut(), 2, 0);
        let c = !checksum::fold(checksum::accumulate(pseudo, self.buffer.as_ref()));
        set_u16(self.buffer.as_mut(), 2, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_to_reply_keeps_a_valid_checksum() {
        let mut buf = [0u8; 16];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_kind(kind::ECHO_REQUEST, 0);
        p.set_echo(0x1234, 1);
        p.fill_checksum(0);
        assert!(Packet::new_checked(&buf[..]).unwrap().verify_checksum(0));
        // Turning a request into a reply: incremental update of the type word (RFC 1624).
        let old = get_u16(&buf, 0);
        buf[0] = kind::ECHO_REPLY;
        let c = checksum::update(get_u16(&buf, 2), old, get_u16(&buf, 0));
        set_u16(&mut buf, 2, c);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(0));
        assert_eq!(
            (p.kind(), p.echo_ident(), p.echo_seq()),
            (kind::ECHO_REPLY, 0x1234, 1)
        );
        assert_eq!(Packet::new_checked(&buf[..7]), Err(Error));
    }
}
