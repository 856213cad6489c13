//! ARP over Ethernet for IPv4 (hardware length 6, protocol length 4).

use crate::{get_u16, set_u16, Error, Result};

/// Bytes of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operations.
pub mod operation {
    /// Who has?
    pub const REQUEST: u16 = 1;
    /// Is at.
    pub const REPLY: u16 = 2;
}

view! {
    /// A view over an ARP packet.
    Packet
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks length, hardware type 1, protocol 0x0800, and address lengths 6 and 4.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < PACKET_LEN
            || get_u16(b, 0) != 1
            || get_u16(b, 2) != 0x0800
            || b[4] != 6
            || b[5] != 4
        {
            return Err(Error);
        }
        Ok(())
    }
    /// The operation ([`operation`]).
    pub fn operation(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> [u8; 6] {
        self.buffer.as_ref()[8..14].try_into().unwrap_or_default()
    }
    /// Sender protocol address.
    pub fn sender_ip(&self) -> [u8; 4] {
        self.buffer.as_ref()[14..18].try_into().unwrap_or_default()
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> [u8; 6] {
        self.buffer.as_ref()[18..24].try_into().unwrap_or_default()
    }
    /// Target protocol address.
    pub fn target_ip(&self) -> [u8; 4] {
        self.buffer.as_ref()[24..28].try_into().unwrap_or_default()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes a whole packet.
    pub fn emit(
        &mut self,
        op: u16,
        sender_mac: [u8; 6],
        sender_ip: [u8; 4],
        target_mac: [u8; 6],
        target_ip: [u8; 4],
    ) {
        let b = self.buffer.as_mut();
        b[..8].copy_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 0]);
        set_u16(b, 6, op);
        b[8..14].copy_from_slice(&sender_mac);
        b[14..18].copy_from_slice(&sender_ip);
        b[18..24].copy_from_slice(&target_mac);
        b[24..28].copy_from_slice(&target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_parse() {
        let mut buf = [0u8; 28];
        Packet::new_unchecked(&mut buf[..]).emit(
            operation::REQUEST,
            [2, 0, 0, 0, 0, 1],
            [198, 51, 100, 1],
            [0; 6],
            [198, 51, 100, 2],
        );
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (p.operation(), p.sender_ip(), p.target_ip()),
            (1, [198, 51, 100, 1], [198, 51, 100, 2])
        );
        assert_eq!(p.sender_mac(), [2, 0, 0, 0, 0, 1]);
        let mut bad = buf;
        bad[4] = 8;
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error));
        assert_eq!(Packet::new_checked(&buf[..27]), Err(Error));
    }
}
