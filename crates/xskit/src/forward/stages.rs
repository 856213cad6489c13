//! The forwarder's stages: answering ARP and ICMP echo for its own address, and the rules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xskit_wire::{arp, checksum, ethernet, icmp, ipv4, EtherType};

use crate::pipeline::{Next, Stage};
use crate::rules::{PacketKey, RateLimiter, RuleSet, Verdict};
use crate::sys::umem::{Frame, Umem};

/// Counters a rule (or the default) keeps in user space.
#[derive(Debug, Default)]
pub(crate) struct RuleCells {
    pub(crate) packets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Packets a rate limit dropped.
    pub(crate) over_rate: AtomicU64,
}

/// Replies to ARP requests and ICMP echo requests for `addr`, from the MAC of the port the
/// request came in on; everything else goes on to stage `next`.
pub(crate) struct Respond {
    pub(crate) addr: [u8; 4],
    pub(crate) mac: [u8; 6],
    pub(crate) next: u16,
    pub(crate) arp_replies: Arc<AtomicU64>,
    pub(crate) echo_replies: Arc<AtomicU64>,
}

impl Respond {
    /// Rewrites an ARP request for our address into the reply, in place.
    fn arp(&self, frame: &mut [u8]) -> bool {
        let Ok(mut eth) = ethernet::Frame::new_checked(&mut frame[..]) else {
            return false;
        };
        if eth.ethertype() != EtherType::Arp {
            return false;
        }
        let (sender_mac, sender_ip) = {
            let Ok(req) = arp::Packet::new_checked(eth.payload_mut()) else {
                return false;
            };
            if req.operation() != arp::operation::REQUEST || req.target_ip() != self.addr {
                return false;
            }
            (req.sender_mac(), req.sender_ip())
        };
        eth.set_dst_addr(sender_mac);
        eth.set_src_addr(self.mac);
        arp::Packet::new_unchecked(eth.payload_mut()).emit(
            arp::operation::REPLY,
            self.mac,
            self.addr,
            sender_mac,
            sender_ip,
        );
        true
    }

    /// Rewrites an ICMP echo request to our address into the reply, in place.
    fn echo(&self, frame: &mut [u8]) -> bool {
        let Ok(mut eth) = ethernet::Frame::new_checked(&mut frame[..]) else {
            return false;
        };
        if eth.ethertype() != EtherType::Ipv4 {
            return false;
        }
        let peer_mac = eth.src_addr();
        {
            let Ok(mut ip) = ipv4::Packet::new_checked(eth.payload_mut()) else {
                return false;
            };
            if ip.protocol() != 1
                || ip.dst_addr() != self.addr
                || ip.frag_offset() != 0
                || ip.more_frags()
            {
                return false;
            }
            let peer_ip = ip.src_addr();
            {
                let Ok(mut msg) = icmp::Packet::new_checked(ip.payload_mut()) else {
                    return false;
                };
                if msg.kind() != icmp::kind::ECHO_REQUEST || msg.code() != 0 {
                    return false;
                }
                // Only the type changes (8 -> 0): RFC 1624 updates the checksum without
                // reading the payload.
                let sum = checksum::update(
                    msg.checksum(),
                    u16::from(icmp::kind::ECHO_REQUEST) << 8,
                    u16::from(icmp::kind::ECHO_REPLY) << 8,
                );
                msg.set_kind(icmp::kind::ECHO_REPLY, 0);
                msg.set_checksum(sum);
            }
            ip.set_src_addr(self.addr);
            ip.set_dst_addr(peer_ip);
            ip.set_ttl(64);
            ip.fill_checksum();
        }
        eth.set_dst_addr(peer_mac);
        eth.set_src_addr(self.mac);
        true
    }
}

impl Stage for Respond {
    fn name(&self) -> &'static str {
        "respond"
    }

    fn process(&mut self, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        let (mut arps, mut echoes) = (0, 0);
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            let data = umem.data_mut(f);
            *n = if self.arp(data) {
                arps += 1;
                Next::Back
            } else if self.echo(data) {
                echoes += 1;
                Next::Back
            } else {
                Next::Stage(self.next)
            };
        }
        if arps > 0 {
            self.arp_replies.fetch_add(arps, Ordering::Relaxed);
        }
        if echoes > 0 {
            self.echo_replies.fetch_add(echoes, Ordering::Relaxed);
        }
    }
}

/// The rules: forward out of `out` (or back, swapped, when reflecting), drop, pass to the
/// kernel, or forward within a rate.
pub(crate) struct Rules {
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) limiters: Arc<Vec<Option<RateLimiter>>>,
    /// One per rule, then the default's.
    pub(crate) cells: Arc<Vec<RuleCells>>,
    /// Counts gathered during one vector, flushed to `cells` at its end.
    pub(crate) local: Vec<[u64; 3]>,
    pub(crate) out: u16,
    pub(crate) reflect: bool,
    /// Frames to this MAC are the forwarding host's own (its TAP device).
    pub(crate) local_mac: Option<[u8; 6]>,
}

