//! How to forward: the interfaces, the rules, the modes and every setting, built with
//! `ForwardConfig::new(interfaces)` and chained setters.

use std::net::Ipv4Addr;

use xskit::{Mode, SocketConfig};
use xskit_pipeline::DEFAULT_VECTOR;

use crate::bonded::BondConfig;
use crate::rules::{RuleSet, Verdict};

/// How to forward: `ForwardConfig::new(interfaces)` and the setters for the rest.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ForwardConfig {
    /// One or two interfaces. With two, what arrives on one leaves on the other.
    pub interfaces: Vec<String>,
    /// Where the XDP program runs: `Auto`, `Skb` or `Drv`. The sockets copy: one UMEM serves
    /// both interfaces, so `ZeroCopy` is refused.
    pub mode: Mode,
    /// Queues to serve (a worker each); `None` serves every receive queue.
    pub queues: Option<u32>,
    /// The rules.
    pub rules: RuleSet,
    /// Send forwarded packets back out of the interface they came in on, MACs swapped (l2fwd).
    pub reflect: bool,
    /// Answer ARP and ICMP echo requests for this address.
    pub respond: Option<Ipv4Addr>,
    /// A TAP device for packets the rules pass to the kernel from user space, and for the
    /// forwarding host's own traffic.
    pub tap: Option<String>,
    /// Let the XDP program forward what it can decide (XDP_REDIRECT between the two
    /// interfaces), so only the rest reaches user space. Needs two interfaces and no
    /// `reflect`, `respond` or `tap`, which need user space to see every packet.
    pub xdp_forward: bool,
    /// Check the frame accounting after every vector; stop with an error if it is off.
    pub check: bool,
    /// Packets per vector (1 to 256).
    pub vector: usize,
    /// UMEM frames; `None` sizes the UMEM for every ring of every socket.
    pub frames: Option<u32>,
    /// CPUs to pin workers to, in queue order (wrapping); empty leaves them unpinned.
    pub cpus: Vec<usize>,
    /// Socket ring sizes and options.
    pub socket: SocketConfig,
    /// How partial checksums (CHECKSUM_PARTIAL packets from the hosts' own sockets) are
    /// finished before they leave.
    pub checksum: ChecksumMode,
    /// Bonds: an interface named as one of these is that bond of member interfaces.
    pub bonds: Vec<BondConfig>,
    /// Hold every interface (a bond's members) in promiscuous mode while forwarding (the
    /// default): a bump in the wire receives unicast frames for the hosts behind it, which a
    /// NIC's MAC filter drops before XDP sees them. Off leaves each NIC's filter as it is.
    pub promiscuous: bool,
    /// The directory (on a BPF file system) where this forwarder's programs are pinned when
    /// [`ForwardConfig::keep_in_kernel`] is set, and where a program an earlier forwarder
    /// left is found and taken over (replaced in one step, nothing detached meanwhile).
    pub pins: Option<std::path::PathBuf>,
    /// Leave the XDP programs attached when the forwarder ends, however it ends (pinned in
    /// [`ForwardConfig::pins`]): what their rules decide in the kernel goes on (drops, and
    /// forwarding with [`ForwardConfig::xdp_forward`]); what would go to user space is
    /// dropped and counted until a forwarder takes them over. Off: they go with it, and
    /// nothing crosses.
    pub keep_in_kernel: bool,
}

/// How the forwarder finishes checksums a sender left partial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChecksumMode {
    /// Ask the kernel through AF_XDP transmit metadata (the packet leaves CHECKSUM_PARTIAL, as
    /// it left its sender); sum in user space where the kernel has no transmit metadata.
    #[default]
    Offload,
    /// Sum every such packet in user space.
    Software,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            interfaces: Vec::new(),
            mode: Mode::Auto,
            queues: None,
            rules: RuleSet::with_default(Verdict::Forward),
            reflect: false,
            respond: None,
            tap: None,
            xdp_forward: false,
            check: false,
            vector: DEFAULT_VECTOR,
            frames: None,
            cpus: Vec::new(),
            socket: SocketConfig::default(),
            checksum: ChecksumMode::default(),
            bonds: Vec::new(),
            promiscuous: true,
            pins: None,
            keep_in_kernel: false,
        }
    }
}

xskit_os::config_setters!(ForwardConfig {
    /// Sets the interfaces.
    interfaces: Vec<String>,
    /// Sets where the XDP program runs.
    mode: Mode,
    /// Sets the queues served (`None`: all).
    queues: Option<u32>,
    /// Sets the rules.
    rules: RuleSet,
    /// Turns reflecting on or off.
    reflect: bool,
    /// Sets the address to answer ARP and ICMP echo for.
    respond: Option<Ipv4Addr>,
    /// Sets the TAP device.
    tap: Option<String>,
    /// Turns forwarding in XDP on or off.
    xdp_forward: bool,
    /// Turns the frame accounting check on or off.
    check: bool,
    /// Sets the packets per vector.
    vector: usize,
    /// Sets the UMEM frames (`None`: sized for every ring).
    frames: Option<u32>,
    /// Sets the CPUs to pin workers to.
    cpus: Vec<usize>,
    /// Sets the socket ring sizes and options.
    socket: SocketConfig,
    /// Sets how partial checksums are finished.
    checksum: ChecksumMode,
    /// Sets the bonds.
    bonds: Vec<BondConfig>,
    /// Turns holding the interfaces promiscuous on or off.
    promiscuous: bool,
    /// Sets where programs are pinned and found.
    pins: Option<std::path::PathBuf>,
    /// Turns leaving the programs in the kernel on or off.
    keep_in_kernel: bool,
});

impl ForwardConfig {
    /// Forwards between `interfaces` (or reflects on one) with the defaults: every packet
    /// forwarded, every queue served, mode `Auto`.
    pub fn new<S: Into<String>>(interfaces: impl IntoIterator<Item = S>) -> Self {
        ForwardConfig::default().interfaces(interfaces.into_iter().map(Into::into).collect())
    }
}
