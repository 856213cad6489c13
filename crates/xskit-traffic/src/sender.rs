//! Sending a template's packets through a port: which packets (a share of a numbered
//! stream), how fast (flat out, at a rate, or within a window of what a receiver has seen),
//! and until when. A packet counts as sent once the device has completed it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xskit::{Frame, Port, Umem};
use xskit_os::monotonic_ns;

use crate::error::{Error, Result};
use crate::packet::Template;

/// The packets one sender sends: `count` of them, numbered `first`, `first + stride`, ...
/// (several senders on several queues share one numbered stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// The first packet's number.
    pub first: u64,
    /// The step between this sender's numbers.
    pub stride: u64,
    /// How many packets (`u64::MAX`: until stopped).
    pub count: u64,
}

impl Share {
    /// Packets 0 to `count - 1`, all of them.
    pub fn all(count: u64) -> Share {
        Share {
            first: 0,
            stride: 1,
            count,
        }
    }

    fn seq(&self, n: u64) -> u64 {
        self.first + n * self.stride
    }
}

/// What holds a sender back.
#[derive(Clone, Copy, Debug)]
pub enum Pace<'a> {
    /// Nothing: as fast as the transmit ring takes packets.
    FlatOut,
    /// This many packets a second on average since the start; between packets the sender
    /// sleeps, leaving its CPU to others.
    Rate(u64),
    /// Never more than `window` packets ahead of `seen`, which the receiver raises.
    Window {
        /// Packets the receiver has seen.
        seen: &'a AtomicU64,
        /// Packets allowed ahead of it.
        window: u64,
    },
}

/// How [`send`] sends.
#[derive(Clone, Copy, Debug)]
pub struct SendPlan<'a> {
    /// Which packets.
    pub share: Share,
    /// How fast.
    pub pace: Pace<'a>,
    /// Packets per transmit batch.
    pub batch: usize,
    /// Stop at this time (a run of a set length).
    pub until: Option<Instant>,
    /// Give up after this long without a packet taken by the ring (a receiver that no
    /// longer opens the window, a stalled device).
    pub idle_timeout: Option<Duration>,
    /// How long to wait for the device's last completions at the end.
    pub finish_timeout: Duration,
}

impl<'a> SendPlan<'a> {
    /// `share`, paced by `pace`, in batches of 64, waiting up to 2 s for the last completions.
    pub fn new(share: Share, pace: Pace<'a>) -> Self {
        SendPlan {
            share,
            pace,
            batch: 64,
            until: None,
            idle_timeout: None,
            finish_timeout: Duration::from_secs(2),
        }
    }
}

/// What [`send`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Packets the device completed.
    pub packets: u64,
    /// Frames still on the transmit ring when the wait for completions ended: the device
    /// did not send them (its link down, a stalled queue).
    pub stuck_frames: usize,
}

/// A paced sender spins only this close to its next packet's time, and sleeps before it.
const PACE_SPIN: Duration = Duration::from_micros(10);

/// How many packets may be built now.
enum Budget {
    Now(u64),
    /// None yet: the next is due in this long.
    Wait(Duration),
}

impl SendPlan<'_> {
    /// The budget after `n` packets, `elapsed` into the run.
    fn budget(&self, n: u64, elapsed: Duration) -> Budget {
        let left = (self.share.count - n).min(self.batch as u64);
        match self.pace {
            Pace::FlatOut => Budget::Now(left),
            Pace::Rate(0) => Budget::Now(left),
            Pace::Rate(rate) => {
                let allowed = (rate as f64 * elapsed.as_secs_f64()) as u64 + 1;
                match allowed.saturating_sub(n) {
                    0 => Budget::Wait(
                        Duration::from_secs_f64(n as f64 / rate as f64).saturating_sub(elapsed),
                    ),
                    due => Budget::Now(left.min(due)),
                }
            }
            Pace::Window { seen, window } => {
                let ahead = n.saturating_sub(seen.load(Ordering::Acquire));
                Budget::Now(left.min(window.saturating_sub(ahead)))
            }
        }
    }
}

