//! TCP segmentation in software, as the kernel's GSO does it.
//!
//! A host's TCP stack with TSO hands its device one "super-packet" of up to 64 KiB with one set
//! of headers; the device cuts it into segments that fit the link. Generic XDP (and a
//! multi-buffer native program) sees such packets whole. A forwarder that received one must
//! cut it the same way before it leaves by a link with a smaller MTU.
//!
//! [`TcpSegmenter`] does that for TCP over IPv4 or IPv6 (VLAN tags and IPv6 extension headers
//! kept): each segment carries the headers, `seq` advanced by the bytes before it, FIN and PSH
//! only on the last, CWR only on the first, the IPv4 identification advanced by one per segment
//! and its header checksum recomputed, and the TCP checksum field set to the segment's
//! pseudo-header sum: a partial checksum, for the caller to finish with
//! [`crate::offload::L4Checksum`] (in software or by asking the device).
//!
//! The original segment size is not in the packet. Segments are made as large as the link
//! allows (`max_ip_len`, the egress MTU), which is what the sender's own stack would have
//! chosen for that MTU.

use crate::checksum::{fold, pseudo_header_v4, pseudo_header_v6};
use crate::ethernet;
use crate::ip_protocol::TCP;
use crate::offload::L4Checksum;
use crate::{get_u16, ipv4, set_u16, EtherType};

const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// How to cut one TCP super-packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegmenter {
    /// Offset of the IP header.
    l3: usize,
    /// Offset of the TCP header (after IPv6 extension headers).
    l4: usize,
    /// Bytes of all headers, Ethernet to TCP options.
    headers: usize,
    /// Bytes of TCP payload in the packet.
    payload: usize,
    /// Payload bytes per segment.
    mss: usize,
    v4: bool,
}

impl TcpSegmenter {
    /// Plans the segments of `packet` (a whole Ethernet frame) for a link whose IP packets may
    /// be at most `max_ip_len` bytes. `None` when the packet is not TCP over IPv4/IPv6 with a
    /// complete, consistent header chain, or when the headers alone do not fit.
    pub fn new(packet: &[u8], max_ip_len: usize) -> Option<TcpSegmenter> {
        let c = L4Checksum::locate(packet, packet.len())?;
        if c.udp {
            return None;
        }
        let eth = ethernet::Frame::new_checked(packet).ok()?;
        let un = eth.untagged().ok()?;
        let l3 = packet.len() - un.payload.len();
        let v4 = match un.ethertype {
            EtherType::Ipv4 => true,
            EtherType::Ipv6 => false,
            _ => return None,
        };
        let tcp_len = usize::from(packet.get(c.start + 12)? >> 4) * 4;
        if tcp_len < 20 || tcp_len > c.len {
            return None;
        }
        let headers = c.start + tcp_len;
        let payload = c.len - tcp_len;
        let mss = max_ip_len.checked_sub(headers - l3)?;
        if mss == 0 {
            return None;
        }
        Some(TcpSegmenter {
            l3,
            l4: c.start,
            headers,
            payload,
            mss,
            v4,
        })
    }

    /// How many segments.
    pub fn count(&self) -> usize {
        self.payload.div_ceil(self.mss).max(1)
    }

    /// The bytes of the longest segment (the first), Ethernet header included.
    pub fn max_segment_len(&self) -> usize {
        self.headers + self.mss.min(self.payload)
    }

