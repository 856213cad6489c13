//! When to wake a transmit ring the kernel did not ask to be woken for.
//!
//! need_wakeup is a hint the driver keeps: a driver may clear the flag and then stop without
//! taking what is on the ring (seen on virtio_net in zero-copy, whose NIC then sends nothing
//! until something wakes it). A ring whose entries have waited [`TX_STALL_AFTER`] with the
//! kernel's consumer index still is woken regardless of the flag.

use std::time::{Duration, Instant};

/// How long entries may sit on a transmit ring, none taken, before it is woken regardless.
pub const TX_STALL_AFTER: Duration = Duration::from_millis(1);

/// What was last seen of a ring: the kernel's consumer index, and when it was first seen
/// there with entries waiting (read only once it has stood still, so a ring the kernel keeps
/// taking from never reads the clock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StallWatch {
    seen: Option<(u32, Option<Instant>)>,
}

impl StallWatch {
    /// True when `pending` entries wait and the consumer index has stood at `consumer` for
    /// [`TX_STALL_AFTER`] since it was first seen still; the wait then starts again, so a ring
    /// that stays stuck is woken once each period.
    pub(crate) fn stalled(
        &mut self,
        pending: u32,
        consumer: u32,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        if pending == 0 {
            self.seen = None;
            return false;
        }
        match self.seen {
            Some((at, still)) if at == consumer => {
                let now = now();
                match still {
                    Some(since) if now.duration_since(since) >= TX_STALL_AFTER => {
                        self.seen = Some((at, Some(now)));
                        true
                    }
                    Some(_) => false,
                    None => {
                        self.seen = Some((at, Some(now)));
                        false
                    }
                }
            }
            _ => {
                self.seen = Some((consumer, None));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, us: u64) -> impl FnOnce() -> Instant {
        move || base + Duration::from_micros(us)
    }

    #[test]
    fn a_ring_whose_consumer_stands_still_is_woken_once_a_period() {
        let (t, mut w) = (Instant::now(), StallWatch::default());
        assert!(!w.stalled(5, 100, at(t, 0)), "first sight");
        assert!(!w.stalled(5, 100, at(t, 10)), "the wait starts");
        assert!(!w.stalled(5, 100, at(t, 1_009)), "not yet a period");
        assert!(w.stalled(5, 100, at(t, 1_010)), "a period still");
        assert!(!w.stalled(5, 100, at(t, 1_500)), "the wait started again");
        assert!(w.stalled(5, 100, at(t, 2_010)), "and a period again");
    }

    #[test]
    fn a_ring_the_kernel_takes_from_or_that_is_empty_is_never_woken() {
        let (t, mut w) = (Instant::now(), StallWatch::default());
        for (i, us) in [0u64, 2_000, 4_000, 6_000].into_iter().enumerate() {
            assert!(!w.stalled(5, 100 + i as u32, at(t, us)), "consumer moving");
        }
        assert!(!w.stalled(5, 103, at(t, 6_500)));
        assert!(!w.stalled(0, 103, at(t, 9_000)), "nothing waits");
        assert!(!w.stalled(5, 103, at(t, 9_100)), "the wait starts over");
        assert!(!w.stalled(5, 103, at(t, 9_200)));
        assert!(w.stalled(5, 103, at(t, 10_200)));
    }

    #[test]
    fn the_clock_is_read_only_while_the_consumer_stands_still() {
        let mut w = StallWatch::default();
        let never = || -> Instant { panic!("clock read") };
        assert!(!w.stalled(0, 1, never));
        assert!(!w.stalled(3, 1, never));
        assert!(!w.stalled(3, 2, never));
        assert!(!w.stalled(3, 3, never));
    }
}
