//! The forwarder's stages: answering ARP and ICMP echo for its own address, and the rules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xskit_wire::{arp, checksum, ethernet, icmp, ip_protocol, ipv4, tcp, udp, EtherType};

pub(crate) use crate::counter::RuleCells;
use crate::counter::{bump, PortCells};
use crate::live_rules::LiveRules;
use crate::rule_state::ByRule;
use crate::rules::{ChecksumState, Limiter, PacketKey, RuleSet, Verdict};
use xskit::{Frame, Umem};
use xskit_pipeline::{Next, Stage, StageContext, StageId};

/// What the rules stage notes with a forwarded frame for the transmit step ([`Frame::note`]):
/// what its TCP or UDP checksum needs, from the one read of its headers.
pub(crate) mod tx_note {
    use super::{tcp, udp, ChecksumState, Next};

    /// Not known: the transmit step looks for itself.
    pub(crate) const LOOK: u8 = 0;
    /// Nothing to finish.
    pub(crate) const SETTLED: u8 = 1;
    /// A partial UDP checksum in an untagged IPv4 packet without options.
    const PARTIAL_UDP: u8 = 2;
    /// A partial TCP checksum in an untagged IPv4 packet without options.
    const PARTIAL_TCP: u8 = 3;
    const PLAIN_L4: usize = ChecksumState::PLAIN_IPV4_L4;

    /// The note for a frame whose checksum is in `state`.
    #[inline(always)]
    pub(crate) fn of(state: ChecksumState) -> u8 {
        match state {
            ChecksumState::Settled => SETTLED,
            ChecksumState::Partial {
                start: PLAIN_L4,
                offset: udp::CHECKSUM_AT,
            } => PARTIAL_UDP,
            ChecksumState::Partial {
                start: PLAIN_L4,
                offset: tcp::CHECKSUM_AT,
            } => PARTIAL_TCP,
            _ => LOOK,
        }
    }

    /// The note for a frame going to `next` whose checksum is in `state`. A forwarded frame
    /// carries what its checksum needs: the transmit step then leaves a settled one's
    /// headers alone, and finds a noted partial one without reading them again.
    #[inline(always)]
    pub(crate) fn for_next(next: Next, state: ChecksumState) -> u8 {
        if matches!(next, Next::Tx(_) | Next::Back) {
            of(state)
        } else {
            LOOK
        }
    }

    /// Where a noted partial checksum is: its L4 header's start in the frame, and the field's
    /// offset in it.
    #[inline(always)]
    pub(crate) fn partial_at(note: u8) -> Option<(usize, usize)> {
        match note {
            PARTIAL_UDP => Some((PLAIN_L4, udp::CHECKSUM_AT)),
            PARTIAL_TCP => Some((PLAIN_L4, tcp::CHECKSUM_AT)),
            _ => None,
        }
    }
}

/// Each port's MAC address, which a bond's failover may change while workers run
/// (`fail_over_mac active`).
#[derive(Debug)]
pub(crate) struct PortMacs(Vec<AtomicU64>);

impl PortMacs {
    pub(crate) fn new(macs: &[[u8; 6]]) -> Self {
        PortMacs(macs.iter().map(|m| AtomicU64::new(pack(*m))).collect())
    }

    pub(crate) fn get(&self, port: usize) -> Option<[u8; 6]> {
        let v = self.0.get(port)?.load(Ordering::Relaxed).to_be_bytes();
        Some([v[2], v[3], v[4], v[5], v[6], v[7]])
    }

    /// How many ports.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn set(&self, port: usize, mac: [u8; 6]) {
        if let Some(cell) = self.0.get(port) {
            cell.store(pack(mac), Ordering::Relaxed);
        }
    }
}

fn pack(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]])
}

/// Replies to ARP requests and ICMP echo requests for `addr`, from the MAC of the port the
/// request came in on (`macs`, by port); everything else goes on to stage `next`.
pub(crate) struct Respond {
    pub(crate) addr: [u8; 4],
    pub(crate) macs: Arc<PortMacs>,
    pub(crate) next: StageId,
    pub(crate) arp_replies: Arc<AtomicU64>,
    pub(crate) echo_replies: Arc<AtomicU64>,
    /// Requests for our address that Linux would discard, dropped.
    pub(crate) refused: Arc<AtomicU64>,
}

/// What [`Respond`] makes of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Not a request for us: on to the rules.
    NotOurs,
    /// Rewritten into the reply.
    Replied,
    /// A request for us that Linux would discard: a group or martian sender.
    Refused,
}

