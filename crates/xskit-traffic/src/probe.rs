//! Probe traffic: numbered, timestamped UDP packets (see [`Template`]) and the loops that send
//! and receive them through ports. The demo, the tests and the benchmarks all use these.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::packet::{
    check, Endpoints, Flows, Probe, Template, MAGIC, MAX_LEN, MIN_FRAME_LEN, PAYLOAD_HEADER_LEN,
    PORT,
};

use crate::error::Result;
use crate::sender::{Pace, SendPlan, Share};
use xskit::Port;
use xskit_os::monotonic_ns;

/// The smallest IPv4 probe without a VLAN tag.
pub const MIN_LEN: usize = 14 + 20 + 8 + PAYLOAD_HEADER_LEN;

/// Addresses of a single-flow IPv4 probe stream, the common case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeAddrs {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
}

impl ProbeAddrs {
    /// The template for single-flow IPv4 probes of `len` bytes between these addresses.
    pub fn template(&self, len: usize) -> Result<Template> {
        Template::new(
            Endpoints {
                src_mac: self.src_mac,
                dst_mac: self.dst_mac,
                src_ip: IpAddr::from(self.src_ip),
                dst_ip: IpAddr::from(self.dst_ip),
                src_port: PORT,
                dst_port: PORT,
            },
            Flows::default(),
            None,
            len,
        )
    }
}

/// Writes a single-flow IPv4 probe of `len` bytes with sequence number `seq`, stamped now;
/// returns the length, or `None` if `len` is out of range or `buf` too small.
pub fn write(buf: &mut [u8], len: usize, seq: u64, a: &ProbeAddrs) -> Option<usize> {
    a.template(len).ok()?.write(buf, seq, monotonic_ns())
}

/// The current CLOCK_MONOTONIC time in ns, the clock probes are stamped with.
pub fn now_ns() -> u64 {
    monotonic_ns()
}

/// How far from the highest sequence number seen a probe's may be and still count as part of
/// the stream: a forged or stray probe further away counts as foreign, not as billions lost.
pub const SEQUENCE_WINDOW: u64 = 1 << 24;

/// Counts what a receiver saw of a probe stream that should arrive as 0, 1, 2, ...
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequenceCheck {
    /// Probes the sender sent (0, 1, ... expected - 1), when known: others count as foreign,
    /// and every one missing at the end counts as lost.
    pub expected: Option<u64>,
    /// The lowest and highest sequence numbers seen (of plausible probes).
    pub first: Option<u64>,
    /// See `first`.
    pub highest: Option<u64>,
    /// The sequence number expected next.
    pub next: u64,
    /// Intact probes.
    pub valid: u64,
    /// Damaged probes.
    pub corrupt: u64,
    /// Probes whose sequence number was not the one expected (a gap, a repeat or a reordering).
    pub out_of_order: u64,
    /// Frames that were not probes, and probes whose sequence number is implausible (beyond
    /// `expected`, or further than [`SEQUENCE_WINDOW`] from the highest seen).
    pub foreign: u64,
    /// Sum, minimum and maximum of one-way latencies seen by [`SequenceCheck::observe_at`], ns.
    pub latency_sum_ns: u64,
    /// Smallest latency seen (u64::MAX before any).
    pub latency_min_ns: u64,
    /// Largest latency seen.
    pub latency_max_ns: u64,
}

impl SequenceCheck {
    /// A check for a stream of exactly `count` probes.
    pub fn expecting(count: u64) -> Self {
        SequenceCheck {
            expected: Some(count),
            ..SequenceCheck::default()
        }
    }

    fn plausible(&self, seq: u64) -> bool {
        match (self.expected, self.highest) {
            (Some(n), _) => seq < n,
            (None, None) => true,
            (None, Some(h)) => {
                seq <= h.saturating_add(SEQUENCE_WINDOW) && seq.saturating_add(SEQUENCE_WINDOW) >= h
            }
        }
    }

