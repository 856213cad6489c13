//! Token-bucket rate limits, one bucket per rule shared by every worker.
use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::HashMap;
use std::sync::Mutex;

use xskit_os::sync::LockUnpoisoned;

use super::PacketKey;
use crate::bucket::{ticks, Bucket, PerSource};

/// The unit of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateUnit {
    /// Packets per second; the burst is in packets.
    Packets,
    /// Bits per second of Ethernet frame (header and payload, no FCS); the burst is in bytes.
    Bits,
}

/// A token-bucket rate: `per_second` units refilled each second, up to `burst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Packets or bits per second.
    pub per_second: u64,
    /// Packets or bits.
    pub unit: RateUnit,
    /// What may pass at once after a quiet time: packets, or bytes for bit rates.
    pub burst: u64,
}

impl Rate {
    /// Parses `"1000pps"`, `"10kpps"`, `"2Mpps"`, `"800bps"`, `"10kbps"`, `"5Mbps"`, `"1Gbps"`
    /// (SI multiples; bits, not bytes).
    pub fn parse(s: &str) -> Result<(u64, RateUnit), String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("rate {s:?} must start with a number, as in \"10kpps\""))?;
        let lower = unit.trim().to_ascii_lowercase();
        let (mult, unit) = match lower.as_str() {
            "pps" => (1.0, RateUnit::Packets),
            "kpps" => (1e3, RateUnit::Packets),
            "mpps" => (1e6, RateUnit::Packets),
            "bps" | "bit" => (1.0, RateUnit::Bits),
            "kbps" | "kbit" => (1e3, RateUnit::Bits),
            "mbps" | "mbit" => (1e6, RateUnit::Bits),
            "gbps" | "gbit" => (1e9, RateUnit::Bits),
            _ => {
                return Err(format!(
                    "rate {s:?} has unit {unit:?}; use pps, kpps, Mpps, bps, kbps, Mbps or Gbps"
                ))
            }
        };
        let per_second = (value * mult).round();
        if !(1.0..=1e12).contains(&per_second) {
            return Err(format!("rate {s:?} must be at least 1 and at most 1 Tbps"));
        }
        Ok((per_second as u64, unit))
    }

    /// A limiter for this rate.
    pub fn limiter(&self) -> RateLimiter {
        RateLimiter::new(*self)
    }

    /// This rate's bucket, as the XDP filter and user space keep it.
    pub fn bucket(&self) -> Bucket {
        Bucket::new(self.per_second, self.burst, self.unit == RateUnit::Bits)
    }
}

/// A [`Bucket`] user space keeps: one atomic arrival time, so that workers on several queues
/// share one limit without a lock.
///
/// The limit is one bucket for all queues, as a rule says, so its cache line is shared by
/// the workers whose traffic hits the rule; a bucket per worker would give each queue the
/// whole rate (or a fixed share of it), which is another limit. Each limiter has a cache
/// line of its own, so rules never slow each other down.
#[derive(Debug)]
#[repr(align(64))]
pub struct RateLimiter {
    /// The arrival time, in ticks.
    tat: AtomicU64,
    bucket: Bucket,
    rate: Rate,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(rate: Rate) -> Self {
        RateLimiter {
            tat: AtomicU64::new(0),
            bucket: rate.bucket(),
            rate,
        }
    }

