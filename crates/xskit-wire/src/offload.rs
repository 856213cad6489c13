//! Checksums a sender left for its device to finish.
//!
//! A Linux host sending from its own TCP or UDP socket over a device with checksum offload
//! (veth, tap, virtio, most NICs) hands the device a CHECKSUM_PARTIAL packet: the L4
//! checksum field holds only the folded pseudo-header sum, and "start summing at byte S, store
//! at S + O" travels beside the packet in the kernel's skb. Whoever copies the bytes (AF_XDP,
//! an XDP redirect) loses that note, and the receiver drops the packet as corrupt.
//!
//! The field itself says what happened: it equals the folded pseudo-header sum for the packet's
//! addresses, protocol and L4 length. [`L4Checksum::locate`] finds the field,
//! [`L4Checksum::is_partial`] compares it, and [`L4Checksum::complete`] finishes it the way a
//! device does (sum from the L4 header to the end, the field included, store the complement).
//! Completing a field that already held a correct checksum writes the same value again, so the
//! one packet in 65,536 whose correct checksum happens to equal its pseudo-header sum is safe.

use crate::checksum::{accumulate, fold};
use crate::ethernet;
use crate::ip_protocol::{TCP, UDP};
use crate::EtherType;
use crate::{ipv4, ipv6};

/// Where an Ethernet frame's TCP or UDP checksum is, and what a partial one would hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L4Checksum {
    /// Offset of the L4 header from the start of the frame (where summing starts).
    pub start: usize,
    /// Offset of the checksum field from `start` (16 for TCP, 6 for UDP).
    pub offset: usize,
    /// Bytes of L4 header and payload, as the IP header says.
    pub len: usize,
    /// The pseudo-header sum, folded to 16 bits.
    pub pseudo: u16,
    /// True for UDP, where a computed 0 is sent as 0xffff.
    pub udp: bool,
}

/// Whether a TCP or UDP checksum `field` holds the folded pseudo-header sum `pseudo`, as a
/// sender leaves it for its device to finish: equal, or its one's complement (0 and 0xffff
/// are one number; a settled checksum is the sum's complement only when the L4 bytes sum to
/// zero, and finishing it then writes the same value). Both read in one byte order,
/// whichever: the answer does not change when both are swapped.
#[inline]
pub fn holds_pseudo_sum(field: u16, pseudo: u16) -> bool {
    field == pseudo || (field | pseudo == 0xffff && field & pseudo == 0)
}

impl L4Checksum {
    /// Finds the TCP or UDP checksum of an Ethernet frame (VLAN tags followed, IPv6 extension
    /// headers walked). `None` for anything else: other protocols, fragments (a later fragment
    /// has no L4 header, and a first one cannot be summed alone), and frames whose headers are
    /// truncated or whose lengths do not fit the frame.
    ///
    /// `frame` needs to hold only the headers; `frame_len` is the whole frame's length (a
    /// multi-buffer packet continues in further buffers).
    pub fn locate(frame: &[u8], frame_len: usize) -> Option<L4Checksum> {
        let eth = ethernet::Frame::new_checked(frame).ok()?;
        let un = eth.untagged().ok()?;
        let l3 = frame.len() - un.payload.len();
        let (l4, len, proto, pseudo) = match un.ethertype {
            EtherType::Ipv4 => {
                let ip = ipv4::Packet::new_unchecked(un.payload);
                if un.payload.len() < 20 || ip.version() != 4 || ip.header_len() < 20 {
                    return None;
                }
                let total = usize::from(ip.total_len());
                if ip.more_frags() || ip.frag_offset() != 0 || total < ip.header_len() {
                    return None;
                }
                if l3 + total > frame_len || un.payload.len() < ip.header_len() {
                    return None;
                }
                let len = total - ip.header_len();
                let proto = ip.protocol();
                let pseudo = crate::checksum::pseudo_header_v4(
                    ip.src_addr(),
                    ip.dst_addr(),
                    proto,
                    len as u16,
                );
                (l3 + ip.header_len(), len, proto, pseudo)
            }
            EtherType::Ipv6 => {
                let ip = ipv6::Packet::new_unchecked(un.payload);
                if un.payload.len() < 40 || ip.version() != 6 {
                    return None;
                }
                let total = 40 + usize::from(ip.payload_len());
                if l3 + total > frame_len {
                    return None;
                }
                let held = un.payload.len().min(total);
                let (proto, l4_in_ip) = walk_v6(&un.payload[..held])?;
                let l4 = l3 + l4_in_ip;
                let len = l3 + total - l4;
                let pseudo = crate::checksum::pseudo_header_v6(
                    ip.src_addr(),
                    ip.dst_addr(),
                    proto,
                    len as u32,
                );
                (l4, len, proto, pseudo)
            }
            _ => return None,
        };
        let (offset, udp) = match proto {
            TCP if len >= crate::tcp::HEADER_LEN => (crate::tcp::CHECKSUM_AT, false),
            UDP if len >= crate::udp::HEADER_LEN => (crate::udp::CHECKSUM_AT, true),
            _ => return None,
        };
        if l4 + offset + 2 > frame.len() {
            return None;
        }
        Some(L4Checksum {
            start: l4,
            offset,
            len,
            pseudo: fold(pseudo),
            udp,
        })
    }