    /// Writes segment `k` (from 0) of `packet` into `out`, which must hold
    /// [`TcpSegmenter::max_segment_len`] bytes; returns its length.
    pub fn write(&self, packet: &[u8], k: usize, out: &mut [u8]) -> usize {
        let from = k * self.mss;
        let seg = self.mss.min(self.payload - from.min(self.payload));
        let len = self.headers + seg;
        out[..self.headers].copy_from_slice(&packet[..self.headers]);
        out[self.headers..len]
            .copy_from_slice(&packet[self.headers + from..self.headers + from + seg]);
        let last = k + 1 >= self.count();
        let l4_len = len - self.l4;
        // TCP: sequence, flags, and the pseudo-header sum for the new length.
        let seq = u32::from_be_bytes([
            out[self.l4 + 4],
            out[self.l4 + 5],
            out[self.l4 + 6],
            out[self.l4 + 7],
        ])
        .wrapping_add(from as u32);
        out[self.l4 + 4..self.l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = out[self.l4 + 13];
        if !last {
            flags &= !(FIN | PSH);
        }
        if k > 0 {
            flags &= !CWR;
        }
        out[self.l4 + 13] = flags;
        let pseudo = if self.v4 {
            let ip_len = (len - self.l3) as u16;
            set_u16(&mut out[self.l3..], 2, ip_len);
            let ident = get_u16(&out[self.l3..], 4).wrapping_add(k as u16);
            set_u16(&mut out[self.l3..], 4, ident);
            let mut ip = ipv4::Packet::new_unchecked(&mut out[self.l3..len]);
            ip.fill_checksum();
            pseudo_header_v4(ip.src_addr(), ip.dst_addr(), TCP, l4_len as u16)
        } else {
            set_u16(&mut out[self.l3..], 4, (len - self.l3 - 40) as u16);
            let mut src = [0; 16];
            let mut dst = [0; 16];
            src.copy_from_slice(&out[self.l3 + 8..self.l3 + 24]);
            dst.copy_from_slice(&out[self.l3 + 24..self.l3 + 40]);
            pseudo_header_v6(src, dst, TCP, l4_len as u32)
        };
        set_u16(&mut out[self.l4..], 16, fold(pseudo));
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ipv6, tcp};

    /// A TCP super-packet over IPv4 with `payload` bytes (i as u8) and the given flags.
    fn super_v4(payload: usize, flags: u8) -> [u8; 4096] {
        let mut f = [0u8; 4096];
        let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
        eth.set_ethertype(EtherType::Ipv4);
        let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
        ip.init(
            (20 + 32 + payload) as u16,
            TCP,
            [198, 51, 100, 1],
            [198, 51, 100, 3],
        );
        ip.set_ident(0xfffe);
        ip.fill_checksum();
        let mut t = tcp::Packet::new_unchecked(ip.payload_mut());
        t.set_header_len(32);
        t.set_seq(0xffff_ff00);
        t.set_flags(flags);
        for (i, b) in f[14 + 20 + 32..][..payload].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn segments_carry_the_payload_in_order_with_valid_headers() {
        let payload = 3000;
        let packet = super_v4(payload, FIN | PSH | CWR | 0x10);
        let len = 14 + 20 + 32 + payload;
        let s = TcpSegmenter::new(&packet[..len], 1500).unwrap();
        assert_eq!(s.count(), 3); // 1448 + 1448 + 104
        let mut out = [0u8; 1514];
        let mut joined = [0u8; 3000];
        let mut at = 0;
        for k in 0..s.count() {
            let n = s.write(&packet[..len], k, &mut out);
            assert!(n - 14 <= 1500);
            let ip = ipv4::Packet::new_checked(&out[14..n]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(ip.ident(), 0xfffeu16.wrapping_add(k as u16));
            let c = L4Checksum::locate(&out[..n], n).unwrap();
            assert!(c.is_partial(&out[..n]), "the checksum is left partial");
            c.complete(&mut out[..n]);
            let ip = ipv4::Packet::new_checked(&out[14..n]).unwrap();
            let t = tcp::Packet::new_checked(ip.payload()).unwrap();
            assert!(t.verify_checksum(ip.pseudo_header()));
            assert_eq!(t.seq(), 0xffff_ff00u32.wrapping_add(at as u32));
            let last = k == 2;
            assert_eq!(t.flags() & (FIN | PSH) != 0, last);
            assert_eq!(t.flags() & CWR != 0, k == 0);
            assert_eq!(t.flags() & 0x10, 0x10, "ACK kept");
            joined[at..at + t.payload().len()].copy_from_slice(t.payload());
            at += t.payload().len();
        }
        assert_eq!(at, payload);
        assert!(joined.iter().enumerate().all(|(i, b)| *b == i as u8));
    }

    #[test]
    fn ipv6_lengths_and_non_tcp_refusal() {
        let payload = 2000;
        let mut f = [0u8; 14 + 40 + 20 + 2000];
        {
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_ethertype(EtherType::Ipv6);
            let mut ip = ipv6::Packet::new_unchecked(eth.payload_mut());
            ip.init((20 + payload) as u16, TCP, [0x20; 16], [0x30; 16], 0);
            let mut t = tcp::Packet::new_unchecked(ip.payload_mut());
            t.set_header_len(20);
        }
        let s = TcpSegmenter::new(&f, 1280).unwrap();
        assert_eq!(s.count(), 2);
        let mut out = [0u8; 1400];
        let n = s.write(&f, 0, &mut out);
        assert_eq!(n, 14 + 1280);
        let ip = ipv6::Packet::new_checked(&out[14..n]).unwrap();
        assert_eq!(usize::from(ip.payload_len()), 1280 - 40);
        // UDP, a headers-only MTU, and garbage are refused.
        let mut udp = f;
        udp[14 + 6] = 17;
        assert!(TcpSegmenter::new(&udp, 1280).is_none());
        assert!(TcpSegmenter::new(&f, 60).is_none());
        assert!(TcpSegmenter::new(&f[..30], 1280).is_none());
    }
}