    /// The rate this bucket keeps.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes the tokens for a frame of `frame_len` bytes at `now_ns` (CLOCK_MONOTONIC, or
    /// any clock that only moves forward: a full bucket at any time after 0); false if the
    /// bucket does not hold them (the frame is over the rate).
    pub fn allow(&self, now_ns: u64, frame_len: usize) -> bool {
        let now = ticks(now_ns);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let Some(next) = self.bucket.admit(tat, now, frame_len as u64) else {
                return false;
            };
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// A rate limit kept per source in user space, as the XDP filter keeps it, for the packets
/// the filter sends up undecided (IPv6 with extension headers) and for a forwarder without
/// the filter: a bucket per source prefix in a table of at most `capacity` sources, a source
/// over its rate blocked for the limit's `block`. When the table is full, sources whose
/// buckets are full again (the same as absent) give way; failing that, the packet is over
/// the rate (a limit fails closed).
#[derive(Debug)]
pub struct SourceLimiter {
    bucket: Bucket,
    per: PerSource,
    capacity: usize,
    table: Mutex<SourceTable>,
}

#[derive(Debug, Default)]
struct SourceTable {
    /// Each source's arrival time, in ticks.
    tats: HashMap<(u8, u128), u64>,
    /// Each blocked source's end of block, in nanoseconds.
    blocked: HashMap<(u8, u128), u64>,
}

impl SourceLimiter {
    /// A limit of `rate` per source as `per` groups them, for at most `capacity` sources.
    pub fn new(rate: Rate, per: PerSource, capacity: usize) -> Self {
        SourceLimiter {
            bucket: rate.bucket(),
            per,
            capacity: capacity.max(1),
            table: Mutex::new(SourceTable::default()),
        }
    }

    /// The source prefix of `key` as this limit groups sources: family and masked address.
    fn source(&self, key: &PacketKey) -> (u8, u128) {
        let (addr, bits) = match key.family {
            4 => (
                u128::from(u32::from_be_bytes([
                    key.src[0], key.src[1], key.src[2], key.src[3],
                ])) << 96,
                self.per.v4_len,
            ),
            6 => (u128::from_be_bytes(key.src), self.per.v6_len),
            _ => (0, 0),
        };
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(bits.min(128)))
        };
        (key.family, addr & mask)
    }

    /// Takes the tokens of `key`'s source for a frame of `frame_len` bytes at `now_ns`; false
    /// if it is over its rate or blocked.
    pub fn allow(&self, key: &PacketKey, now_ns: u64, frame_len: usize) -> bool {
        let source = self.source(key);
        let mut t = self.table.lock_unpoisoned();
        match t.blocked.get(&source) {
            Some(&until) if until > now_ns => return false,
            Some(_) => {
                t.blocked.remove(&source);
            }
            None => {}
        }
        let now = ticks(now_ns);
        if !t.tats.contains_key(&source) && t.tats.len() >= self.capacity {
            t.tats.retain(|_, tat| *tat > now);
            if t.tats.len() >= self.capacity {
                return false;
            }
        }
        let tat = t.tats.entry(source).or_insert(0);
        if let Some(next) = self.bucket.admit(*tat, now, frame_len as u64) {
            *tat = next;
            return true;
        }
        if let Some(block) = self.per.block {
            if t.blocked.len() >= self.capacity {
                t.blocked.retain(|_, until| *until > now_ns);
            }
            // A full table refuses the block, as the kernel's does: the source is limited.
            if t.blocked.len() < self.capacity {
                let until = u64::try_from(block.as_nanos()).unwrap_or(u64::MAX);
                t.blocked.insert(source, now_ns.saturating_add(until));
            }
        }
        false
    }

    /// The limit this keeps.
    fn limit(&self) -> (Bucket, PerSource) {
        (self.bucket, self.per)
    }
}

/// A rule's rate limit in user space: one bucket for the rule, or one for each source.
#[derive(Debug)]
pub enum Limiter {
    /// One bucket for the rule.
    Rule(RateLimiter),
    /// A bucket for each source.
    Source(SourceLimiter),
}

impl Limiter {
    /// The limit of `rule`, if it has one, with room for `sources` sources when it is kept
    /// per source.
    pub fn of(rule: &super::RuleSpec, sources: usize) -> Option<Limiter> {
        let rate = rule.rate?;
        Some(match rule.per_source {
            None => Limiter::Rule(RateLimiter::new(rate)),
            Some(per) => Limiter::Source(SourceLimiter::new(rate, per, sources)),
        })
    }

    /// True if this keeps the limit `rule` asks for (its state may then carry over).
    pub fn keeps(&self, rule: &super::RuleSpec) -> bool {
        match (self, rule.rate, rule.per_source) {
            (Limiter::Rule(l), Some(rate), None) => l.rate() == rate,
            (Limiter::Source(l), Some(rate), Some(per)) => l.limit() == (rate.bucket(), per),
            _ => false,
        }
    }

    /// Takes the tokens for a frame of `frame_len` bytes of packet `key` at `now_ns`; false
    /// if it is over the rate (or its source is, or is blocked). A packet without a key
    /// (unclassifiable) never reaches a rule's limit.
    pub fn allow(&self, key: Option<&PacketKey>, now_ns: u64, frame_len: usize) -> bool {
        match (self, key) {
            (Limiter::Rule(l), _) => l.allow(now_ns, frame_len),
            (Limiter::Source(l), Some(k)) => l.allow(k, now_ns, frame_len),
            (Limiter::Source(_), None) => false,
        }
    }
}
