//! The supervisor's loop while the workers run, over a narrow seam: the bonds' events, a
//! look for vanished devices and detached programs and at the links every [`WATCH_EVERY`],
//! the counters every interval; until a stop, a worker's failure, or an error. The forwarder
//! implements [`Supervised`] over the kernel; the tests drive the loop on a virtual clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::counts::Counters;
use crate::error::{Error, Result};
use crate::worker::Clock;

/// How often a running forwarder checks that its interfaces and programs are still there.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The longest the loop waits on the bonds' events before it looks at the clock again.
const BOND_WAIT: Duration = Duration::from_millis(10);

/// What the loop asks of the forwarder.
pub(crate) trait Supervised {
    /// Waits up to `timeout` for the bonds' link changes and acts on them (a plain wait
    /// without bonds).
    fn watch_bonds(&mut self, timeout: Duration) -> Result<()>;
    /// A device deleted or moved, or a program detached from outside, in words.
    fn lost(&self) -> Option<String>;
    /// Notes each link that went down or came up.
    fn watch_links(&mut self);
    /// The counters now.
    fn counters(&self) -> Result<Counters>;
    /// Whether it has handed its sockets to a successor: the loop ends.
    fn handed_over(&self) -> bool {
        false
    }
}

/// How the loop ended early: the error it stopped on, or what vanished.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    pub(crate) error: Option<Error>,
    pub(crate) lost: Option<String>,
}

/// Runs the loop until `stop` or `failed` is set, or something goes wrong.
pub(crate) fn supervise<S: Supervised, C: Clock>(
    forwarder: &mut S,
    clock: &C,
    stop: &AtomicBool,
    failed: &AtomicBool,
    interval: Duration,
    on_tick: &mut impl FnMut(&Counters),
) -> Ended {
    let ns = |d: Duration| d.as_nanos() as u64;
    let start = clock.now_ns();
    let mut next_tick = start + ns(interval);
    let mut next_watch = start + ns(WATCH_EVERY);
    while !stop.load(Ordering::Relaxed)
        && !failed.load(Ordering::Relaxed)
        && !forwarder.handed_over()
    {
        // The wait is on the bonds' netlink socket, not a sleep.
        if let Err(e) = forwarder.watch_bonds(BOND_WAIT) {
            return Ended {
                error: Some(e),
                lost: None,
            };
        }
        let now = clock.now_ns();
        if now >= next_watch {
            // The workers may see nothing wrong (an idle socket), so look.
            if let Some(lost) = forwarder.lost() {
                return Ended {
                    error: None,
                    lost: Some(lost),
                };
            }
            forwarder.watch_links();
            next_watch = now + ns(WATCH_EVERY);
        }
        if now >= next_tick {
            match forwarder.counters() {
                Ok(c) => on_tick(&c),
                Err(e) => {
                    return Ended {
                        error: Some(e),
                        lost: None,
                    }
                }
            }
            next_tick += ns(interval);
        }
    }
    Ended::default()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    const MS: u64 = 1_000_000;

    /// Virtual time, shared by the fake forwarder and the loop's clock.
    #[derive(Clone, Default)]
    struct Virtual(Rc<Cell<u64>>);

    impl Clock for Virtual {
        fn now_ns(&self) -> u64 {
            self.0.get()
        }
    }

    /// A forwarder on virtual time: waiting on the bonds moves the clock on; things go wrong
    /// at set times.
    #[derive(Default)]
    struct Fake {
        time: Virtual,
        link_looks: usize,
        counter_reads: Cell<usize>,
        lost_at: Option<u64>,
        bonds_fail_at: Option<u64>,
        counters_fail_at: Option<u64>,
    }

    impl Fake {
        fn now(&self) -> u64 {
            self.time.now_ns()
        }
    }

    impl Supervised for Fake {
        fn watch_bonds(&mut self, timeout: Duration) -> Result<()> {
            self.time.0.set(self.now() + timeout.as_nanos() as u64);
            match self.bonds_fail_at {
                Some(t) if self.now() >= t => Err(Error::FramesTaken),
                _ => Ok(()),
            }
        }
        fn lost(&self) -> Option<String> {
            self.lost_at
                .filter(|&t| self.now() >= t)
                .map(|_| "xsk-a0 was deleted".to_string())
        }
        fn watch_links(&mut self) {
            self.link_looks += 1;
        }
        fn counters(&self) -> Result<Counters> {
            self.counter_reads.set(self.counter_reads.get() + 1);
            match self.counters_fail_at {
                Some(t) if self.now() >= t => Err(Error::FramesTaken),
                _ => Ok(Counters::default()),
            }
        }
    }

    /// Runs the loop with a 1 s interval until `ticks` ticks, or until it ends by itself;
    /// returns how it ended and how many ticks it made.
    fn run(fake: &mut Fake, ticks: usize, failed: bool) -> (Ended, usize) {
        let (stop, failed) = (AtomicBool::new(false), AtomicBool::new(failed));
        let clock = fake.time.clone();
        let mut seen = 0;
        let ended = supervise(
            fake,
            &clock,
            &stop,
            &failed,
            Duration::from_secs(1),
            &mut |_| {
                seen += 1;
                if seen == ticks {
                    stop.store(true, Ordering::Relaxed);
                }
            },
        );
        (ended, seen)
    }

    #[test]
    fn counters_each_interval_and_the_links_every_watch() {
        let mut fake = Fake::default();
        let (ended, ticks) = run(&mut fake, 3, false);
        assert!(ended.error.is_none() && ended.lost.is_none());
        assert_eq!(ticks, 3);
        assert_eq!(fake.now(), 3000 * MS, "the third tick at 3 s");
        assert_eq!(fake.link_looks, 30, "every 100 ms");
        assert_eq!(fake.counter_reads.get(), 3);
    }

    #[test]
    fn a_vanished_device_ends_the_loop_at_the_next_look() {
        let mut fake = Fake {
            lost_at: Some(1250 * MS),
            ..Fake::default()
        };
        let (ended, ticks) = run(&mut fake, 10, false);
        assert_eq!(ended.lost.as_deref(), Some("xsk-a0 was deleted"));
        assert_eq!(ticks, 1);
        assert_eq!(fake.now(), 1300 * MS, "seen within one watch period");
    }

    #[test]
    fn a_failed_read_or_bond_event_ends_the_loop_with_its_error() {
        let mut fake = Fake {
            counters_fail_at: Some(2000 * MS),
            ..Fake::default()
        };
        let (ended, ticks) = run(&mut fake, 10, false);
        assert!(matches!(ended.error, Some(Error::FramesTaken)));
        assert_eq!(ticks, 1);
        let mut fake = Fake {
            bonds_fail_at: Some(500 * MS),
            ..Fake::default()
        };
        let (ended, ticks) = run(&mut fake, 10, false);
        assert!(ended.error.is_some());
        assert_eq!((ticks, fake.now()), (0, 500 * MS));
    }

    #[test]
    fn a_failed_worker_ends_the_loop_before_anything_is_read() {
        let mut fake = Fake::default();
        let (ended, ticks) = run(&mut fake, 10, true);
        assert!(ended.error.is_none() && ended.lost.is_none());
        assert_eq!((ticks, fake.link_looks, fake.now()), (0, 0, 0));
    }
}
