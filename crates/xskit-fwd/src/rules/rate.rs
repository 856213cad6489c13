//! Token-bucket rate limits, one bucket per rule shared by every worker.
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// A token bucket as a GCRA (the "virtual scheduling" form): one atomic theoretical arrival
/// time, so workers on several queues share one limit without a lock.
///
/// The limit is one bucket for all queues, as a rule says, so its cache line is shared by
/// the workers whose traffic hits the rule; a bucket per worker would give each queue the
/// whole rate (or a fixed share of it), which is another limit. Each limiter has a cache
/// line of its own, so rules never slow each other down.
#[derive(Debug)]
#[repr(align(64))]
pub struct RateLimiter {
    /// The time (picoseconds of the caller's clock) at which the bucket is full again.
    tat_ps: AtomicU64,
    per_second: u64,
    unit: RateUnit,
    /// The most the arrival time may run ahead of now: the burst's worth of time.
    tolerance_ps: u64,
    burst: u64,
}

const PS_PER_S: u128 = 1_000_000_000_000;

impl RateLimiter {
    /// A full bucket.
    pub fn new(rate: Rate) -> Self {
        let burst_units = match rate.unit {
            RateUnit::Packets => rate.burst,
            RateUnit::Bits => rate.burst.saturating_mul(8),
        };
        RateLimiter {
            tat_ps: AtomicU64::new(0),
            per_second: rate.per_second,
            unit: rate.unit,
            burst: rate.burst,
            tolerance_ps: (u128::from(burst_units) * PS_PER_S / u128::from(rate.per_second))
                .min(u128::from(u64::MAX / 4)) as u64,
        }
    }

    /// The rate this bucket keeps.
    pub fn rate(&self) -> Rate {
        Rate {
            per_second: self.per_second,
            unit: self.unit,
            burst: self.burst,
        }
    }

    /// Takes the tokens for a frame of `frame_len` bytes at time `now_ps` (picoseconds of any
    /// clock that only moves forward: a full bucket at any time after 0); false if the bucket
    /// does not hold them (the frame is over the rate).
    pub fn allow(&self, now_ps: u64, frame_len: usize) -> bool {
        let units = match self.unit {
            RateUnit::Packets => 1u128,
            RateUnit::Bits => frame_len as u128 * 8,
        };
        let cost =
            (units * PS_PER_S / u128::from(self.per_second)).min(u128::from(u64::MAX / 4)) as u64;
        let mut tat = self.tat_ps.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now_ps) + cost;
            if next - now_ps > self.tolerance_ps.max(cost) {
                return false;
            }
            match self
                .tat_ps
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}
