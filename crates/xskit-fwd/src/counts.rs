//! What the forwarder counts and reports: per rule, per interface (and a bond's members),
//! the frame pools, where the UMEM's frames are; the JSON `xskit fwd --json` prints, whose
//! names the metrics take.

use serde::Serialize;
use xskit_pipeline::PoolStats;

use crate::bonded::BondCount;
use crate::counter::UserPortCounts;

/// One rule's counts (or the default's, last).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RuleCount {
    /// The rule's name ("default" for the default).
    pub name: String,
    /// forward, drop, pass or rate-limit.
    pub action: &'static str,
    /// Packets that matched.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, packets decided by the XDP program without reaching user space.
    pub in_kernel: u64,
    /// Packets a rate limit dropped.
    pub over_rate: u64,
    /// Packets of sources this rule's limit blocked, dropped.
    pub blocked: u64,
    /// Sources this rule's limit blocked.
    pub sources_blocked: u64,
    /// Blocks refused because the block table was full (the source was only limited).
    pub blocks_refused: u64,
}

/// One interface's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortCount {
    /// The interface.
    pub interface: String,
    /// xdp-skb or xdp-drv.
    pub mode: String,
    /// What user space did with its packets: received, transmitted, to and from the
    /// kernel, checksums, segments, copies, and its drops.
    #[serde(flatten)]
    pub user: UserPortCounts,
    /// Packets the XDP program dropped by rule.
    pub xdp_dropped: u64,
    /// Packets the XDP program passed to the kernel stack by rule.
    pub xdp_passed: u64,
    /// XDP_REDIRECT verdicts out of the other interface by rule (`xdp_forward`): what the
    /// program decided, not what left; see `xdp_forward_undelivered` on the other interface.
    pub xdp_forwarded: u64,
    /// Packets a `forward` verdict would have sent on in XDP that went to user space instead,
    /// because their TCP or UDP checksum looked partial (finished there, then forwarded; also
    /// counted in `rx_packets` and on their rule in user space).
    pub xdp_partial_checksums: u64,
    /// Packets the XDP program would have handed to user space while no socket was there to
    /// take them (the forwarder starting, or stopping after its sockets let go): dropped,
    /// never passed to the host's stack undecided.
    pub xdp_no_socket_dropped: u64,
    /// Packets this interface's device transmitted since the forwarder started (its own
    /// counter: what the kernel confirms left).
    pub device_tx_packets: u64,
    /// Packets the other interface's program redirected here in XDP that this device did not
    /// transmit: dropped by the kernel (on veth: the far end has neither GRO nor an XDP
    /// program). Derived from the device's counter, so other traffic on it can hide some.
    pub xdp_forward_undelivered: u64,
    /// Packets arriving here that could not be classified, by the XDP filter or in user
    /// space (also counted under [`Counters::unclassifiable`], with what was done with them):
    /// the same total as there.
    pub unclassifiable: u64,
    /// Whether the link can carry packets (up, with carrier; a bond: any member): while it
    /// cannot, what is sent to it waits in its tx rings, then is dropped as tx-ring-full.
    pub link_up: bool,
    /// Times the link went down or came back up while forwarding.
    pub link_changes: u64,
    /// The sockets' kernel counters, summed over queues (and a bond's members).
    pub socket_rx_dropped: u64,
    /// Packets the kernel dropped because an rx ring was full.
    pub socket_rx_ring_full: u64,
    /// Times a fill ring was empty when a packet arrived.
    pub socket_fill_ring_empty: u64,
    /// All six of the sockets' kernel counters (XDP_STATISTICS), summed over queues (and a
    /// bond's members), under the names `gen`, `recv` and `bench` report them.
    pub statistics: xskit::Statistics,
    /// The bond's state and its members' counts, when this side is a bond.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bond: Option<BondCount>,
}

impl PortCount {
    /// Every way a packet of this port was dropped or lost, by the names the CLI shows:
    /// the sockets' kernel counters, user space's drops, the unclassifiable, and what the
    /// other side forwarded here in XDP that did not leave.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut drops = vec![
            ("socket-rx-dropped", self.socket_rx_dropped),
            ("rx-ring-full", self.socket_rx_ring_full),
            ("fill-ring-empty", self.socket_fill_ring_empty),
        ];
        drops.extend(self.user.drops());
        drops.push(("unclassifiable", self.unclassifiable));
        drops.push(("xdp-forwarded-not-sent", self.xdp_forward_undelivered));
        drops.push(("no-socket", self.xdp_no_socket_dropped));
        drops
    }
}

/// Counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// The generation of the rules in force: 1 for those the forwarder started with, one
    /// more for each apply.
    pub rules_generation: u64,
    /// When it was put in force, in milliseconds since the Unix epoch.
    pub rules_applied_timestamp_ms: u64,
    /// Per rule, in order, then the default.
    pub rules: Vec<RuleCount>,
    /// Packets that could not be classified (headers cut short or lying, too many VLAN tags
    /// or IPv6 extension headers), which take the rules file's `unclassifiable` verdict.
    pub unclassifiable: RuleCount,
    /// Per interface.
    pub ports: Vec<PortCount>,
    /// ARP replies sent (`respond`).
    pub arp_replies: u64,
    /// ICMP echo replies sent (`respond`).
    pub echo_replies: u64,
    /// Requests for the `respond` address that Linux would discard (from a group MAC or a
    /// broadcast, multicast or martian address), dropped.
    pub respond_refused: u64,
    /// The frame pools' counters, summed over workers.
    pub pool: PoolStats,
    /// Where the UMEM's frames were when the workers last published (each interval): a
    /// moving picture, so its parts need not add up to the total; the report's
    /// [`FrameReport`] is the exact one, taken at rest.
    pub frames: LiveFrames,
    /// The sources blocked now, most dropped first (at most [`TOP_BLOCKED`]).
    pub blocked_sources: Vec<BlockedCount>,
    /// Sources blocked now, on every interface.
    pub blocked_now: u64,
    /// The sets with timeouts or counters, in the rules file's order.
    pub sets: Vec<SetCount>,
}

/// The elements [`SetCount`] lists.
pub const TOP_ELEMENTS: usize = 10;

/// A set with timeouts or counters: its elements, and the busiest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SetCount {
    /// The set's name.
    pub name: String,
    /// Its elements.
    pub elements: u64,
    /// Of those, expired: gone from every lookup.
    pub expired: u64,
    /// Packets whose source (the set named in `src`) or destination (in `dst`) its elements
    /// hold, on every interface (0 without `counters`).
    pub packets: u64,
    /// The elements that matched most, most first (at most [`TOP_ELEMENTS`]); with
    /// `counters` only.
    pub top: Vec<ElementCount>,
}

/// An element of a set, and what it matched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ElementCount {
    /// Its prefix.
    pub element: String,
    /// Packets whose address (on the side a rule asks) it was the longest live element to
    /// hold.
    pub packets: u64,
    /// Seconds until it expires (0: expired), or none if it never does.
    pub left_s: Option<u64>,
}

/// The blocked sources [`Counters`] lists.
pub const TOP_BLOCKED: usize = 10;

/// A source blocked now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BlockedCount {
    /// The interface it arrives on.
    pub interface: String,
    /// The rule whose limit it went over.
    pub rule: String,
    /// Its prefix, as the rule groups sources.
    pub source: String,
    /// Packets dropped since it was blocked.
    pub drops: u64,
    /// Seconds until the block runs out.
    pub left_s: u64,
}

/// Where the UMEM's frames are while the forwarder runs, for the live counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LiveFrames {
    /// Frames in the UMEM (the report's `total`).
    pub umem: u64,
    /// Free: in the shared pool and the workers' caches.
    pub pool: u64,
    /// In fill rings.
    pub fill: u64,
    /// In rx rings.
    pub rx: u64,
    /// In tx and completion rings.
    pub tx: u64,
    /// Taken from a fill ring and kept in the kernel's buffer pool.
    pub kernel_held: u64,
}

/// Where every UMEM frame was when the forwarder stopped: total = pool + fill + rx + tx +
/// kernel_held. The ring figures come from the rings' own indices; `kernel_held` is what the
/// kernel took from a fill ring and keeps in its buffer pool (it does so when an rx ring is
/// full), known from xskit's ledger of frames handed over and received back.
/// `unaccounted` is what none of these explain: 0 unless a frame was lost or duplicated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FrameReport {
    /// Frames in the UMEM.
    pub total: u64,
    /// In the frame pool.
    pub pool: u64,
    /// In fill rings.
    pub fill: u64,
    /// In rx rings.
    pub rx: u64,
    /// In tx or completion rings.
    pub tx: u64,
    /// Taken from a fill ring and held by the kernel.
    pub kernel_held: u64,
    /// total − pool − fill − rx − tx − kernel_held, or a ledger that disagrees with the rings.
    pub unaccounted: i64,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// How long it ran, in seconds.
    pub duration_s: f64,
    /// Workers (queues) that ran.
    pub workers: usize,
    /// Whether the sockets ran in zero-copy (one UMEM, frames leaving as they arrived).
    pub zero_copy: bool,
    /// The counters at the end.
    pub counters: Counters,
    /// The frames at the end.
    pub frames: FrameReport,
    /// Why forwarding stopped before it was asked to (an interface deleted or moved to
    /// another namespace, xskit's program detached from outside, a failed system call);
    /// `None` after a normal stop. The counters and frames above are still complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// The process it handed its sockets, UMEM and programs to (`xskit fwd --takeover`),
    /// when it stopped for one: its frames are that process's now (`frames` says where they
    /// were at the handover).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handed_to: Option<u32>,
}
