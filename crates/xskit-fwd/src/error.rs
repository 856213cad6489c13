//! The forwarder's errors: the layers' below, and its own, each saying what to do.

use xskit_os::SyscallError;

/// Errors from the forwarder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the AF_XDP layer (interfaces, programs, sockets, UMEM).
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// From the pipeline (vector sizes, ports).
    #[error(transparent)]
    Pipeline(#[from] xskit_pipeline::Error),
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// From the bond's layer (its members, its link monitor).
    #[error(transparent)]
    Bond(xskit_bond::Error),
    /// A bond that is not among the interfaces.
    #[error(
        "bond {name} is defined but not used: give {name} as one of the interfaces to forward \
         between"
    )]
    BondNotUsed {
        /// The bond.
        name: String,
    },
    /// An interface in two places (two bonds, or a bond and a plain side).
    #[error(
        "{name} is used twice ({first} and {second}): an interface belongs to one bond or one \
         side"
    )]
    InterfaceTwice {
        /// The interface.
        name: String,
        /// Where it is first used.
        first: String,
        /// Where it is used again.
        second: String,
    },
    /// A primary that is not a member.
    #[error("the primary of bond {bond}, {primary}, is not one of its members ({members})")]
    PrimaryNotMember {
        /// The bond.
        bond: String,
        /// The primary given.
        primary: String,
        /// The members, comma-separated.
        members: String,
    },
    /// Members whose MTUs differ.
    #[error(
        "bond {bond}'s members have different MTUs ({first} has {first_mtu}, {member} has \
         {mtu}): give them one MTU (ip link set dev IFACE mtu N), as a Linux bond does"
    )]
    MemberMtu {
        /// The bond.
        bond: String,
        /// The first member.
        first: String,
        /// Its MTU.
        first_mtu: u32,
        /// A member with another MTU.
        member: String,
        /// Its MTU.
        mtu: u32,
    },
    /// Forwarding in XDP into a broadcast bond.
    #[error(
        "forwarding in XDP cannot copy a packet onto every member of a broadcast bond: leave \
         out the XDP forwarding, or give the bond another mode"
    )]
    BondXdpForward,
    /// Neither one nor two interfaces.
    #[error("{count} interfaces given: forward between two, or reflect on one")]
    InterfaceCount {
        /// How many were given.
        count: usize,
    },
    /// The same interface twice.
    #[error("both interfaces are {name}: give two different ones, or one with reflect")]
    SameInterface {
        /// The interface.
        name: String,
    },
    /// The two sides are the two ends of one veth pair.
    #[error(
        "{a} and {b} are the two ends of one veth pair: every frame forwarded out of one would \
         come straight back in on the other, and broadcasts would go round forever; give two \
         links that lead to different hosts (each veth's far end in another namespace)"
    )]
    OnePair {
        /// One side's interface.
        a: String,
        /// The other side's.
        b: String,
    },
    /// A driver that receives on queues it added for XDP, where no socket can be bound.
    #[error(
        "{iface} receives on {total} queues with the forwarder's program attached, and {own} of \
         them are its own: the driver added the rest for XDP (virtio_net does, one queue pair \
         per CPU, when it has spare ones), and AF_XDP sockets cannot serve them, so packets \
         arriving there would pass the forwarder by: {advice}"
    )]
    XdpQueues {
        /// The interface.
        iface: String,
        /// Its own receive queues.
        own: u32,
        /// Its receive queues with the program attached.
        total: u32,
        /// What to change.
        advice: String,
    },
    /// Forwarding in XDP with a setting that needs user space to see every packet.
    #[error(
        "forwarding in XDP needs two interfaces, and no reflect, respond or TAP device (those \
         need user space to see every packet)"
    )]
    XdpForwardConflict,
    /// One interface, no reflect, and rules that forward.
    #[error(
        "with one interface ({iface}) forwarded packets have nowhere to go: give a second \
         interface, or reflect them back out of this one"
    )]
    NowhereToForward {
        /// The interface.
        iface: String,
    },
    /// No queue to serve.
    #[error("0 queues: serve at least one")]
    NoQueues,
    /// An interface without a MAC address.
    #[error("{iface} has no MAC address: it is not Ethernet")]
    NotEthernet {
        /// The interface.
        iface: String,
    },
    /// More frames than one UMEM holds.
    #[error(
        "{queues} queue(s) x {ports} interface(s) with fill rings of {fill} and tx rings of \
         {tx} need more frames than one UMEM holds: use smaller rings"
    )]
    TooManyFrames {
        /// Queues served.
        queues: u32,
        /// Interfaces.
        ports: u32,
        /// Fill ring entries per socket.
        fill: u32,
        /// Tx ring entries per socket.
        tx: u32,
    },
    /// A pinning CPU the machine does not have.
    #[error("CPU {cpu} does not exist: this machine has CPUs 0 to {last}")]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: usize,
        /// The highest CPU online.
        last: usize,
    },
    /// A pinning CPU this process may not run on.
    #[error(
        "CPU {cpu} is outside this process's allowed CPUs ({allowed}), as set by taskset or a \
         cgroup: pin workers to those, or widen the affinity"
    )]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: usize,
        /// The allowed CPUs, comma-separated.
        allowed: String,
    },
    /// A kernel rule's source and destination prefixes are of different families.
    #[error(
        "a rule's source and destination prefixes are of different families: no packet can match"
    )]
    MixedFamilies,
    /// A kernel rule's port range runs backwards.
    #[error("port range {lo}-{hi} is empty: give the lower port first")]
    EmptyPortRange {
        /// The first port.
        lo: u16,
        /// The last port.
        hi: u16,
    },
    /// A prefix longer than its address.
    #[error("prefix length /{len} is longer than /{max}")]
    PrefixTooLong {
        /// The length given.
        len: u8,
        /// The address's bits.
        max: u8,
    },
    /// More kernel rules than the filter's map holds.
    #[error("{count} rules given; the kernel filter holds at most {max}")]
    TooManyRules {
        /// Rules given.
        count: usize,
        /// The filter's limit.
        max: usize,
    },
    /// More sets, or larger ones, than the filter was loaded with room for.
    #[error(
        "the sets need {wanted}, more than the kernel filter was loaded with room for \
         ({room}): start the forwarder again with the new sets"
    )]
    SetsOutgrown {
        /// What the sets need.
        wanted: String,
        /// What the filter has.
        room: String,
    },
    /// A rule list whose bit vectors need more room than the filter was loaded with.
    #[error(
        "the rules need {wanted}, more than the kernel filter was loaded with room for \
         ({room}): start the forwarder again with the new rules"
    )]
    RulesOutgrown {
        /// What the rules' vectors need.
        wanted: String,
        /// What the filter has.
        room: String,
    },
    /// Rules to apply whose sets are not the running ones.
    #[error(
        "the new rules' sets ({wanted}) are not the running ones ({running}): an apply keeps \
         the sets as they run (a set with timeouts never compares equal, as its elements' \
         timers start when read); start the forwarder again to change a set"
    )]
    SetsChanged {
        /// The running sets' names.
        running: String,
        /// The new rules'.
        wanted: String,
    },
    /// Rules sent to a running forwarder with a mistake; the running rules stand.
    #[error("the new rules, line {line}, column {column}: {message}")]
    InvalidRules {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A set change naming a set that does not run.
    #[error("no set named {name:?} runs (the sets: {sets})")]
    NoSuchSet {
        /// The name given.
        name: String,
        /// The running sets' names.
        sets: String,
    },
    /// A set change with an element that is not one; the set stands as it was.
    #[error("set {set:?}, element {position}: {message}; the set stands as it was")]
    InvalidElement {
        /// The set.
        set: String,
        /// 1-based, the added first, then those taken out.
        position: usize,
        /// What is wrong.
        message: String,
    },
    /// An apply asked while others wait.
    #[error("the forwarder is still applying earlier rules: try again")]
    ApplyBusy,
    /// Programs to keep in the kernel, and nowhere to pin them.
    #[error(
        "{dir} is not on a BPF file system, where the programs kept in the kernel are pinned: \
         mount one (mount -t bpf bpf /sys/fs/bpf) or give a directory on one"
    )]
    NotBpfFs {
        /// The directory.
        dir: String,
    },
    /// A takeover that cannot be done, or a handover refused.
    #[error("takeover: {reason}")]
    TakeOver {
        /// Why, and what to do.
        reason: String,
    },
    /// An apply that got no answer in time (it may still happen).
    #[error("the forwarder did not answer within {seconds} s; its rules may still change: see `xskit ctl status`")]
    ApplyTimedOut {
        /// How long it waited.
        seconds: f64,
    },
    /// An apply asked of a forwarder that has stopped.
    #[error("the forwarder has stopped")]
    ForwarderStopped,
    /// The UMEM's frames were taken before the forwarder could.
    #[error("the UMEM's frames were already taken: give the forwarder a UMEM of its own")]
    FramesTaken,
    /// The kernel filter's maps could not be read or written.
    #[error("the XDP filter: {what}: {reason}")]
    Filter {
        /// What was being done.
        what: &'static str,
        /// The kernel's reason.
        reason: String,
    },
    /// The TAP device for kernel-bound frames could not be made.
    #[error("TAP device {name}: {reason}")]
    Tap {
        /// The device name asked for.
        name: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// A frame went missing or was counted twice (checked accounting): a bug in xskit or in a
    /// stage.
    #[error(
        "frame accounting broken: {0}. This is a bug in xskit or in a stage of yours: please \
         report it with the command line and the counters"
    )]
    FrameAccounting(String),
}

/// Results of forwarder operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