/// Sends `plan`'s packets of `t` through `port` until they are sent, `stop` is set, the
/// plan's time is up or nothing moves for its idle timeout; `tick` hears the packets handed
/// to the kernel so far after each transmit. Then waits for the device's completions.
pub fn send(
    port: &mut Port,
    t: &Template,
    plan: &SendPlan<'_>,
    stop: &AtomicBool,
    mut tick: impl FnMut(u64, &Port),
) -> Result<Sent> {
    let umem = port.umem().clone();
    let single_frame = fits_one_frame(port, t);
    let mut pending: Vec<Frame> = Vec::with_capacity(plan.batch * 8);
    let mut scratch = vec![0u8; t.len()];
    // `n` counts this share's packets built; `sent`, those handed to the kernel.
    let (mut n, mut sent) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_progress = start;
    loop {
        let now = Instant::now();
        let over = plan.until.is_some_and(|u| now >= u)
            || plan
                .idle_timeout
                .is_some_and(|idle| now - last_progress > idle);
        if stop.load(Ordering::Relaxed) || over || (pending.is_empty() && n >= plan.share.count) {
            break;
        }
        if pending.is_empty() {
            let budget = match plan.budget(n, now - start) {
                Budget::Now(b) => b,
                Budget::Wait(wait) => {
                    port.complete();
                    // A late wake-up sends what fell due as one batch: the rate holds on
                    // average.
                    if wait > PACE_SPIN {
                        std::thread::sleep(wait - PACE_SPIN);
                    }
                    continue;
                }
            };
            let (stamp, from) = (monotonic_ns(), n);
            let seq = |k: u64| plan.share.seq(from + k);
            n += if single_frame {
                write_batch(port, &umem, t, seq, stamp, budget, &mut pending)?
            } else {
                let mut built = 0;
                while built < budget
                    && write_chain(port, t, seq(built), stamp, &mut scratch, &mut pending)?
                {
                    built += 1;
                }
                built
            };
        }
        let before = pending.len();
        port.send(&mut pending)?;
        if before > pending.len() {
            // Whole packets: a chain is one packet.
            sent = n - count_packets(&pending);
            last_progress = Instant::now();
        } else {
            port.complete();
        }
        tick(sent, port);
    }
    // Unsent frames go back to the pool; a packet counts once the device completed it.
    sent = n - count_packets(&pending);
    port.recycle(&mut pending);
    let stuck_frames = port.finish_sending(plan.finish_timeout)?;
    let frames_per_packet = if single_frame {
        1
    } else {
        t.len().div_ceil(umem.room().max(1))
    };
    Ok(Sent {
        packets: sent.saturating_sub(stuck_frames.div_ceil(frames_per_packet) as u64),
        stuck_frames,
    })
}

/// Whether `t`'s packets fit one of `port`'s frames.
fn fits_one_frame(port: &mut Port, t: &Template) -> bool {
    let mut one = Vec::with_capacity(1);
    port.alloc(&mut one, 1);
    let fits = one
        .first()
        .is_some_and(|f| t.len() <= port.umem().capacity(f));
    port.recycle(&mut one);
    fits
}

/// Up to `budget` single-frame packets (numbered by `seq(k)`) written into frames from the
/// port: one allocation, and one look at the completion ring, per batch. Returns how many.
fn write_batch(
    port: &mut Port,
    umem: &Umem,
    t: &Template,
    seq: impl Fn(u64) -> u64,
    stamp: u64,
    budget: u64,
    out: &mut Vec<Frame>,
) -> Result<u64> {
    let first = out.len();
    port.alloc(out, budget as usize);
    for (k, frame) in out[first..].iter_mut().enumerate() {
        let len = t
            .write(umem.buffer_mut(frame), seq(k as u64), stamp)
            .ok_or(xskit::Error::FrameOverflow {
                len: t.len(),
                capacity: umem.capacity(frame),
            })?;
        umem.set_len(frame, len)?;
    }
    Ok((out.len() - first) as u64)
}

