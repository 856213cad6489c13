//! Counters the workers publish: each cell has one writer, its worker, and any number of
//! readers (the forwarder's reports). A port's and a rule's user-space counters are defined
//! once, below: the cells the worker bumps, the counts the report sums and serializes (their
//! JSON names, and through them the metrics' names), and which of them are drops and under
//! what name.

use std::ops::AddAssign;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Adds `n` to a counter that only the calling worker writes (other threads only read it):
/// a relaxed load and store, not a locked read-modify-write.
#[inline]
pub(crate) fn bump(cell: &AtomicU64, n: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// A counter set in one place: the cells the workers bump (`$cells`), the counts summed
/// for the report (`$counts`, serialized under the same names), and which are drops, under
/// the name a drop list shows. One line per counter: its doc, its name, `drop "label"`.
macro_rules! counters {
    (
        $(#[doc = $cells_doc:literal])* cells $cells:ident;
        $(#[doc = $counts_doc:literal])* counts $vis:vis $counts:ident;
        $($(#[doc = $doc:literal])* $name:ident $(drop $label:literal)?;)*
    ) => {
        $(#[doc = $cells_doc])*
        #[derive(Debug, Default)]
        pub(crate) struct $cells {
            $(pub(crate) $name: AtomicU64,)*
        }

        $(#[doc = $counts_doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
        $vis struct $counts {
            $($(#[doc = $doc])* $vis $name: u64,)*
        }

        impl $cells {
            /// What the cells hold now.
            pub(crate) fn load(&self) -> $counts {
                $counts {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }

        impl AddAssign for $counts {
            fn add_assign(&mut self, other: $counts) {
                $(self.$name += other.$name;)*
            }
        }

        impl $counts {
            /// The counters that count drops, each with the name a drop list shows.
            #[allow(dead_code)]
            $vis fn drops(&self) -> Vec<(&'static str, u64)> {
                vec![$($(($label, self.$name),)?)*]
            }
        }
    };
}

counters! {
    /// Per-port counters of one worker, written by that worker only ([`bump`]).
    cells PortCells;
    /// A port's counts in user space, summed over the workers.
    counts pub UserPortCounts;
    /// Packets that reached user space.
    rx_packets;
    /// Their bytes.
    rx_bytes;
    /// Packets transmitted.
    tx_packets;
    /// Their bytes.
    tx_bytes;
    /// Of the packets transmitted, those moved straight from the other interface's rx ring
    /// to this one's tx ring, forwarded as they arrived (the direct path), not through the
    /// pipeline. Not a drop.
    tx_direct;
    /// Of the packets received, those the direct path sent on by the rule the XDP filter
    /// told in front of them, without classifying them again. Not a drop.
    rx_told;
    /// Packets dropped because the tx ring was full.
    tx_ring_full drop "tx-ring-full";
    /// Packets handed to the kernel through the TAP device.
    to_kernel;
    /// Packets for the kernel that were dropped (no TAP device, or it was full).
    to_kernel_dropped drop "kernel-path-dropped";
    /// Packets from the TAP device sent out of this interface.
    from_kernel;
    /// Packets sent with a partial checksum the kernel was asked to finish (transmit
    /// metadata).
    checksums_offloaded;
    /// Packets whose partial checksum xskit finished in user space.
    checksums_completed;
    /// Packets larger than this interface's MTU (GSO/GRO super-packets) cut into segments.
    segmented;
    /// The segments sent for them.
    segments;
    /// Packets larger than the MTU that could not be cut (not TCP), dropped.
    oversize_dropped drop "over-mtu";
    /// Packets dropped for want of free frames to build segments in.
    no_frames_dropped drop "no-free-frames";
    /// Packets from this interface that user space could not classify (the rules' headers
    /// unreadable; the XDP program's own are counted beside them in the port's total).
    unclassifiable;
    /// Packets whose bytes xskit copied in user space on their way in or out of this
    /// interface: to or from the TAP device, flooded from the TAP device, cut into segments
    /// in fresh frames, or copied onto a broadcast bond's other members. 0 while forwarding
    /// only moves descriptors. (A capture's copies are the kernel's, counted by the capture.)
    copies;
    /// Wakeup system calls through the fill ring, the driver having asked for buffers
    /// (need_wakeup). Not a drop.
    fill_wakeups;
    /// Wakeup system calls through the tx ring, asked for or not. Not a drop.
    tx_wakeups;
    /// Transmit wakeups made without the driver asking, because frames had waited a
    /// millisecond with none taken from the tx ring or completed (a driver that cleared
    /// need_wakeup and stopped). Not a drop.
    tx_stall_wakeups;
}

counters! {
    /// Counters a rule (or the default, or the unclassifiable) keeps in user space; each set
    /// is written by one worker's pipeline only ([`bump`]), and read by the forwarder.
    cells RuleCells;
    /// A rule's counts in user space, summed over the workers (the report adds the kernel's).
    counts pub(crate) UserRuleCounts;
    /// Packets that matched in user space.
    packets;
    /// Their bytes.
    bytes;
    /// Packets a rate limit dropped.
    over_rate drop "over-rate";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_load_add_up_and_list_their_drops() {
        let cells = PortCells::default();
        bump(&cells.tx_ring_full, 3);
        bump(&cells.rx_packets, 5);
        let mut sum = cells.load();
        sum += cells.load();
        assert_eq!((sum.rx_packets, sum.tx_ring_full), (10, 6));
        let drops = sum.drops();
        assert!(drops.contains(&("tx-ring-full", 6)));
        assert!(drops.iter().all(|(name, _)| *name != "rx-packets"));
        assert_eq!(drops.len(), 4);
    }
}
