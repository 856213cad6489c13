//! Errors of the traffic crate.

/// Errors from probes, generators and baselines.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the AF_XDP layer.
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] xskit::SyscallError),
    /// The source and destination addresses are of different families.
    #[error("source and destination addresses must both be IPv4 or both IPv6")]
    MixedFamilies,
    /// A VLAN id outside 1..4094.
    #[error("VLAN id {vid} is out of range 1..4094")]
    VlanId {
        /// The id given.
        vid: u16,
    },
    /// A VLAN priority (PCP) outside 0..7.
    #[error("VLAN priority {pcp} is out of range 0..7")]
    VlanPriority {
        /// The priority given.
        pcp: u8,
    },
    /// A VLAN priority for a template without a VLAN tag.
    #[error("a VLAN priority needs a VLAN tag: tag the packets first")]
    VlanPriorityWithoutTag,
    /// A packet size the template cannot be built at.
    #[error(
        "packet size {size} is out of range: {family} frames with these options take {min} to \
         {max} bytes (without the 4-byte FCS)"
    )]
    PacketSize {
        /// The size asked for.
        size: usize,
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// The smallest frame that holds the headers (and the 60 bytes Ethernet asks for).
        min: usize,
        /// The largest xskit builds.
        max: usize,
    },
    /// A flow range with no values: `range` names it (`src_macs`, `src_ips`, `dst_ips`,
    /// `src_ports`, `dst_ports`, as [`crate::probe::Flows`] calls them).
    #[error("the flow range {range} is empty: it needs at least one value")]
    EmptyFlowRange {
        /// The range's field.
        range: &'static str,
    },
    /// A port range that runs past 65535.
    #[error("a port range runs past 65535: start lower or take fewer ports")]
    PortRange,
    /// More source addresses than the live-frames generator holds.
    #[error("{count} source addresses: the live-frames generator cycles through at most {max}")]
    TooManySources {
        /// The addresses given.
        count: usize,
        /// The most it holds.
        max: u32,
    },
    /// A BPF program of this crate could not be loaded, run or read.
    #[error("{what}: {reason}")]
    Bpf {
        /// What was being done.
        what: &'static str,
        /// The kernel's or loader's reason, and what to do.
        reason: String,
    },
    /// The process lacks a privilege the operation needs.
    #[error("{what}: permission denied: {advice}")]
    NotPermitted {
        /// What was being done.
        what: &'static str,
        /// Which capabilities the process lacks, and what to do
        /// ([`xskit::privileges::advice_now`]).
        advice: String,
    },
}

/// Results of traffic operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