impl Rules {
    fn forward(&self, data: &mut [u8]) -> Next {
        let Ok(mut eth) = ethernet::Frame::new_checked(data) else {
            return Next::Drop;
        };
        if self.reflect {
            eth.swap_addrs();
            return Next::Back;
        }
        if self.local_mac == Some(eth.dst_addr()) {
            return Next::Kernel;
        }
        Next::Tx(self.out)
    }
}

impl Stage for Rules {
    fn name(&self) -> &'static str {
        "rules"
    }

    fn process(&mut self, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        let default = self.rules.rules().len();
        let mut now_ps = None;
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            let len = f.len();
            let data = umem.data_mut(f);
            let key = PacketKey::parse(data);
            let (i, verdict) = match self.rules.classify(&key) {
                Some(i) => (i, self.rules.rules()[i].verdict()),
                None => (default, self.rules.default_verdict()),
            };
            let c = &mut self.local[i];
            c[0] += 1;
            c[1] += len as u64;
            *n = match verdict {
                Verdict::Drop => Next::Drop,
                Verdict::Pass => Next::Kernel,
                Verdict::Forward => self.forward(data),
                Verdict::RateLimit => {
                    let limiter = self.limiters.get(i).and_then(Option::as_ref);
                    let now = *now_ps.get_or_insert_with(|| limiter.map_or(0, |l| l.now_ps()));
                    if limiter.is_none_or(|l| l.allow(now, len)) {
                        self.forward(data)
                    } else {
                        c[2] += 1;
                        Next::Drop
                    }
                }
            };
        }
        for (local, cell) in self.local.iter_mut().zip(self.cells.iter()) {
            if local[0] > 0 {
                cell.packets.fetch_add(local[0], Ordering::Relaxed);
                cell.bytes.fetch_add(local[1], Ordering::Relaxed);
                cell.over_rate.fetch_add(local[2], Ordering::Relaxed);
                *local = [0; 3];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Umem, UmemConfig};

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn respond() -> Respond {
        Respond {
            addr: [198, 51, 100, 254],
            mac: MAC,
            next: 1,
            arp_replies: Arc::default(),
            echo_replies: Arc::default(),
        }
    }

    #[test]
    fn arp_requests_for_our_address_become_replies() {
        let mut f = [0u8; 60];
        {
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_dst_addr([0xff; 6]);
            eth.set_src_addr(PEER);
            eth.set_ethertype(EtherType::Arp);
            arp::Packet::new_unchecked(eth.payload_mut()).emit(
                arp::operation::REQUEST,
                PEER,
                [198, 51, 100, 1],
                [0; 6],
                [198, 51, 100, 254],
            );
        }
        let r = respond();
        assert!(r.arp(&mut f));
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!((eth.dst_addr(), eth.src_addr()), (PEER, MAC));
        let a = arp::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(a.operation(), arp::operation::REPLY);
        assert_eq!((a.sender_mac(), a.sender_ip()), (MAC, [198, 51, 100, 254]));
        assert_eq!(a.target_ip(), [198, 51, 100, 1]);
        // Not for us: left alone.
        let mut other = f;
        arp::Packet::new_unchecked(&mut other[14..]).emit(
            arp::operation::REQUEST,
            PEER,
            [198, 51, 100, 1],
            [0; 6],
            [198, 51, 100, 3],
        );
        let before = other;
        assert!(!r.arp(&mut other));
        assert_eq!(before, other);
    }

    #[test]
    fn echo_requests_become_replies_with_valid_checksums() {
        let mut f = [0u8; 14 + 20 + 8 + 5];
        {
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_src_addr(PEER);
            eth.set_dst_addr(MAC);
            eth.set_ethertype(EtherType::Ipv4);
            let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
            ip.init(20 + 8 + 5, 1, [198, 51, 100, 1], [198, 51, 100, 254]);
            ip.fill_checksum();
            let mut m = icmp::Packet::new_unchecked(ip.payload_mut());
            m.set_kind(icmp::kind::ECHO_REQUEST, 0);
            m.set_echo(7, 1);
            m.payload_mut().copy_from_slice(b"hello");
            m.fill_checksum(0);
        }
        assert!(respond().echo(&mut f));
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        assert_eq!((eth.dst_addr(), eth.src_addr()), (PEER, MAC));
        let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(
            (ip.src_addr(), ip.dst_addr()),
            ([198, 51, 100, 254], [198, 51, 100, 1])
        );
        let m = icmp::Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((m.kind(), m.echo_ident(), m.echo_seq()), (0, 7, 1));
        assert!(m.verify_checksum(0));
        assert_eq!(m.payload(), b"hello");
    }

    #[test]
    fn truncated_and_garbage_frames_are_not_answered() {
        let r = respond();
        for len in 0..60 {
            let mut f = vec![0xffu8; len];
            assert!(!r.arp(&mut f) && !r.echo(&mut f));
        }
        let umem = Umem::new(UmemConfig {
            frame_count: 4,
            ..UmemConfig::default()
        })
        .unwrap();
        let mut frames = umem.take_frames().unwrap();
        for f in frames.iter_mut() {
            umem.write(f, &[0x08; 40]).unwrap();
        }
        let mut nexts = vec![Next::Drop; 4];
        let mut r = respond();
        r.process(&umem, &mut frames, &mut nexts);
        assert!(nexts.iter().all(|n| *n == Next::Stage(1)));
    }
}