/// A sender address Linux's routing refuses as a source (martian): unspecified, loopback,
/// multicast, or the limited broadcast.
fn martian_source(ip: [u8; 4]) -> bool {
    ip[0] == 0 || ip[0] == 127 || (224..=239).contains(&ip[0]) || ip == [255; 4]
}

impl Respond {
    /// Rewrites an ARP request for our address into the reply, in place.
    fn arp(&self, mac: [u8; 6], frame: &mut [u8]) -> Answer {
        let Ok(mut eth) = ethernet::Frame::new_checked(&mut frame[..]) else {
            return Answer::NotOurs;
        };
        if eth.ethertype() != EtherType::Arp {
            return Answer::NotOurs;
        }
        let from_group = eth.src_addr()[0] & 1 == 1;
        let (sender_mac, sender_ip) = {
            let Ok(req) = arp::Packet::new_checked(eth.payload_mut()) else {
                return Answer::NotOurs;
            };
            if req.operation() != arp::operation::REQUEST || req.target_ip() != self.addr {
                return Answer::NotOurs;
            }
            (req.sender_mac(), req.sender_ip())
        };
        // A reply to a group MAC would reach every host; Linux ignores such requests. (A
        // sender IP of 0.0.0.0 is a duplicate-address probe, which Linux does answer.)
        if from_group
            || sender_mac[0] & 1 == 1
            || (sender_ip != [0; 4] && martian_source(sender_ip))
        {
            return Answer::Refused;
        }
        eth.set_dst_addr(sender_mac);
        eth.set_src_addr(mac);
        arp::Packet::new_unchecked(eth.payload_mut()).emit(
            arp::operation::REPLY,
            mac,
            self.addr,
            sender_mac,
            sender_ip,
        );
        Answer::Replied
    }

    /// Rewrites an ICMP echo request to our address into the reply, in place.
    fn echo(&self, mac: [u8; 6], frame: &mut [u8]) -> Answer {
        let Ok(mut eth) = ethernet::Frame::new_checked(&mut frame[..]) else {
            return Answer::NotOurs;
        };
        if eth.ethertype() != EtherType::Ipv4 {
            return Answer::NotOurs;
        }
        let peer_mac = eth.src_addr();
        {
            let Ok(mut ip) = ipv4::Packet::new_checked(eth.payload_mut()) else {
                return Answer::NotOurs;
            };
            if ip.protocol() != ip_protocol::ICMP
                || ip.dst_addr() != self.addr
                || ip.frag_offset() != 0
                || ip.more_frags()
            {
                return Answer::NotOurs;
            }
            let peer_ip = ip.src_addr();
            if peer_mac[0] & 1 == 1 || martian_source(peer_ip) {
                return Answer::Refused;
            }
            {
                let Ok(mut msg) = icmp::Packet::new_checked(ip.payload_mut()) else {
                    return Answer::NotOurs;
                };
                if msg.kind() != icmp::kind::ECHO_REQUEST || msg.code() != 0 {
                    return Answer::NotOurs;
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
        eth.set_src_addr(mac);
        Answer::Replied
    }
}

impl Stage for Respond {
    fn name(&self) -> &'static str {
        "respond"
    }

    fn process(
        &mut self,
        context: &StageContext,
        umem: &Umem,
        frames: &mut [Frame],
        nexts: &mut [Next],
    ) {
        let Some(mac) = self.macs.get(usize::from(context.input_port)) else {
            nexts.fill(Next::Stage(self.next));
            return;
        };
        let (mut arps, mut echoes, mut refused) = (0, 0, 0);
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            let data = umem.data_mut(f);
            let (answer, replies) = match self.arp(mac, data) {
                Answer::NotOurs => (self.echo(mac, data), &mut echoes),
                a => (a, &mut arps),
            };
            *n = match answer {
                Answer::Replied => {
                    *replies += 1;
                    Next::Back
                }
                Answer::Refused => {
                    refused += 1;
                    Next::Drop
                }
                Answer::NotOurs => Next::Stage(self.next),
            };
        }
        for (count, cell) in [
            (arps, &self.arp_replies),
            (echoes, &self.echo_replies),
            (refused, &self.refused),
        ] {
            if count > 0 {
                cell.fetch_add(count, Ordering::Relaxed);
            }
        }
    }
}

/// Where a vector's forwarded packets go, read once per vector from the [`Rules`] stage.
#[derive(Clone, Copy)]
pub(crate) struct Forwarding {
    /// Where a forwarded packet goes (see [`Rules::forwarding`]).
    next: Next,
    reflect: bool,
    /// Frames to this MAC are the forwarding host's own (its TAP device).
    local_mac: Option<[u8; 6]>,
}

impl Forwarding {
    /// Where a forwarded packet goes unless it is the host's.
    pub(crate) fn next(&self) -> Next {
        self.next
    }