    /// The checksum field's value in `frame` (which holds at least the headers).
    #[inline]
    pub fn field(&self, frame: &[u8]) -> u16 {
        let at = self.start + self.offset;
        u16::from_be_bytes([frame[at], frame[at + 1]])
    }

    /// True when the field holds just the pseudo-header sum: the sender left the checksum for
    /// its device to finish ([`holds_pseudo_sum`]).
    #[inline]
    pub fn is_partial(&self, frame: &[u8]) -> bool {
        holds_pseudo_sum(self.field(frame), self.pseudo)
    }

    /// Writes the correct checksum of a packet held whole in `frame`: the sum of the
    /// pseudo-header and the L4 bytes, the field counted as zero. On a partial field this is
    /// what the sender's device would have written; on a correct one it is the same value.
    pub fn complete(&self, frame: &mut [u8]) {
        let end = (self.start + self.len).min(frame.len());
        let sum = accumulate(0, &frame[self.start..end]);
        self.store(frame, sum);
    }

    /// [`L4Checksum::complete`] for a packet held in several buffers: `sum` is the running
    /// sum over all its L4 bytes with the field as it is ([`Sum`]); `frame` holds the field.
    pub fn store(&self, frame: &mut [u8], sum: u32) {
        // Take the field out of the sum (one's-complement subtraction adds its complement)
        // and put the pseudo-header in.
        let without_field = u64::from(sum) + u64::from(!self.field(frame)) + u64::from(self.pseudo);
        let mut v = !fold(((without_field & 0xffff_ffff) + (without_field >> 32)) as u32);
        if self.udp && v == 0 {
            v = 0xffff;
        }
        let at = self.start + self.offset;
        frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
}

/// Walks an IPv6 header's extension chain within `ip` (which may hold just the headers):
/// the upper-layer protocol and its offset. `None` for a chain with a Fragment header (a first
/// fragment's L4 checksum covers bytes in later fragments), one cut short, or one longer than
/// [`ipv6::MAX_EXT_HEADERS`].
fn walk_v6(ip: &[u8]) -> Option<(u8, usize)> {
    use ipv6::ext;
    let mut next = ip[6];
    let mut at = ipv6::HEADER_LEN;
    for _ in 0..=ipv6::MAX_EXT_HEADERS {
        let len = match next {
            ext::HOP_BY_HOP | ext::ROUTING | ext::DEST_OPTS => {
                (usize::from(*ip.get(at + 1)?) + 1) * 8
            }
            ext::AUTH => (usize::from(*ip.get(at + 1)?) + 2) * 4,
            ext::FRAGMENT => return None,
            // An extension header's length may run past the packet: then there is no L4.
            proto => return (at <= ip.len()).then_some((proto, at)),
        };
        next = *ip.get(at)?;
        at += len;
    }
    None
}

/// A one's-complement sum over bytes that arrive in pieces of any length (the buffers of a
/// multi-buffer packet), keeping track of odd boundaries.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sum {
    sum: u32,
    odd: bool,
}

impl Sum {
    /// Adds the next piece.
    pub fn add(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.odd {
            // This piece's first byte is the low half of a 16-bit word begun before.
            self.sum = fold_add(self.sum, u32::from(data[0]));
            let s = accumulate(0, &data[1..]);
            self.sum = fold_add(self.sum, s);
            self.odd = (data.len() - 1) % 2 == 1;
        } else {
            let s = accumulate(0, data);
            self.sum = fold_add(self.sum, s);
            self.odd = data.len() % 2 == 1;
        }
    }

    /// The running sum, for [`L4Checksum::store`].
    pub fn value(&self) -> u32 {
        self.sum
    }
}