/// Packet `seq` of `t`, larger than a frame, written through `scratch` into a chain of
/// frames from the port. False if the pool had too few frames.
fn write_chain(
    port: &mut Port,
    t: &Template,
    seq: u64,
    stamp: u64,
    scratch: &mut [u8],
    out: &mut Vec<Frame>,
) -> Result<bool> {
    let len = t
        .write(scratch, seq, stamp)
        .ok_or(Error::Xsk(xskit::Error::FrameOverflow {
            len: t.len(),
            capacity: scratch.len(),
        }))?;
    push_bytes(port, &scratch[..len], out)
}

/// Copies `data` into frames from the port: one, or a chain when it is larger than a frame.
/// Returns false, having added nothing, if the pool had too few frames (try again after
/// completions).
pub fn push_bytes(port: &mut Port, data: &[u8], out: &mut Vec<Frame>) -> Result<bool> {
    let umem = port.umem().clone();
    let first = out.len();
    let mut rest = data;
    loop {
        if port.alloc(out, 1) == 0 {
            let mut partial: Vec<Frame> = out.drain(first..).collect();
            port.recycle(&mut partial);
            return Ok(false);
        }
        let frame = out.last_mut().expect("allocated one");
        let take = rest.len().min(umem.capacity(frame));
        umem.write(frame, &rest[..take])?;
        rest = &rest[take..];
        frame.set_continued(!rest.is_empty());
        if rest.is_empty() {
            return Ok(true);
        }
    }
}

/// Packets among `frames`: a chain counts once.
pub fn count_packets(frames: &[Frame]) -> u64 {
    xskit::packets(frames).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(pace: Pace<'_>, count: u64) -> SendPlan<'_> {
        SendPlan::new(Share::all(count), pace)
    }

    fn now(b: Budget) -> Option<u64> {
        match b {
            Budget::Now(n) => Some(n),
            Budget::Wait(_) => None,
        }
    }

    #[test]
    fn flat_out_sends_a_batch_at_a_time_up_to_the_count() {
        let p = plan(Pace::FlatOut, 100);
        assert_eq!(now(p.budget(0, Duration::ZERO)), Some(64));
        assert_eq!(now(p.budget(64, Duration::ZERO)), Some(36));
        assert_eq!(
            now(plan(Pace::Rate(0), 10).budget(0, Duration::ZERO)),
            Some(10)
        );
    }

    #[test]
    fn a_rate_lets_out_what_fell_due_and_says_when_the_next_is() {
        let p = plan(Pace::Rate(1000), 10_000);
        assert_eq!(now(p.budget(0, Duration::ZERO)), Some(1));
        assert_eq!(now(p.budget(1, Duration::from_millis(10))), Some(10));
        assert_eq!(
            now(p.budget(1, Duration::from_secs(1))),
            Some(64),
            "a batch at most"
        );
        match p.budget(11, Duration::from_millis(10)) {
            Budget::Wait(w) => assert_eq!(w, Duration::from_millis(1)),
            Budget::Now(n) => panic!("{n} allowed before they are due"),
        }
    }

    #[test]
    fn a_window_holds_the_sender_to_what_the_receiver_saw() {
        let seen = AtomicU64::new(0);
        let p = plan(
            Pace::Window {
                seen: &seen,
                window: 10,
            },
            1000,
        );
        assert_eq!(now(p.budget(0, Duration::ZERO)), Some(10));
        assert_eq!(now(p.budget(10, Duration::ZERO)), Some(0));
        seen.store(4, Ordering::Release);
        assert_eq!(now(p.budget(10, Duration::ZERO)), Some(4));
    }

    #[test]
    fn a_shares_numbers_step_by_its_stride() {
        let s = Share {
            first: 1,
            stride: 3,
            count: 5,
        };
        assert_eq!(
            (0..5).map(|n| s.seq(n)).collect::<Vec<_>>(),
            [1, 4, 7, 10, 13]
        );
    }
}