    /// Whether a frame (of an Ethernet header at least) is addressed to the host's MAC:
    /// what [`Forwarding::route`] sends to the host when not reflecting.
    #[inline(always)]
    pub(crate) fn is_the_hosts(&self, h: &[u8; ethernet::HEADER_LEN]) -> bool {
        self.local_mac.is_some_and(|mac| h[..6] == mac)
    }

    /// Forwards one packet to `next`, or to the host when it is addressed to the host's
    /// MAC, or back with its addresses swapped when reflecting.
    #[inline(always)]
    pub(crate) fn route(self, data: &mut [u8]) -> Next {
        if self.reflect {
            let Ok(mut eth) = ethernet::Frame::new_checked(data) else {
                return Next::Drop;
            };
            eth.swap_addrs();
            return Next::Back;
        }
        // The destination MAC alone, read in place: what a frame shorter than an Ethernet
        // header would do is the rules' unclassifiable verdict, decided before this.
        match data.first_chunk::<{ ethernet::HEADER_LEN }>() {
            None => Next::Drop,
            Some(h) if self.is_the_hosts(h) => Next::Kernel,
            Some(_) => self.next,
        }
    }
}

/// The tags the filters of `ifindexes` tell their decisions under while they run `rules`,
/// as [`crate::kernel::KernelRules`] has them tell.
pub(crate) fn told_tags(rules: &RuleSet, ifindexes: &[u32]) -> Vec<u64> {
    ifindexes
        .iter()
        .map(|&i| crate::told::tag(i, rules.told_id()))
        .collect()
}

/// The rules: forward out of `out` (or back, swapped, when reflecting), drop, pass to the
/// kernel, or forward within a rate.
pub(crate) struct Rules {
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) limiters: Arc<ByRule<Option<Limiter>>>,
    /// The kernel filter polices: what it sent up within a rule's rate is forwarded here
    /// without policing it again, except IPv6 with extension headers, which it sends up
    /// undecided.
    pub(crate) kernel_polices: bool,
    /// One per rule, then the default's, then unclassifiable packets'.
    pub(crate) cells: Arc<ByRule<RuleCells>>,
    /// The worker's per-port counts: unclassifiable packets are counted on their port too.
    pub(crate) ports: Arc<Vec<PortCells>>,
    /// Counts gathered during one vector, flushed to `cells` at its end.
    pub(crate) local: Vec<[u64; 3]>,
    /// The indices of `local` counted on during the vector: only they are flushed, so that a
    /// vector costs its packets' rules, not every rule.
    pub(crate) touched: Vec<usize>,
    /// The port each input port forwards to.
    pub(crate) outs: Vec<u16>,
    pub(crate) reflect: bool,
    /// Frames to this MAC are the forwarding host's own (its TAP device).
    pub(crate) local_mac: Option<[u8; 6]>,
    /// Where changed rules are published, the generation this stage runs, and its worker's
    /// index there.
    pub(crate) live: Arc<LiveRules>,
    pub(crate) generation: u64,
    pub(crate) worker: usize,
    /// Each port's interface, by port.
    pub(crate) ifindexes: Arc<[u32]>,
    /// The tag each port's filter tells its decisions under while it runs these rules
    /// ([`crate::told`]), by port; 0 where it tells none.
    pub(crate) told_tags: Vec<u64>,
}

impl Rules {
    /// Takes up the rules published since this stage last looked, if any: between two
    /// vectors.
    #[inline(always)]
    pub(crate) fn take_up_changes_if_any(&mut self) {
        if self.live.generation() != self.generation {
            self.take_up_changes();
        }
    }

    /// Takes up the rules published last.
    fn take_up_changes(&mut self) {
        let (generation, now) = self.live.current();
        if let Some(now) = now {
            if let Some(cells) = now.cells.get(self.worker) {
                self.rules = Arc::clone(&now.rules);
                self.limiters = Arc::clone(&now.limiters);
                self.cells = Arc::clone(cells);
                self.local = vec![[0; 3]; self.cells.len()];
                self.touched.clear();
                self.told_tags = told_tags(&self.rules, &self.ifindexes);
            }
        }
        self.generation = generation;
    }

