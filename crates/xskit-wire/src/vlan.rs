//! 802.1Q / 802.1ad tags: the 4 bytes after an Ethernet header whose EtherType is 0x8100 or
//! 0x88a8 (TCI, then the inner EtherType).

use crate::{get_u16, set_u16, Error, EtherType, Result};

/// Bytes of one tag.
pub const HEADER_LEN: usize = 4;

view! {
    /// A view over one VLAN tag and what follows it.
    Tag
}

impl<T: AsRef<[u8]>> Tag<T> {
    /// Checks the buffer holds a whole tag.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }
    /// Priority code point (0..8).
    #[inline]
    pub fn priority(&self) -> u8 {
        (get_u16(self.buffer.as_ref(), 0) >> 13) as u8
    }
    /// VLAN id (0..4096).
    #[inline]
    pub fn vid(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0) & 0x0fff
    }
    /// The EtherType of what follows the tag.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        get_u16(self.buffer.as_ref(), 2).into()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Tag<&'a T> {
    /// The bytes after the tag.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Sets priority and VLAN id (values are masked to their widths).
    #[inline]
    pub fn set_tci(&mut self, priority: u8, vid: u16) {
        set_u16(
            self.buffer.as_mut(),
            0,
            (u16::from(priority & 7) << 13) | (vid & 0x0fff),
        );
    }
    /// Sets the inner EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        set_u16(self.buffer.as_mut(), 2, t.into());
    }
    /// The bytes after the tag, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 6];
        let mut t = Tag::new_unchecked(&mut buf[..]);
        t.set_tci(5, 0x123);
        t.set_ethertype(EtherType::Ipv6);
        let t = Tag::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (t.priority(), t.vid(), t.ethertype()),
            (5, 0x123, EtherType::Ipv6)
        );
        assert_eq!(t.payload().len(), 2);
        assert_eq!(Tag::new_checked(&buf[..3]), Err(Error));
    }
}