    /// Probes that never arrived: with `expected`, all that are missing (at the end of the
    /// run too); without, the gaps between the lowest and highest sequence numbers seen.
    pub fn lost(&self) -> u64 {
        let span = match (self.expected, self.first, self.highest) {
            (Some(n), _, _) => n,
            (None, Some(lo), Some(hi)) => hi - lo + 1,
            _ => 0,
        };
        span.saturating_sub(self.valid)
    }

    /// Probes missing from what has arrived so far: the gaps below the highest sequence
    /// number seen (from 0 when `expected` is known). Unlike [`SequenceCheck::lost`], a
    /// stream that has not started yet, or is still arriving, has lost nothing.
    pub fn missing_so_far(&self) -> u64 {
        let span = match (self.expected, self.first, self.highest) {
            (Some(_), _, Some(hi)) => hi + 1,
            (None, Some(lo), Some(hi)) => hi - lo + 1,
            _ => 0,
        };
        span.saturating_sub(self.valid)
    }

    /// Accounts for one received frame.
    pub fn observe(&mut self, frame: &[u8]) {
        self.observe_at(frame, None);
    }

    /// Accounts for one received frame that arrived at `now_ns` (for latency), if given.
    pub fn observe_at(&mut self, frame: &[u8], now_ns: Option<u64>) {
        match check(frame) {
            Probe::Valid { seq, .. } if !self.plausible(seq) => self.foreign += 1,
            Probe::Valid { seq, sent_ns } => {
                self.first = Some(self.first.map_or(seq, |f| f.min(seq)));
                self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
                if let Some(now) = now_ns {
                    let lat = now.saturating_sub(sent_ns);
                    if self.valid == 0 || lat < self.latency_min_ns {
                        self.latency_min_ns = lat;
                    }
                    self.latency_max_ns = self.latency_max_ns.max(lat);
                    self.latency_sum_ns = self.latency_sum_ns.saturating_add(lat);
                }
                self.valid += 1;
                if seq != self.next {
                    self.out_of_order += 1;
                }
                self.next = seq.wrapping_add(1);
            }
            Probe::Corrupt { .. } => self.corrupt += 1,
            Probe::Foreign => self.foreign += 1,
        }
    }

    /// Probes seen, intact or not.
    pub fn probes(&self) -> u64 {
        self.valid + self.corrupt
    }

    /// Mean one-way latency in ns, if any was measured.
    pub fn latency_mean_ns(&self) -> Option<u64> {
        (self.latency_sum_ns > 0 && self.valid > 0).then(|| self.latency_sum_ns / self.valid)
    }

    /// True if exactly `count` probes arrived, all intact and in order.
    pub fn is_perfect(&self, count: u64) -> bool {
        self.valid == count && self.corrupt == 0 && self.out_of_order == 0
    }
}

/// How [`send`] paces a probe stream.
#[derive(Clone, Copy, Debug)]
pub struct SendOptions {
    /// Probes to send.
    pub count: u64,
    /// Bytes per probe.
    pub size: usize,
    /// Probes allowed ahead of what the receiver reported seeing (`u64::MAX`: no limit).
    pub window: u64,
    /// Frames per transmit batch.
    pub batch: usize,
    /// Give up after this long without progress.
    pub idle_timeout: Duration,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            count: 10_000,
            size: 64,
            // Below the 256-slot veth receive ring, so a fast sender cannot overrun it.
            window: 192,
            batch: 64,
            idle_timeout: Duration::from_secs(3),
        }
    }
}

/// Sends `opts.count` probes numbered from 0 through `tx`, never more than `opts.window`
/// ahead of `seen` (which the receiver updates), until done, `stop` is set or nothing moves
/// for `opts.idle_timeout`. Waits for the last completions, then returns how many probes the
/// device completed.
pub fn send(
    tx: &mut Port,
    addrs: &ProbeAddrs,
    opts: &SendOptions,
    seen: &AtomicU64,
    stop: &AtomicBool,
) -> Result<u64> {
    let template = addrs.template(opts.size)?;
    let pace = Pace::Window {
        seen,
        window: opts.window,
    };
    let plan = SendPlan {
        batch: opts.batch,
        idle_timeout: Some(opts.idle_timeout),
        finish_timeout: opts.idle_timeout,
        ..SendPlan::new(Share::all(opts.count), pace)
    };
    Ok(crate::sender::send(tx, &template, &plan, stop, |_, _| {})?.packets)
}