    /// Where packets of `input_port` that a rule forwards go: worked out once per vector.
    pub(crate) fn forwarding(&self, input_port: u16) -> Forwarding {
        let next = match self.outs.get(usize::from(input_port)) {
            _ if self.reflect => Next::Back,
            Some(&out) => Next::Tx(out),
            None => Next::Drop,
        };
        Forwarding {
            next,
            reflect: self.reflect,
            local_mac: self.local_mac,
        }
    }

    /// Counts a packet of `len` bytes (`data`) for what decided it (`i`: a rule, the default
    /// or the unclassifiable) and says where it goes: `verdict`, a rate limit policed here
    /// unless the kernel did.
    #[inline(always)]
    fn count_and_route(
        &mut self,
        i: usize,
        verdict: Verdict,
        key: Option<&PacketKey>,
        (len, data): (usize, &mut [u8]),
        context: &StageContext,
        forward_to: Forwarding,
    ) -> Next {
        self.count(i, 1, len as u64);
        match verdict {
            Verdict::Drop => Next::Drop,
            Verdict::Pass => Next::Kernel,
            Verdict::Forward => forward_to.route(data),
            Verdict::RateLimit => {
                let policed = self.kernel_polices && key.is_some_and(|k| !k.ipv6_extensions);
                let limiter = self.limiters.get(i).and_then(Option::as_ref);
                if policed || limiter.is_none_or(|l| l.allow(key, context.now_ns, len)) {
                    forward_to.route(data)
                } else {
                    self.local[i][2] += 1;
                    Next::Drop
                }
            }
        }
    }

    /// True when there are no rules and the default forwards.
    pub(crate) fn forwards_without_rules(&self) -> bool {
        self.rules.rules().is_empty() && self.rules.default_verdict() == Verdict::Forward
    }

    /// Counts `packets` of `bytes` in all for what decided them (`i`), flushed at the
    /// vector's end.
    #[inline(always)]
    pub(crate) fn count(&mut self, i: usize, packets: u64, bytes: u64) {
        let c = &mut self.local[i];
        if c[0] == 0 {
            self.touched.push(i);
        }
        c[0] += packets;
        c[1] += bytes;
    }

    /// The rules stage without rules, forwarding by default: the commonest bump in the
    /// wire. A classifiable packet is counted to the default once per vector, not one by
    /// one, and its verdict is not looked up.
    fn forward_without_rules(
        &mut self,
        context: &StageContext,
        umem: &Umem,
        (frames, nexts): (&mut [Frame], &mut [Next]),
        forward_to: Forwarding,
    ) {
        let (mut packets, mut bytes) = (0, 0);
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            let len = f.len();
            let continued = f.is_continued();
            let data = umem.data_mut(f);
            let (classified, checksum) = PacketKey::classifiable_noting_checksum(data, continued);
            let next = if classified {
                packets += 1;
                bytes += len as u64;
                forward_to.route(data)
            } else {
                let (i, verdict) = self.rules.decide_without_rules(false);
                self.count_and_route(i, verdict, None, (len, data), context, forward_to)
            };
            f.set_note(tx_note::for_next(next, checksum));
            *n = next;
        }
        if packets > 0 {
            self.count(self.rules.rules().len(), packets, bytes);
        }
    }

    /// Adds the vector's counts to the shared cells.
    pub(crate) fn flush_counts(&mut self, context: &StageContext) {
        // A vector comes from one port: its unclassifiable packets are that port's.
        let unclassifiable = self.local.last().map_or(0, |c| c[0]);
        if let (true, Some(port)) = (
            unclassifiable > 0,
            self.ports.get(usize::from(context.input_port)),
        ) {
            bump(&port.unclassifiable, unclassifiable);
        }
        for i in self.touched.drain(..) {
            let (Some(local), Some(cell)) = (self.local.get_mut(i), self.cells.get(i)) else {
                continue;
            };
            bump(&cell.packets, local[0]);
            bump(&cell.bytes, local[1]);
            bump(&cell.over_rate, local[2]);
            *local = [0; 3];
        }
    }
}

