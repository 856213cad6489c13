//! When to wake a transmit ring the kernel did not ask to be woken for.
//!
//! need_wakeup is a hint the driver keeps: a driver may clear the flag and then stop without
//! taking what is on the ring, or take it and never complete it (both seen on virtio_net in
//! zero-copy, whose NIC then sends nothing until something wakes it). A ring whose frames
//! have waited [`TX_STALL_AFTER`] with no progress (the kernel's consumer index still, and,
//! where the caller counts them, no completion) is woken regardless of the flag.

use std::time::{Duration, Instant};

/// How long entries may sit on a transmit ring, none taken, before it is woken regardless.
pub const TX_STALL_AFTER: Duration = Duration::from_millis(1);

/// The kernel's progress on a ring as last seen: its consumer index, and the completions
/// the caller counted (0 where it counts none).
pub(crate) type Progress = (u32, u64);

/// What was last seen of a ring: the kernel's progress, and when it was first seen there with
/// frames waiting (read only once it has stood still, so a ring the kernel keeps taking from
/// never reads the clock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StallWatch {
    seen: Option<(Progress, Option<Instant>)>,
}

impl StallWatch {
    /// True when `waiting` frames wait and the progress has stood at `progress` for
    /// [`TX_STALL_AFTER`] since it was first seen still; the wait then starts again, so a ring
    /// that stays stuck is woken once each period.
    pub(crate) fn stalled(
        &mut self,
        waiting: usize,
        progress: Progress,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        if waiting == 0 {
            self.seen = None;
            return false;
        }
        match self.seen {
            Some((at, still)) if at == progress => {
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
                self.seen = Some((progress, None));
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
        assert!(!w.stalled(5, (100, 0), at(t, 0)), "first sight");
        assert!(!w.stalled(5, (100, 0), at(t, 10)), "the wait starts");
        assert!(!w.stalled(5, (100, 0), at(t, 1_009)), "not yet a period");
        assert!(w.stalled(5, (100, 0), at(t, 1_010)), "a period still");
        assert!(
            !w.stalled(5, (100, 0), at(t, 1_500)),
            "the wait started again"
        );
        assert!(w.stalled(5, (100, 0), at(t, 2_010)), "and a period again");
    }

    #[test]
    fn a_ring_the_kernel_takes_from_or_that_is_empty_is_never_woken() {
        let (t, mut w) = (Instant::now(), StallWatch::default());
        for (i, us) in [0u64, 2_000, 4_000, 6_000].into_iter().enumerate() {
            assert!(
                !w.stalled(5, (100 + i as u32, 0), at(t, us)),
                "consumer moving"
            );
        }
        assert!(!w.stalled(5, (103, 0), at(t, 6_500)));
        assert!(!w.stalled(0, (103, 0), at(t, 9_000)), "nothing waits");
        assert!(
            !w.stalled(5, (103, 0), at(t, 9_100)),
            "the wait starts over"
        );
        assert!(!w.stalled(5, (103, 0), at(t, 9_200)));
        assert!(w.stalled(5, (103, 0), at(t, 10_200)));
    }

    #[test]
    fn a_completion_is_progress_too() {
        let (t, mut w) = (Instant::now(), StallWatch::default());
        assert!(!w.stalled(5, (100, 0), at(t, 0)));
        assert!(!w.stalled(5, (100, 0), at(t, 10)));
        assert!(!w.stalled(5, (100, 1), at(t, 2_000)), "one completed");
        assert!(!w.stalled(4, (100, 1), at(t, 2_100)));
        assert!(
            w.stalled(4, (100, 1), at(t, 3_100)),
            "then none for a period"
        );
    }

    #[test]
    fn the_clock_is_read_only_while_the_consumer_stands_still() {
        let mut w = StallWatch::default();
        let never = || -> Instant { panic!("clock read") };
        assert!(!w.stalled(0, (1, 0), never));
        assert!(!w.stalled(3, (1, 0), never));
        assert!(!w.stalled(3, (2, 0), never));
        assert!(!w.stalled(3, (3, 0), never));
    }
}