fn fold_add(a: u32, b: u32) -> u32 {
    let s = u64::from(a) + u64::from(b);
    ((s & 0xffff_ffff) + (s >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{tcp, udp};

    /// An Ethernet + IPv4 + UDP frame with `payload`, its checksum left partial.
    fn udp4(payload: &[u8]) -> [u8; 128] {
        let mut f = [0u8; 128];
        let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
        eth.set_ethertype(EtherType::Ipv4);
        let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
        ip.init(
            (20 + 8 + payload.len()) as u16,
            UDP,
            [198, 51, 100, 1],
            [198, 51, 100, 3],
        );
        ip.fill_checksum();
        let pseudo = ip.pseudo_header();
        let mut u = udp::Packet::new_unchecked(ip.payload_mut());
        u.set_src_port(1000);
        u.set_dst_port(53);
        u.set_len((8 + payload.len()) as u16);
        u.payload_mut()[..payload.len()].copy_from_slice(payload);
        u.set_checksum(fold(pseudo));
        f
    }

    #[test]
    fn a_partial_udp_checksum_is_found_and_completed() {
        let mut f = udp4(b"hello, world");
        let len = 14 + 20 + 8 + 12;
        let c = L4Checksum::locate(&f, len).unwrap();
        assert_eq!((c.start, c.offset, c.len, c.udp), (34, 6, 20, true));
        assert!(c.is_partial(&f));
        c.complete(&mut f);
        let ip = ipv4::Packet::new_checked(&f[14..len]).unwrap();
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(u.verify_checksum(ip.pseudo_header()));
        assert!(!c.is_partial(&f));
        // Completing a correct checksum writes the same value.
        let before = f;
        c.complete(&mut f);
        assert_eq!(before, f);
    }

    #[test]
    fn sums_in_pieces_equal_the_whole() {
        let data: [u8; 37] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        let whole = fold(accumulate(0, &data));
        for cut1 in 0..data.len() {
            for cut2 in cut1..data.len() {
                let mut s = Sum::default();
                s.add(&data[..cut1]);
                s.add(&data[cut1..cut2]);
                s.add(&data[cut2..]);
                assert_eq!(fold(s.value()), whole, "cuts {cut1} {cut2}");
            }
        }
    }

    #[test]
    fn tcp_over_ipv6_with_a_destination_option() {
        let mut f = [0u8; 14 + 40 + 8 + 20 + 4];
        let l4len = 20 + 4;
        {
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_ethertype(EtherType::Ipv6);
        }
        let (src, dst) = ([0x20; 16], [0x30; 16]);
        {
            let mut ip = ipv6::Packet::new_unchecked(&mut f[14..]);
            ip.init(8 + l4len as u16, 60, src, dst, 0);
        }
        f[54] = TCP; // the option header's next header
        f[55] = 0;
        {
            let mut t = tcp::Packet::new_unchecked(&mut f[62..]);
            t.set_header_len(20);
            t.set_src_port(80);
        }
        let pseudo = fold(crate::checksum::pseudo_header_v6(
            src,
            dst,
            TCP,
            l4len as u32,
        ));
        f[62 + 16..62 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let c = L4Checksum::locate(&f, f.len()).unwrap();
        assert_eq!((c.start, c.offset, c.len), (62, 16, l4len));
        assert!(c.is_partial(&f));
        c.complete(&mut f);
        let t = tcp::Packet::new_checked(&f[62..]).unwrap();
        assert!(t.verify_checksum(crate::checksum::pseudo_header_v6(
            src,
            dst,
            TCP,
            l4len as u32
        )));
    }

    #[test]
    fn fragments_and_short_frames_are_left_alone() {
        let f = udp4(b"x");
        let len = 14 + 20 + 8 + 1;
        for cut in 0..len {
            // A frame shorter than its IP header claims is not located (and never panics).
            assert!(L4Checksum::locate(&f[..cut], cut).is_none(), "cut {cut}");
        }
        let mut frag = f;
        frag[14 + 6] = 0x20; // more fragments
        assert!(L4Checksum::locate(&frag, len).is_none());
    }

    /// An IPv6 extension header whose length runs past the packet leaves no L4 header to
    /// find (it once gave an offset past the packet, and a length that underflowed).
    #[test]
    fn an_extension_header_running_past_the_packet_has_no_checksum() {
        let mut f = [0u8; 14 + 40 + 8 + 8];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&16u16.to_be_bytes());
        f[20] = ipv6::ext::HOP_BY_HOP;
        // Hop-by-hop: next UDP, 8 * (4 + 1) bytes long, in a packet with 16 bytes after
        // the IPv6 header.
        f[54] = crate::ip_protocol::UDP;
        f[55] = 4;
        assert_eq!(L4Checksum::locate(&f, f.len()), None);
    }
}
