//! Sequence-numbered probe frames: valid Ethernet/IPv4/UDP packets whose payload carries a magic
//! number, a sequence number and a pattern derived from it, so a receiver can check order and
//! content of every packet. Used by the demo, the tests and the benchmarks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::port::Port;

/// Marks xskit probe payloads ("XSKP").
pub const MAGIC: u32 = 0x5853_4b50;
/// Ethernet + IPv4 + UDP header bytes.
pub const HEADER_LEN: usize = 14 + 20 + 8;
/// The smallest probe: headers, magic and sequence number.
pub const MIN_LEN: usize = HEADER_LEN + 12;
/// The UDP port probes are sent to and from.
pub const PORT: u16 = 9;

/// Addresses of a probe stream.
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

/// RFC 1071 one's-complement sum of `data`, folded to 16 bits (not inverted).
pub fn ones_complement_sum(data: &[u8], mut sum: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn pattern_byte(seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_mul(31).wrapping_add(i as u8)
}

/// Writes a probe of `len` bytes (at least [`MIN_LEN`]) with sequence number `seq` into `buf`;
/// returns the length written, or `None` if `buf` is too small or `len` too short.
pub fn write(buf: &mut [u8], len: usize, seq: u64, a: &ProbeAddrs) -> Option<usize> {
    if len < MIN_LEN || buf.len() < len || len - 14 > usize::from(u16::MAX) {
        return None;
    }
    let frame = &mut buf[..len];
    frame[0..6].copy_from_slice(&a.dst_mac);
    frame[6..12].copy_from_slice(&a.src_mac);
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    let ip = &mut frame[14..34];
    ip.copy_from_slice(&[
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[12..16].copy_from_slice(&a.src_ip);
    ip[16..20].copy_from_slice(&a.dst_ip);
    let csum = !ones_complement_sum(ip, 0);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    let udp_len = ip_len - 20;
    {
        let udp = &mut frame[34..42];
        udp[0..2].copy_from_slice(&PORT.to_be_bytes());
        udp[2..4].copy_from_slice(&PORT.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
    }
    let payload = &mut frame[42..];
    payload[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    payload[4..12].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in payload[12..].iter_mut().enumerate() {
        *b = pattern_byte(seq, i);
    }
    let sum = udp_pseudo_sum(&a.src_ip, &a.dst_ip, udp_len);
    let csum = !ones_complement_sum(&frame[34..], sum);
    let csum = if csum == 0 { 0xffff } else { csum };
    frame[40..42].copy_from_slice(&csum.to_be_bytes());
    Some(len)
}

fn udp_pseudo_sum(src: &[u8; 4], dst: &[u8; 4], udp_len: u16) -> u32 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(src);
    pseudo[4..8].copy_from_slice(dst);
    pseudo[9] = 17;
    pseudo[10..12].copy_from_slice(&udp_len.to_be_bytes());
    u32::from(ones_complement_sum(&pseudo, 0))
}

/// What a receiver learns from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A probe whose headers, checksums and payload are all intact.
    Valid {
        /// Its sequence number.
        seq: u64,
    },
    /// A probe that arrived damaged (bad checksum, length or pattern).
    Corrupt {
        /// Its sequence number, as read.
        seq: u64,
    },
    /// Not a probe (other traffic).
    Foreign,
}

/// Classifies a received frame. Never panics, whatever the bytes.
pub fn check(frame: &[u8]) -> Probe {
    if frame.len() < MIN_LEN
        || frame[12..14] != [0x08, 0x00]
        || frame[14] != 0x45
        || frame[23] != 17
        || frame[42..46] != MAGIC.to_be_bytes()
    {
        return Probe::Foreign;
    }
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(&frame[46..54]);
    let seq = u64::from_be_bytes(seq_bytes);
    let ip_len = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let udp_len = u16::from_be_bytes([frame[38], frame[39]]);
    let src: [u8; 4] = [frame[26], frame[27], frame[28], frame[29]];
    let dst: [u8; 4] = [frame[30], frame[31], frame[32], frame[33]];
    let ok = ip_len + 14 == frame.len()
        && usize::from(udp_len) + 34 == frame.len()
        && ones_complement_sum(&frame[14..34], 0) == 0xffff
        && ones_complement_sum(&frame[34..], udp_pseudo_sum(&src, &dst, udp_len)) == 0xffff
        && frame[54..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_byte(seq, i));
    if ok {
        Probe::Valid { seq }
    } else {
        Probe::Corrupt { seq }
    }
}

/// Counts what a receiver saw of a probe stream that should arrive as 0, 1, 2, ...
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequenceCheck {
    /// The sequence number expected next.
    pub next: u64,
    /// Intact probes.
    pub valid: u64,
    /// Damaged probes.
    pub corrupt: u64,
    /// Probes whose sequence number was not the one expected (a gap, a repeat or a reordering).
    pub out_of_order: u64,
    /// Frames that were not probes.
    pub foreign: u64,
}

impl SequenceCheck {
    /// Accounts for one received frame.
    pub fn observe(&mut self, frame: &[u8]) {
        match check(frame) {
            Probe::Valid { seq } => {
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
/// ahead of `seen` (which the receiver updates), until done or `stop` is set. Waits for the
/// last completions, then returns how many probes were handed to the kernel.
pub fn send(
    tx: &mut Port,
    addrs: &ProbeAddrs,
    opts: &SendOptions,
    seen: &AtomicU64,
    stop: &AtomicBool,
) -> Result<u64> {
    let umem = tx.umem().clone();
    let mut batch = Vec::with_capacity(opts.batch);
    let mut seq = 0u64;
    let mut last_progress = Instant::now();
    while (seq < opts.count || !batch.is_empty()) && !stop.load(Ordering::Relaxed) {
        if batch.is_empty() {
            let ahead = seq.saturating_sub(seen.load(Ordering::Acquire));
            let room = opts
                .window
                .saturating_sub(ahead)
                .min(opts.count - seq)
                .min(opts.batch as u64);
            tx.alloc(&mut batch, room as usize);
            for frame in batch.iter_mut() {
                let len = write(umem.buffer_mut(frame), opts.size, seq, addrs).ok_or(
                    Error::FrameOverflow {
                        len: opts.size,
                        capacity: umem.capacity(frame),
                    },
                )?;
                umem.set_len(frame, len)?;
                seq += 1;
            }
        }
        if tx.send(&mut batch)? > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > opts.idle_timeout {
            break;
        }
    }
    let sent = seq - batch.len() as u64;
    tx.recycle(&mut batch);
    let deadline = Instant::now() + opts.idle_timeout;
    while tx.tx_in_flight() > 0 && Instant::now() < deadline {
        tx.complete();
        if let Some(ring) = tx.socket().tx() {
            ring.wakeup_if_needed()?;
        }
    }
    Ok(sent)
}

/// How [`receive`] waits for a probe stream.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveOptions {
    /// Probes expected.
    pub count: u64,
    /// Frames per receive batch.
    pub batch: usize,
    /// Sleep in poll() up to this many ms when the ring is empty (None: spin).
    pub poll_ms: Option<i32>,
    /// Give up after this long without a packet.
    pub idle_timeout: Duration,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            count: 10_000,
            batch: 64,
            poll_ms: None,
            idle_timeout: Duration::from_secs(3),
        }
    }
}

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
        let n = match opts.poll_ms {
            Some(ms) => rx.poll_receive(&mut batch, opts.batch, ms)?,
            None => rx.receive(&mut batch, opts.batch)?,
        };
        if n > 0 {
            for frame in &batch {
                check.observe(umem.data(frame));
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
            assert_eq!(check(&buf[..len]), Probe::Valid { seq: 77 }, "len {len}");
        }
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
        assert_eq!(check(&buf[..20]), Probe::Foreign);
        assert_eq!(check(&[]), Probe::Foreign);
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 section 3: the sum of 0001 f203 f4f5 f6f7 is 0xddf2.
        assert_eq!(
            ones_complement_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            0xddf2
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
    fn rejects_impossible_lengths() {
        let mut buf = [0u8; 64];
        assert_eq!(write(&mut buf, 10, 0, &A), None);
        assert_eq!(write(&mut buf, 65, 0, &A), None);
    }
}
