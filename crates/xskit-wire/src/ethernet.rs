//! Ethernet II frames.

use crate::{get_u16, set_u16, Error, EtherType, Result};

mod field {
    use core::ops::{Range, RangeFrom};
    pub(super) const DESTINATION: Range<usize> = 0..6;
    pub(super) const SOURCE: Range<usize> = 6..12;
    pub(super) const ETHERTYPE: Range<usize> = 12..14;
    pub(super) const PAYLOAD: RangeFrom<usize> = 14..;
}

/// Bytes of an Ethernet header (without FCS).
pub const HEADER_LEN: usize = field::PAYLOAD.start;

view! {
    /// A view over an Ethernet frame.
    Frame
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Checks the buffer holds a whole header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        a
    }

    /// Source MAC.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        a
    }

    /// The EtherType (the first one; see [`crate::vlan`] for tags).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE.start).into()
    }
}

/// A frame's payload once its VLAN tags are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Untagged<'a> {
    /// The EtherType of the payload.
    pub ethertype: EtherType,
    /// The payload.
    pub payload: &'a [u8],
    /// VLAN ids, outermost first.
    pub vids: [Option<u16>; 2],
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// Follows up to two VLAN tags (802.1ad outer, 802.1Q inner).
    #[inline]
    pub fn untagged(&self) -> Result<Untagged<'a>> {
        let mut ethertype = self.ethertype();
        let mut rest = self.payload();
        let mut vids = [None; 2];
        for vid in vids.iter_mut() {
            if !matches!(ethertype, EtherType::Vlan | EtherType::QinQ) {
                break;
            }
            let tag = crate::vlan::Tag::new_checked(rest)?;
            *vid = Some(tag.vid());
            ethertype = tag.ethertype();
            rest = tag.payload();
        }
        if matches!(ethertype, EtherType::Vlan | EtherType::QinQ) {
            return Err(Error);
        }
        Ok(Untagged {
            ethertype,
            payload: rest,
            vids,
        })
    }

    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a);
    }

    /// Sets the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a);
    }

    /// Swaps source and destination MACs in place (l2fwd).
    #[inline]
    pub fn swap_addrs(&mut self) {
        let b = self.buffer.as_mut();
        for i in 0..6 {
            b.swap(i, 6 + i);
        }
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        set_u16(self.buffer.as_mut(), field::ETHERTYPE.start, t.into());
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 18] = [
        0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct_and_swap() {
        let mut buf = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_dst_addr([2, 0, 0, 0, 0, 2]);
        f.set_src_addr([2, 0, 0, 0, 0, 1]);
        f.set_ethertype(EtherType::Ipv4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(buf, FRAME);
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.swap_addrs();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(EtherType::from(0x1234), EtherType::Unknown(0x1234));
        assert_eq!(u16::from(EtherType::Unknown(0x1234)), 0x1234);
    }

    #[test]
    fn stacked_tags() {
        let mut buf = [0u8; 26];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_ethertype(EtherType::QinQ);
        let mut outer = crate::vlan::Tag::new_unchecked(f.payload_mut());
        outer.set_tci(0, 100);
        outer.set_ethertype(EtherType::Vlan);
        let mut inner = crate::vlan::Tag::new_unchecked(outer.payload_mut());
        inner.set_tci(0, 200);
        inner.set_ethertype(EtherType::Ipv4);
        let f = Frame::new_checked(&buf[..]).unwrap();
        let u = f.untagged().unwrap();
        assert_eq!(
            (u.ethertype, u.payload.len(), u.vids),
            (EtherType::Ipv4, 4, [Some(100), Some(200)])
        );
        // A third tag is not followed.
        let mut three = buf;
        three[20..22].copy_from_slice(&0x8100u16.to_be_bytes());
        assert_eq!(
            Frame::new_checked(&three[..]).unwrap().untagged(),
            Err(Error)
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(Frame::new_checked(&FRAME[..13]), Err(Error));
    }
}