impl Stage for Rules {
    fn name(&self) -> &'static str {
        "rules"
    }

    fn process(
        &mut self,
        context: &StageContext,
        umem: &Umem,
        frames: &mut [Frame],
        nexts: &mut [Next],
    ) {
        self.take_up_changes_if_any();
        let forward_to = self.forwarding(context.input_port);
        // With no rules only whether a packet can be classified matters: its key is not
        // built.
        let no_rules = self.rules.rules().is_empty();
        if self.forwards_without_rules() {
            self.forward_without_rules(context, umem, (frames, nexts), forward_to);
            self.flush_counts(context);
            return;
        }
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            let len = f.len();
            let continued = f.is_continued();
            let data = umem.data_mut(f);
            // One read of the headers serves the rules and the transmit step's checksum work.
            let (next, checksum) = if no_rules {
                let (classified, checksum) =
                    PacketKey::classifiable_noting_checksum(data, continued);
                let (i, verdict) = self.rules.decide_without_rules(classified);
                let next = self.count_and_route(i, verdict, None, (len, data), context, forward_to);
                (next, checksum)
            } else {
                // Kept whole, not taken apart: moving the key out costs a copy a packet.
                let parsed = PacketKey::parse_noting_checksum(data, continued);
                let (i, verdict) = self.rules.decide(&parsed.0);
                let key = parsed.0.as_ref().ok();
                let next = self.count_and_route(i, verdict, key, (len, data), context, forward_to);
                (next, parsed.1)
            };
            f.set_note(tx_note::for_next(next, checksum));
            *n = next;
        }
        self.flush_counts(context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xskit::{Umem, UmemConfig};

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn respond() -> Respond {
        Respond {
            addr: [198, 51, 100, 254],
            macs: Arc::new(PortMacs::new(&[MAC])),
            next: xskit_pipeline::Pipeline::new(1).next_stage_id(),
            arp_replies: Arc::default(),
            echo_replies: Arc::default(),
            refused: Arc::default(),
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
        assert_eq!(r.arp(MAC, &mut f), Answer::Replied);
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
        assert_eq!(r.arp(MAC, &mut other), Answer::NotOurs);
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
        assert_eq!(respond().echo(MAC, &mut f), Answer::Replied);
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
    fn requests_linux_would_discard_are_refused() {
        let r = respond();
        let request = |src_mac: [u8; 6], sender_mac: [u8; 6], sender_ip: [u8; 4]| {
            let mut f = [0u8; 60];
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_dst_addr([0xff; 6]);
            eth.set_src_addr(src_mac);
            eth.set_ethertype(EtherType::Arp);
            arp::Packet::new_unchecked(eth.payload_mut()).emit(
                arp::operation::REQUEST,
                sender_mac,
                sender_ip,
                [0; 6],
                [198, 51, 100, 254],
            );
            f
        };
        let bcast = [0xff; 6];
        for (src, sender, ip) in [
            (bcast, PEER, [198, 51, 100, 1]),
            (PEER, bcast, [198, 51, 100, 1]),
            (PEER, [0x01, 0, 0x5e, 0, 0, 1], [198, 51, 100, 1]),
            (PEER, PEER, [255, 255, 255, 255]),
            (PEER, PEER, [224, 0, 0, 1]),
        ] {
            assert_eq!(r.arp(MAC, &mut request(src, sender, ip)), Answer::Refused);
        }
        // A duplicate-address probe (sender 0.0.0.0) is answered, as Linux does.
        assert_eq!(
            r.arp(MAC, &mut request(PEER, PEER, [0; 4])),
            Answer::Replied
        );
        for src in [
            [255, 255, 255, 255],
            [224, 0, 0, 5],
            [0, 0, 0, 0],
            [127, 0, 0, 1],
        ] {
            let mut f = [0u8; 14 + 20 + 8];
            let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
            eth.set_src_addr(PEER);
            eth.set_dst_addr(MAC);
            eth.set_ethertype(EtherType::Ipv4);
            let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
            ip.init(20 + 8, 1, src, [198, 51, 100, 254]);
            ip.fill_checksum();
            let mut m = icmp::Packet::new_unchecked(ip.payload_mut());
            m.set_kind(icmp::kind::ECHO_REQUEST, 0);
            m.fill_checksum(0);
            assert_eq!(r.echo(MAC, &mut f), Answer::Refused, "{src:?}");
        }
    }

    #[test]
    fn truncated_and_garbage_frames_are_not_answered() {
        let r = respond();
        for len in 0..60 {
            let mut f = vec![0xffu8; len];
            assert_eq!(
                (r.arp(MAC, &mut f), r.echo(MAC, &mut f)),
                (Answer::NotOurs, Answer::NotOurs)
            );
        }
        let umem = Umem::new(UmemConfig::default().frame_count(4)).unwrap();
        let mut frames = umem.take_frames().unwrap();
        for f in frames.iter_mut() {
            umem.write(f, &[0x08; 40]).unwrap();
        }
        let mut nexts = vec![Next::Drop; 4];
        let mut r = respond();
        r.process(&StageContext::default(), &umem, &mut frames, &mut nexts);
        assert!(nexts.iter().all(|n| *n == Next::Stage(r.next)));
    }
}