/// How [`receive`] waits for a probe stream: `ReceiveOptions::default().count(n)` and so on.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ReceiveOptions {
    /// Probes expected.
    pub count: u64,
    /// Frames per receive batch.
    pub batch: usize,
    /// Sleep in poll() up to this long when the ring is empty (`None`: spin).
    pub poll_wait: Option<Duration>,
    /// Give up after this long without a packet.
    pub idle_timeout: Duration,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            count: 10_000,
            batch: 64,
            poll_wait: None,
            idle_timeout: Duration::from_secs(3),
        }
    }
}

xskit_os::config_setters!(ReceiveOptions {
    /// Sets the probes expected.
    count: u64,
    /// Sets the frames per receive batch.
    batch: usize,
    /// Sets how long to sleep in poll() when the ring is empty (`None`: spin).
    poll_wait: Option<Duration>,
    /// Sets how long to wait without a packet.
    idle_timeout: Duration,
});

/// What [`receive`] saw.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveReport {
    /// Order and content of the stream.
    pub check: SequenceCheck,
    /// When the last probe arrived, from the start of the call.
    pub last: Option<Duration>,
}

/// Receives probes on `rx` until `opts.count` arrived, nothing arrived for
/// `opts.idle_timeout`, or `stop` is set and the line has been quiet for half a second.
/// Publishes the probes seen so far in `seen` for the sender's window.
pub fn receive(
    rx: &mut Port,
    opts: &ReceiveOptions,
    seen: &AtomicU64,
    stop: &AtomicBool,
) -> Result<ReceiveReport> {
    let umem = rx.umem().clone();
    let start = Instant::now();
    let mut batch = Vec::with_capacity(opts.batch);
    let mut check = SequenceCheck::default();
    let mut last = None;
    let mut last_progress = Instant::now();
    while check.probes() < opts.count {
        let n = match opts.poll_wait {
            Some(wait) => rx.poll_receive(&mut batch, opts.batch, Some(wait))?,
            None => rx.receive(&mut batch, opts.batch)?,
        };
        if n > 0 {
            let now = monotonic_ns();
            for frame in &batch {
                check.observe_at(umem.data(frame), Some(now));
            }
            rx.recycle(&mut batch);
            seen.store(check.probes(), Ordering::Release);
            last = Some(start.elapsed());
            last_progress = Instant::now();
        } else if last_progress.elapsed() > opts.idle_timeout
            || (stop.load(Ordering::Relaxed)
                && last_progress.elapsed() > Duration::from_millis(500))
        {
            break;
        }
    }
    Ok(ReceiveReport { check, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ProbeAddrs = ProbeAddrs {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [198, 51, 100, 1],
        dst_ip: [198, 51, 100, 2],
    };

    #[test]
    fn round_trip_every_size() {
        let mut buf = [0u8; 1600];
        for len in [MIN_LEN, 64, 65, 512, 1500] {
            assert_eq!(write(&mut buf, len, 77, &A), Some(len));
            assert!(
                matches!(check(&buf[..len]), Probe::Valid { seq: 77, .. }),
                "len {len}"
            );
        }
    }

    #[test]
    fn a_stream_not_yet_arrived_has_lost_nothing_so_far() {
        let mut c = SequenceCheck::expecting(10);
        assert_eq!((c.missing_so_far(), c.lost()), (0, 10));
        let mut buf = [0u8; 128];
        for seq in [0, 1, 4] {
            let len = write(&mut buf, 128, seq, &A).unwrap();
            c.observe(&buf[..len]);
        }
        assert_eq!((c.missing_so_far(), c.lost()), (2, 7));
    }

    #[test]
    fn damage_is_detected() {
        let mut buf = [0u8; 128];
        let len = write(&mut buf, 128, 5, &A).unwrap();
        for pos in [20, 40, 60, 127] {
            let mut copy = buf;
            copy[pos] ^= 0x10;
            assert!(
                matches!(check(&copy[..len]), Probe::Corrupt { .. }),
                "flip at {pos}"
            );
        }
        assert_eq!(
            check(&buf[..len - 1]),
            Probe::Corrupt { seq: 5 },
            "truncated"
        );

        assert_eq!(check(&[]), Probe::Foreign);
    }

    #[test]
    fn ipv6_vlan_and_flow_ranges() {
        let ends = Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: "2001:db8::1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            src_port: 1000,
            dst_port: 2000,
        };
        let flows = Flows {
            src_ports: 4,
            dst_ips: 3,
            ..Flows::default()
        };
        let t = Template::new(ends, flows, Some(42), 200).unwrap();
        assert_eq!(t.flows().total(), 12);
        let mut buf = [0u8; 200];
        let mut seen = std::collections::HashSet::new();
        for seq in 0..24 {
            t.write(&mut buf, seq, 5).unwrap();
            assert_eq!(check(&buf), Probe::Valid { seq, sent_ns: 5 });
            let tag = xskit_wire::vlan::Tag::new_checked(&buf[14..]).unwrap();
            assert_eq!(tag.vid(), 42);
            let ip = xskit_wire::ipv6::Packet::new_checked(&buf[18..]).unwrap();
            let u = xskit_wire::udp::Packet::new_checked(ip.payload()).unwrap();
            seen.insert((ip.dst_addr(), u.src_port()));
        }
        assert_eq!(seen.len(), 12, "every flow appears");
    }

    /// 64-byte frames with IPv6 or a VLAN tag are too short for a probe header: they go out
    /// unnumbered, with valid checksums and the tag's priority, and a receiver counts them as
    /// other traffic.
    #[test]
    fn frames_shorter_than_a_probe_go_out_unnumbered() {
        let v6 = Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: "2001:db8::1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            src_port: 9,
            dst_port: 9,
        };
        let v4 = Endpoints {
            src_ip: "198.51.100.1".parse().unwrap(),
            dst_ip: "198.51.100.2".parse().unwrap(),
            ..v6
        };
        for (ends, vlan, l3) in [(v6, None, 14), (v4, Some(7), 18)] {
            let t = Template::new(ends, Flows::default(), vlan, 64).unwrap();
            let t = match vlan {
                Some(_) => t.with_vlan_priority(5).unwrap(),
                None => t,
            };
            assert!(!t.numbered());
            let mut buf = [0u8; 64];
            assert_eq!(t.write(&mut buf, 3, 0), Some(64));
            assert_eq!(check(&buf), Probe::Foreign);
            let udp = if ends.src_ip.is_ipv6() {
                let ip = xskit_wire::ipv6::Packet::new_checked(&buf[l3..]).unwrap();
                let u = xskit_wire::udp::Packet::new_checked(ip.payload()).unwrap();
                assert!(u.verify_checksum(ip.pseudo_header()));
                u.len()
            } else {
                let ip = xskit_wire::ipv4::Packet::new_checked(&buf[l3..]).unwrap();
                assert!(ip.verify_checksum());
                let u = xskit_wire::udp::Packet::new_checked(ip.payload()).unwrap();
                assert!(u.verify_checksum(ip.pseudo_header()));
                u.len()
            };
            assert_eq!(
                usize::from(udp),
                64 - l3 - if ends.src_ip.is_ipv6() { 40 } else { 20 }
            );
            if vlan.is_some() {
                let tag = xskit_wire::vlan::Tag::new_checked(&buf[14..]).unwrap();
                assert_eq!((tag.vid(), buf[14] >> 5), (7, 5));
            }
        }
        // The headers must fit: IPv6 with a tag needs 66 bytes.
        assert!(Template::new(v6, Flows::default(), Some(7), 65).is_err());
        assert!(Template::new(v6, Flows::default(), Some(7), 66).is_ok());
        // A priority needs a tag and fits in 3 bits.
        let untagged = Template::new(v4, Flows::default(), None, 64).unwrap();
        assert!(untagged.numbered());
        assert!(untagged.with_vlan_priority(1).is_err());
        let tagged = Template::new(v4, Flows::default(), Some(7), 64).unwrap();
        assert!(tagged.with_vlan_priority(8).is_err());
    }

    #[test]
    fn template_rejects_bad_options() {
        let v4 = A.template(64).unwrap();
        assert_eq!(v4.len(), 64);
        assert!(A.template(MIN_FRAME_LEN - 1).is_err());
        assert!(A.template(MAX_LEN + 1).is_err());
        let mixed = Endpoints {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src_ip: "198.51.100.1".parse().unwrap(),
            dst_ip: "2001:db8::2".parse().unwrap(),
            src_port: 9,
            dst_port: 9,
        };
        let err = Template::new(mixed, Flows::default(), None, 100)
            .unwrap_err()
            .to_string();
        assert!(err.contains("both be IPv4 or both IPv6"), "{err}");
        let ports = Flows {
            src_ports: 65535,
            ..Flows::default()
        };
        let ends = Endpoints {
            src_ip: "198.51.100.1".parse().unwrap(),
            dst_ip: "198.51.100.2".parse().unwrap(),
            ..mixed
        };
        assert!(
            Template::new(ends, ports, None, 100).is_err(),
            "port range past 65535"
        );
        assert!(
            Template::new(ends, Flows::default(), Some(4095), 100).is_err(),
            "bad VLAN id"
        );
    }

    #[test]
    fn checksums_match_rfc1071_definition() {
        // Verify the UDP checksum independently: the RFC 1071 sum over pseudo-header and
        // datagram, written out here without the wire crate.
        let mut buf = [0u8; 100];
        write(&mut buf, 100, 3, &A).unwrap();
        let udp = &buf[34..];
        let mut words: Vec<u32> = vec![0xc633, 0x6401, 0xc633, 0x6402, 17, udp.len() as u32];
        words.extend(
            udp.chunks(2)
                .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))),
        );
        let mut sum: u32 = words.iter().sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(
            sum, 0xffff,
            "the sum over a datagram with a correct checksum is all ones"
        );
    }

    #[test]
    fn sequence_check_counts_gaps_and_damage() {
        let mut buf = [0u8; 80];
        let mut c = SequenceCheck::default();
        for seq in [0, 1, 2, 4, 5] {
            write(&mut buf, 80, seq, &A).unwrap();
            c.observe(&buf);
        }
        buf[70] ^= 1;
        c.observe(&buf);
        c.observe(&[1, 2, 3]);
        assert_eq!(
            (c.valid, c.out_of_order, c.corrupt, c.foreign),
            (5, 1, 1, 1)
        );
        assert!(!c.is_perfect(5));
    }

    #[test]
    fn forged_sequence_numbers_are_foreign_and_loss_at_the_end_counts() {
        let mut buf = [0u8; 80];
        let mut c = SequenceCheck::default();
        for seq in [0, 1, 2, 999_999_999_999_999_000, 3] {
            write(&mut buf, 80, seq, &A).unwrap();
            c.observe(&buf);
        }
        assert_eq!((c.valid, c.foreign, c.lost()), (4, 1, 0));
        // A stream of 10 of which 4 arrived: 6 lost, the last ones included.
        let mut e = SequenceCheck::expecting(10);
        for seq in [0, 1, 2, 3, 10, 1_000_000] {
            write(&mut buf, 80, seq, &A).unwrap();
            e.observe(&buf);
        }
        assert_eq!((e.valid, e.foreign, e.lost()), (4, 2, 6));
        // A receiver that joined late counts from the first probe it saw.
        let mut late = SequenceCheck::default();
        for seq in [5_000_000, 5_000_002] {
            write(&mut buf, 80, seq, &A).unwrap();
            late.observe(&buf);
        }
        assert_eq!((late.valid, late.lost()), (2, 1));
    }

    #[test]
    fn rejects_impossible_lengths() {
        let mut buf = [0u8; 64];
        assert_eq!(write(&mut buf, 10, 0, &A), None);
        assert_eq!(write(&mut buf, 65, 0, &A), None);
    }
}
