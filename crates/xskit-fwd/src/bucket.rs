//! A rate limit's token bucket as plain arithmetic, in the units the XDP filter and user
//! space share, so that both police alike.

use std::time::Duration;

use crate::abi::{COST_SHIFT, TICK_SHIFT};

/// A rate as a token bucket's arithmetic, in the units the XDP filter and user space share:
/// time in ticks of 2^-[`TICK_SHIFT`] ns of CLOCK_MONOTONIC, a cost per unit (a packet, or a
/// bit of frame) in ticks with [`COST_SHIFT`] fraction bits. The bucket is a GCRA (the
/// "virtual scheduling" form): one theoretical arrival time is all its state.
/// `bpf/xdp_filter.c`'s `admit` computes exactly [`Bucket::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Ticks a unit costs, with COST_SHIFT fraction bits.
    pub cost: u64,
    /// The most the arrival time may run ahead of now: the burst's worth of ticks.
    pub tolerance: u64,
    /// The rate counts bits of frame, not packets.
    pub bits: bool,
}

const TICKS_PER_S: u128 = 1_000_000_000 << TICK_SHIFT;

impl Bucket {
    /// The bucket of a rate of `per_second` packets, or bits of frame with `bits`, and a
    /// burst of `burst` packets, or bytes with `bits`.
    pub fn new(per_second: u64, burst: u64, bits: bool) -> Self {
        let burst_units = if bits { burst.saturating_mul(8) } else { burst };
        let per_second = u128::from(per_second.max(1));
        let cap = u128::from(u64::MAX / 4);
        Bucket {
            cost: ((TICKS_PER_S << COST_SHIFT) / per_second).min(cap) as u64,
            tolerance: (u128::from(burst_units) * TICKS_PER_S / per_second).min(cap) as u64,
            bits,
        }
    }

    /// The ticks a frame of `frame_len` bytes costs, to the nearest tick (1/32 ns at most
    /// off): split so that no product overflows (units are at most 2^19 bits, the whole part
    /// of a cost at most 2^34 ticks).
    pub fn cost(&self, frame_len: u64) -> u64 {
        let units = if self.bits { frame_len * 8 } else { 1 };
        let fraction = (1u64 << COST_SHIFT) - 1;
        let half = 1u64 << (COST_SHIFT - 1);
        units * (self.cost >> COST_SHIFT) + ((units * (self.cost & fraction) + half) >> COST_SHIFT)
    }

    /// The arrival time after a frame of `frame_len` bytes at `now` (ticks), if the bucket
    /// holds its tokens; `None` if it is over the rate.
    pub fn admit(&self, tat: u64, now: u64, frame_len: u64) -> Option<u64> {
        let cost = self.cost(frame_len);
        let next = tat.max(now).saturating_add(cost);
        (next - now <= self.tolerance.max(cost)).then_some(next)
    }
}

/// The ticks of a time in nanoseconds.
pub fn ticks(now_ns: u64) -> u64 {
    now_ns.saturating_mul(1 << TICK_SHIFT)
}

/// A rate limit with a bucket for each source prefix instead of one for the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerSource {
    /// The prefix length IPv4 sources are grouped by (32: each address).
    pub v4_len: u8,
    /// The prefix length IPv6 sources are grouped by (64 unless `per` names a longer one: an
    /// IPv6 host usually holds a whole /64).
    pub v6_len: u8,
    /// How long a source that went over its rate is dropped whole, if at all.
    pub block: Option<Duration>,
}

/// A rate limit as the filter keeps it: its bucket, for the rule or for each source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The rate's bucket.
    pub bucket: Bucket,
    /// Kept per source, and how.
    pub per_source: Option<PerSource>,
}
