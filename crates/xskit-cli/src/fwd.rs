//! `xskit fwd`: a filtering bump in the wire between two interfaces, or a reflector on one,
//! with a TOML rules file, live counters and a JSON summary.

use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::time::Duration;
use xskit::SocketConfig;
use xskit_bond::lacp::{AdSelect, LacpConfig, LacpRate};
use xskit_fwd::rules::{RuleSet, Verdict};
use xskit_fwd::{
    BondConfig, BondMode, ChecksumMode, Counters, FailOverMac, ForwardConfig, Forwarder, PortCount,
    PrimaryReselect, Report, RuleCount,
};

use crate::control::ControlServer;
use crate::opts::{stop_flag, thousands, ModeArg, PolicyArg, RunArgs};

#[derive(Args, Debug)]
pub(crate) struct FwdArgs {
    /// An interface; give two to forward between them (both directions), one with --reflect.
    #[arg(short = 'i', long = "interface", value_name = "IFACE", required = true)]
    interfaces: Vec<String>,
    /// The rules file (TOML; --help-rules, or man 5 xskit-rules, says how to write one).
    /// Without it everything is forwarded. SIGHUP reads it again and puts it in force whole
    /// (or refuses it, the rules running untouched), as `xskit ctl apply` does.
    #[arg(long, value_name = "FILE")]
    rules: Option<std::path::PathBuf>,
    /// Print how to write a rules file, and exit.
    #[arg(long, exclusive = true)]
    help_rules: bool,
    /// Diagnostics of its bonds on stderr: -v what changes (members up, down and active,
    /// LACP), -vv each carrier change and each LACP machine's step per member.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Where the XDP program runs and whether the sockets copy. One UMEM serves every
    /// interface: in zero-copy a frame received on one leaves the other as it is.
    #[arg(short = 'm', long, value_enum, default_value_t = ModeArg::Auto)]
    mode: ModeArg,
    /// How many queues to serve, from queue 0, a worker each (default: every receive queue).
    /// A count, where gen's --queues is a list of queues: --queues here is an old spelling.
    #[arg(short = 'Q', long = "queue-count", value_name = "N", alias = "queues")]
    queues: Option<u32>,
    /// CPUs for the workers, in queue order, e.g. 0,1 (default: not pinned).
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// Send forwarded packets back out of the interface they came in on, MACs swapped (l2fwd).
    #[arg(long)]
    reflect: bool,
    /// Answer ARP and ICMP echo requests for this IPv4 address.
    #[arg(long, value_name = "ADDR")]
    respond: Option<Ipv4Addr>,
    /// A TAP device (created) for packets passed to the kernel from user space and for this
    /// host's own traffic.
    #[arg(long, value_name = "NAME")]
    tap: Option<String>,
    /// Forward in XDP what the kernel can decide (XDP_REDIRECT between the interfaces): those
    /// packets never reach user space. Not with --reflect, --respond or --tap.
    #[arg(long = "xdp-forward")]
    xdp_forward: bool,
    /// Check the frame accounting after every vector and at exit; fail if a frame is lost.
    #[arg(long)]
    check: bool,
    /// Leave the interfaces' MAC filters alone. By default every interface (a bond's
    /// members too) is promiscuous while fwd runs, as a bump in the wire must be: a NIC drops
    /// unicast frames for other hosts before XDP sees them. The kernel restores each
    /// interface's own setting when fwd exits, however it exits.
    #[arg(long = "no-promisc")]
    no_promisc: bool,
    /// Packets per vector (1 to 256).
    #[arg(long, default_value_t = 64)]
    vector: usize,
    /// Entries in each ring (the fill ring gets twice as many), as in gen, recv and bench.
    #[arg(long = "ring-size", default_value_t = 2048)]
    ring_size: u32,
    /// How checksums the hosts' own sockets left partial are finished: offload (the kernel,
    /// through AF_XDP transmit metadata; summed here where the kernel has none) or software.
    #[arg(long, value_enum, default_value = "offload")]
    checksum: ChecksumArg,
    /// Print the rules and how they are split between the kernel and user space, then exit.
    #[arg(long)]
    explain: bool,
    /// A bond of member interfaces, used as a side under its name (-i NAME), e.g.
    /// bond0=eth1,eth2 (1 to 8 members). Repeat for a bond on each side.
    #[arg(long = "bond", value_name = "NAME=IFACE,IFACE", value_parser = parse_bond)]
    bonds: Vec<(String, Vec<String>)>,
    /// The bonds' mode, as Linux's bonding names it (or its number).
    #[arg(long = "bond-mode", value_enum, default_value = "balance-rr")]
    bond_mode: BondModeArg,
    /// balance-xor's and 802.3ad's transmit hash policy, as Linux's xmit_hash_policy.
    #[arg(
        long = "xmit-hash",
        visible_alias = "xmit-hash-policy",
        value_enum,
        default_value = "layer2"
    )]
    xmit_hash: PolicyArg,
    /// balance-rr: packets sent on a member before the next one's turn.
    #[arg(long = "packets-per-slave", value_name = "N", default_value_t = 1)]
    packets_per_slave: u32,
    /// active-backup: the member preferred as the active one.
    #[arg(long, value_name = "IFACE")]
    primary: Option<String>,
    /// When the primary takes over again from an active member that is up: always, better
    /// (a faster link, or as fast and full duplex), or failure (only when the active one
    /// fails).
    #[arg(long = "primary-reselect", value_enum, default_value = "always")]
    primary_reselect: ReselectArg,
    /// active-backup with --respond: gratuitous ARPs for that address from the new active
    /// member after a failover, so the switch learns the bond's new port (0: none).
    #[arg(long = "num-grat-arp", value_name = "N", default_value_t = 1)]
    num_grat_arp: u32,
    /// active-backup with --respond: the MAC the bond answers from. none: its first
    /// member's, whichever is active; active: the active member's own, changing at a
    /// failover (announced by the gratuitous ARPs).
    #[arg(long = "fail-over-mac", value_enum, default_value = "none")]
    fail_over_mac: FailOverMacArg,
    /// Milliseconds a member's carrier must be up before the bond uses it again.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    updelay: u64,
    /// Milliseconds a member's carrier must be down before the bond stops using it.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    downdelay: u64,
    /// ARP monitoring: every MS milliseconds each member asks --arp-ip-target for its MAC
    /// address (an ARP probe from the member's own MAC); a member whose targets stop
    /// answering is taken out even while its carrier is up. 0: carrier only.
    #[arg(long = "arp-interval", value_name = "MS", default_value_t = 0)]
    arp_interval: u64,
    /// ARP monitoring's targets (1 to 16 IPv4 addresses of hosts that answer ARP).
    #[arg(long = "arp-ip-target", value_name = "ADDR", value_delimiter = ',')]
    arp_ip_targets: Vec<Ipv4Addr>,
    /// ARP monitoring: checks in a row without an answer that take a member out.
    #[arg(long = "arp-missed-max", value_name = "N", default_value_t = 2)]
    arp_missed_max: u32,
    /// 802.3ad: how often the partner is asked to send LACPDUs: slow (every 30 s, timed
    /// out after 90 s) or fast (every second, timed out after 3 s). [default: slow]
    #[arg(long = "lacp-rate", value_enum)]
    lacp_rate: Option<LacpRateArg>,
    /// 802.3ad: on sends LACPDUs unasked; off only answers a partner's. [default: on]
    #[arg(long = "lacp-active", value_enum)]
    lacp_active: Option<OnOff>,
    /// 802.3ad: the system priority (1 to 65535, lower is preferred). [default: 65535]
    #[arg(long = "ad-actor-sys-prio", value_name = "N")]
    ad_actor_sys_prio: Option<u16>,
    /// 802.3ad: the upper 10 bits of the members' key (0 to 1023). [default: 0]
    #[arg(long = "ad-user-port-key", value_name = "N")]
    ad_user_port_key: Option<u16>,
    /// 802.3ad: fewer members than this distributing, and the bond carries nothing.
    /// [default: 0]
    #[arg(long = "min-links", value_name = "N")]
    min_links: Option<usize>,
    /// 802.3ad: how the active aggregator is chosen: stable (kept while it has members),
    /// bandwidth or count (the most, chosen again on every change). [default: stable]
    #[arg(long = "ad-select", value_enum)]
    ad_select: Option<AdSelectArg>,
    /// Write what the forwarder's XDP programs see to FILE (pcapng): an interface block per
    /// interface (per member of a bond), and each packet's verdict and rule as its comment.
    #[arg(long, value_name = "FILE")]
    capture: Option<std::path::PathBuf>,
    /// With --capture: packets captured a second at most (0: all), so that capture cannot
    /// starve forwarding; what it skips is counted.
    #[arg(
        long = "capture-rate",
        value_name = "PPS",
        default_value_t = 100_000,
        requires = "capture"
    )]
    capture_rate: u32,
    /// The control socket `xskit ctl` talks to [default: /run/xskit/fwd-IFACES-netN.sock,
    /// named after the interfaces and the network namespace]
    #[arg(long, value_name = "PATH", conflicts_with = "no_control")]
    control: Option<std::path::PathBuf>,
    /// Serve no control socket.
    #[arg(long = "no-control")]
    no_control: bool,
    /// Let GROUP (a name or a number) use the control socket too (mode 0660 instead of 0600).
    #[arg(
        long = "control-group",
        value_name = "GROUP",
        conflicts_with = "no_control"
    )]
    control_group: Option<String>,
    /// Take over from the forwarder running on the same interfaces, found at its control
    /// socket (--control, or the default): its sockets, UMEM and XDP programs are handed over
    /// (its programs replaced by this one's in one step), packets wait in the rings meanwhile
    /// and none is lost; it exits with its summary. This one's rules may differ
    #[arg(long, conflicts_with = "no_control")]
    takeover: bool,
    /// What happens to traffic while no forwarder runs (after any exit, a crash or SIGKILL
    /// too): close takes the XDP programs away with the forwarder (nothing crosses); kernel
    /// leaves them attached, pinned under --bpf-dir: drops their rules decide go on, so does
    /// forwarding in XDP (--xdp-forward), and what user space would decide is dropped and
    /// counted, never passed to the host, until a forwarder on the same interfaces takes them
    /// over (any start does, in one step)
    #[arg(long = "on-exit", value_enum, default_value = "close")]
    on_exit: OnExit,
    /// The BPF file system directory of kept programs' pins (--on-exit kernel)
    #[arg(
        long = "bpf-dir",
        value_name = "DIR",
        default_value = "/sys/fs/bpf/xskit"
    )]
    bpf_dir: std::path::PathBuf,
    #[command(flatten)]
    run: RunArgs,
}

/// `--on-exit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnExit {
    /// The programs go with the forwarder.
    Close,
    /// The programs stay, pinned.
    Kernel,
}

/// `--bond-mode`: Linux's names, and its numbers as aliases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BondModeArg {
    /// Members in turn.
    #[value(name = "balance-rr", alias = "0")]
    BalanceRr,
    /// One active member; the others stand by.
    #[value(name = "active-backup", alias = "1")]
    ActiveBackup,
    /// The member the transmit hash picks.
    #[value(name = "balance-xor", alias = "2")]
    BalanceXor,
    /// A copy on every member.
    #[value(name = "broadcast", alias = "3")]
    Broadcast,
    /// LACP (802.3ad) with the partner; the members that distribute, by the transmit hash.
    #[value(name = "802.3ad", alias = "4")]
    Lacp,
}

/// `--lacp-rate`, as Linux names it (or its number).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LacpRateArg {
    #[value(alias = "0")]
    Slow,
    #[value(alias = "1")]
    Fast,
}

/// `--ad-select`, as Linux names it (or its number).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum AdSelectArg {
    #[value(alias = "0")]
    Stable,
    #[value(alias = "1")]
    Bandwidth,
    #[value(alias = "2")]
    Count,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// `--primary-reselect`, as Linux names it.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ReselectArg {
    Always,
    Better,
    Failure,
}

/// `--fail-over-mac`, as Linux names it.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FailOverMacArg {
    None,
    Active,
}

/// `NAME=IFACE,IFACE...`.
fn parse_bond(s: &str) -> std::result::Result<(String, Vec<String>), String> {
    let (name, members) = s.split_once('=').ok_or_else(|| {
        format!("{s:?} is not NAME=IFACE,IFACE: name the bond, then its members after '='")
    })?;
    let members: Vec<String> = members.split(',').map(str::to_string).collect();
    if name.is_empty() || members.iter().any(String::is_empty) {
        return Err(format!(
            "{s:?} has an empty name or member: give NAME=IFACE,IFACE"
        ));
    }
    Ok((name.to_string(), members))
}

/// The bonds as the library takes them.
fn bond_configs(args: &FwdArgs) -> Result<Vec<BondConfig>> {
    let mode = match args.bond_mode {
        BondModeArg::BalanceRr => BondMode::BalanceRr {
            packets_per_slave: args.packets_per_slave,
        },
        BondModeArg::ActiveBackup => BondMode::ActiveBackup,
        BondModeArg::BalanceXor => BondMode::BalanceXor {
            policy: args.xmit_hash.into(),
        },
        BondModeArg::Broadcast => BondMode::Broadcast,
        BondModeArg::Lacp => BondMode::Lacp {
            policy: args.xmit_hash.into(),
        },
    };
    let lacp = lacp_config(args)?;
    if let Some(p) = &args.primary {
        if args.bond_mode != BondModeArg::ActiveBackup {
            bail!("--primary {p} takes --bond-mode active-backup");
        }
        if !args.bonds.iter().any(|(_, m)| m.contains(p)) {
            bail!("--primary {p} is no bond's member (--bond NAME=IFACE,IFACE)");
        }
    }
    let arp = match (args.arp_interval, args.arp_ip_targets.is_empty()) {
        (0, true) => None,
        (0, false) => {
            bail!("--arp-ip-target needs --arp-interval MS: how often the members ask the targets")
        }
        (_, true) => bail!("--arp-interval needs --arp-ip-target ADDR: whom the members ask"),
        (ms, false) => Some(
            xskit_bond::ArpConfig::new(Duration::from_millis(ms), args.arp_ip_targets.clone())
                .missed_max(args.arp_missed_max),
        ),
    };
    if arp.is_some() && args.bonds.is_empty() {
        bail!("--arp-interval monitors a bond's members: give the bond with --bond");
    }
    Ok(args
        .bonds
        .iter()
        .map(|(name, members)| {
            BondConfig::new(name.clone(), members.clone(), mode)
                .arp(arp.clone())
                .primary(args.primary.clone().filter(|p| members.contains(p)))
                .primary_reselect(match args.primary_reselect {
                    ReselectArg::Always => PrimaryReselect::Always,
                    ReselectArg::Better => PrimaryReselect::Better,
                    ReselectArg::Failure => PrimaryReselect::Failure,
                })
                .num_grat_arp(args.num_grat_arp)
                .fail_over_mac(match args.fail_over_mac {
                    FailOverMacArg::None => FailOverMac::None,
                    FailOverMacArg::Active => FailOverMac::Active,
                })
                .updelay(Duration::from_millis(args.updelay))
                .downdelay(Duration::from_millis(args.downdelay))
                .lacp(lacp)
        })
        .collect())
}

/// 802.3ad's settings; refused with another mode, where they would do nothing.
fn lacp_config(args: &FwdArgs) -> Result<LacpConfig> {
    let given = [
        ("--lacp-rate", args.lacp_rate.is_some()),
        ("--lacp-active", args.lacp_active.is_some()),
        ("--ad-actor-sys-prio", args.ad_actor_sys_prio.is_some()),
        ("--ad-user-port-key", args.ad_user_port_key.is_some()),
        ("--min-links", args.min_links.is_some()),
        ("--ad-select", args.ad_select.is_some()),
    ];
    if args.bond_mode != BondModeArg::Lacp {
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            bail!("{flag} is an 802.3ad setting: it takes --bond-mode 802.3ad");
        }
    }
    let defaults = LacpConfig::default();
    let config = LacpConfig::default()
        .rate(match args.lacp_rate {
            Some(LacpRateArg::Fast) => LacpRate::Fast,
            Some(LacpRateArg::Slow) | None => LacpRate::Slow,
        })
        .active(args.lacp_active != Some(OnOff::Off))
        .system_priority(args.ad_actor_sys_prio.unwrap_or(defaults.system_priority))
        .user_port_key(args.ad_user_port_key.unwrap_or(defaults.user_port_key))
        .min_links(args.min_links.unwrap_or(defaults.min_links))
        .select(match args.ad_select {
            Some(AdSelectArg::Bandwidth) => AdSelect::Bandwidth,
            Some(AdSelectArg::Count) => AdSelect::Count,
            Some(AdSelectArg::Stable) | None => AdSelect::Stable,
        });
    config.validate()?;
    Ok(config)
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ChecksumArg {
    Offload,
    Software,
}

#[derive(Serialize)]
struct FwdJson<'a> {
    interfaces: &'a [String],
    modes: Vec<String>,
    /// The interfaces held promiscuous while forwarding.
    promiscuous: Vec<String>,
    warnings: &'a [String],
    #[serde(flatten)]
    report: &'a Report,
    /// With --capture: what the capture did.
    #[serde(skip_serializing_if = "Option::is_none")]
    capture: Option<crate::fwd_capture::CaptureTally>,
}

/// The flags behind a refused set-up, which the library's message cannot name.
fn flags_for(e: &xskit_fwd::Error) -> &'static str {
    use xskit_fwd::Error as E;
    match e {
        E::NowhereToForward { .. } => " (reflecting is --reflect)",
        E::XdpForwardConflict => " (--xdp-forward with --reflect, --respond or --tap)",
        E::NoSuchCpu { .. } | E::CpuNotAllowed { .. } => " (--cpus)",
        E::TooManyFrames { .. } => " (--ring-size, --queue-count)",
        E::BondNotUsed { .. } => " (-i NAME for each --bond NAME=...)",
        E::BondXdpForward => " (--xdp-forward with --bond-mode broadcast)",
        E::PrimaryNotMember { .. } => " (--primary)",
        E::Xsk(
            xskit::Error::ZeroCopyUnsupported { .. } | xskit::Error::ZeroCopyMultiBuffer { .. },
        ) => " (-m zc)",
        _ => "",
    }
}

/// A fwd command line, checked once (every mistake at once, before anything is opened)
/// into what the run uses.
struct FwdPlan {
    rules: RuleSet,
    times: crate::opts::RunTimes,
    /// The forwarder's configuration; none under `--explain`, which opens nothing.
    config: Option<ForwardConfig>,
}

impl FwdPlan {
    /// The times, the rules file, and what the forwarder checks of its configuration.
    fn new(args: &FwdArgs) -> Result<FwdPlan> {
        let mut m = crate::opts::Mistakes::default();
        let times = m.take(args.run.times());
        let rules = match &args.rules {
            Some(path) => load_rules(path),
            None => Ok(RuleSet::with_default(Verdict::Forward)),
        };
        // A rules file that cannot be read leaves the rest to be checked with the default
        // rules.
        let rules = rules.unwrap_or_else(|e| {
            m.note(e);
            RuleSet::with_default(Verdict::Forward)
        });
        let config = if args.explain {
            Some(None)
        } else {
            // Every interface that is not there, each named once: the forwarder's own check
            // stops at the first.
            let mut devices = devices(args);
            let mut seen = std::collections::HashSet::new();
            devices.retain(|d| seen.insert(d.clone()));
            for d in &devices {
                m.take(crate::opts::interface_exists(Ok(d)));
            }
            m.take(forward_config(args, rules.clone()).and_then(|c| validated(args, c)))
                .map(Some)
        };
        let plan = times.zip(config).map(|(times, config)| FwdPlan {
            rules,
            times,
            config,
        });
        m.finish_with(plan)
    }
}

/// `config` if the forwarder would take it; a missing interface is left to the check that
/// names every one.
fn validated(args: &FwdArgs, config: ForwardConfig) -> Result<ForwardConfig> {
    match config.validate() {
        Ok(()) | Err(xskit_fwd::Error::Xsk(xskit::Error::NoSuchInterface { .. })) => Ok(config),
        Err(e) => {
            let flags = flags_for(&e);
            Err(anyhow::Error::new(e).context(format!(
                "forwarding on {}{flags}",
                args.interfaces.join(" and ")
            )))
        }
    }
}

fn load_rules(path: &std::path::Path) -> Result<RuleSet> {
    RuleSet::from_file(path).context("--rules")
}

fn explain(share: xskit_fwd::rules::KernelShare<'_>) {
    let rules = share.rule_set();
    for (i, r) in rules.rules().iter().enumerate() {
        let place = if r.rate.is_some() {
            if share.forwards_in_xdp() {
                "policed in the kernel (XDP): over the rate dropped, the rest forwarded there"
            } else {
                "policed in the kernel (XDP): over the rate dropped, the rest forwarded in user space"
            }
        } else if share.decided_in_kernel(i) {
            "decided in the kernel (XDP)"
        } else {
            "matched in the kernel, carried out in user space"
        };
        let per = r.per_source.map_or(String::new(), |p| {
            let block = p.block.map_or(String::new(), |b| {
                format!(", blocked {}s over it", b.as_secs_f64())
            });
            format!(
                " (a bucket per source: IPv4 /{}, IPv6 /{}{block})",
                p.v4_len, p.v6_len
            )
        });
        out!(
            "{:>3} {:<22} {:<10} {}{per}",
            i + 1,
            r.name,
            r.verdict().name(),
            place
        );
    }
    let default = rules.default_verdict();
    out!(
        "    {:<22} {:<10} {}",
        "default",
        default.name(),
        if share.default_decided_in_kernel() {
            "decided in the kernel, or in user space for packets a rule above sent up"
        } else {
            "carried out in user space"
        }
    );
}

/// Every way a packet of this port was dropped or lost, non-zero ones only, totals so far.
fn drops(p: &PortCount) -> String {
    let items = p.drops();
    let listed: Vec<String> = items
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {}", thousands(*n)))
        .collect();
    if listed.is_empty() {
        "none".into()
    } else {
        listed.join("  ")
    }
}

/// The bonds' mode and its settings, as a header line says them.
fn bond_mode_text(args: &FwdArgs) -> String {
    match args.bond_mode {
        BondModeArg::BalanceXor => format!(
            "balance-xor, xmit_hash_policy {}",
            xskit_bond::XmitHashPolicy::from(args.xmit_hash).name()
        ),
        BondModeArg::BalanceRr => {
            format!("balance-rr, packets_per_slave {}", args.packets_per_slave)
        }
        BondModeArg::ActiveBackup => match &args.primary {
            Some(p) => format!(
                "active-backup, primary {p}, primary_reselect {}",
                match args.primary_reselect {
                    ReselectArg::Always => "always",
                    ReselectArg::Better => "better",
                    ReselectArg::Failure => "failure",
                }
            ),
            None => "active-backup".into(),
        },
        BondModeArg::Broadcast => "broadcast".into(),
        BondModeArg::Lacp => format!(
            "802.3ad, xmit_hash_policy {}, lacp_rate {}",
            xskit_bond::XmitHashPolicy::from(args.xmit_hash).name(),
            if args
                .lacp_rate
                .is_some_and(|r| matches!(r, LacpRateArg::Fast))
            {
                "fast"
            } else {
                "slow"
            }
        ),
    }
}

/// A bond member's line: its state and counts.
fn member_line(
    m: &xskit_fwd::MemberCount,
    last: Option<&xskit_fwd::MemberCount>,
    secs: f64,
) -> String {
    let rate = |a: u64, b: u64| thousands(((a - b.min(a)) as f64 / secs) as u64);
    let (rx, tx) = match last {
        Some(q) => (
            format!("{} pps", rate(m.rx_packets, q.rx_packets)),
            format!("{} pps", rate(m.tx_packets, q.tx_packets)),
        ),
        None => (thousands(m.rx_packets), thousands(m.tx_packets)),
    };
    let mut dropped = Vec::new();
    for (name, n) in [
        ("tx-ring-full", m.tx_dropped),
        ("inactive-rx", m.rx_inactive),
        ("socket-rx-dropped", m.socket_rx_dropped),
    ] {
        if n > 0 {
            dropped.push(format!("{name} {}", thousands(n)));
        }
    }
    format!(
        "member {:<10} {:<10} rx {:>11}  tx {:>11}  device-tx {:>11}  arp-alive {:>7}  dropped: {}",
        m.interface,
        match (m.up, m.active, m.carrier, &m.lacp) {
            (true, true, _, _) => "up active",
            (true, false, _, _) => "up",
            (false, _, false, _) => "no-carrier",
            (false, _, true, Some(_)) => "not-in-lacp",
            (false, _, true, None) => "arp-silent",
        },
        rx,
        tx,
        thousands(m.device_tx_packets),
        thousands(m.arp_alive),
        if dropped.is_empty() {
            "none".into()
        } else {
            dropped.join("  ")
        }
    )
}

/// An 802.3ad member's LACP state: its machines, both ends as LACP sees them (system
/// priority and MAC, key, port priority and number, state bits) and its PDU counts.
pub(crate) fn lacp_line(l: &xskit_fwd::MemberLacp) -> String {
    let end = |e: &xskit_fwd::LacpEnd| {
        format!(
            "system {} key {} port {} state 0x{:02x} ({})",
            e.system,
            e.key,
            e.port,
            e.state,
            e.flags.join(",")
        )
    };
    format!(
        "lacp {} {} aggregator {} rx {}  actor {}  partner {}  pdus in {} out {} bad {}  markers {}  slow frames passed in XDP {}  state changes {}",
        l.mux_state,
        l.selected,
        l.aggregator.map_or("none".into(), |a| a.to_string()),
        l.rx_state,
        end(&l.actor),
        end(&l.partner),
        thousands(l.pdus_in),
        thousands(l.pdus_out),
        thousands(l.bad_pdus),
        thousands(l.markers),
        thousands(l.slow_frames),
        thousands(l.state_changes),
    )
}

/// A bond's own drops and changes, when there are any.
fn bond_line(b: &xskit_fwd::BondCount) -> Option<String> {
    (b.tx_no_member + b.tx_no_frame + b.failovers + b.link_changes > 0).then(|| {
        format!(
            "bond: failovers {}  link changes {}  no member up (dropped) {}  broadcast copies not made {}",
            b.failovers,
            b.link_changes,
            thousands(b.tx_no_member),
            thousands(b.tx_no_frame)
        )
    })
}

/// Says when a side's link went down or came back since the last tick.
fn note_link_changes(now: &Counters, last: &Counters) {
    let before = last
        .ports
        .iter()
        .map(|p| p.link_changes)
        .chain(std::iter::repeat(0));
    for (p, changes) in now.ports.iter().zip(before) {
        if p.link_changes == changes || p.bond.is_some() {
            continue;
        }
        if p.link_up {
            note!("xskit fwd: {} is up again", p.interface);
        } else {
            note!(
                "xskit fwd: {} is down: what is sent to it waits in its tx rings, then is \
                 dropped and counted as tx-ring-full",
                p.interface
            );
        }
    }
}

fn answered_any(c: &Counters) -> bool {
    c.arp_replies + c.echo_replies + c.respond_refused > 0
}

fn print_tick(elapsed: f64, now: &Counters, last: &Counters, secs: f64) {
    let rate = |a: u64, b: u64| thousands(((a - b.min(a)) as f64 / secs) as u64);
    for (p, q) in now.ports.iter().zip(last.ports.iter()) {
        out!(
            "{elapsed:7.1}s {:<12} rx {:>11} pps  tx {:>11} pps  xdp-fwd {:>11}  xdp-drop {:>9}  xdp-pass {:>9}  kernel {:>7}  dropped: {}",
            p.interface,
            rate(p.user.rx_packets, q.user.rx_packets),
            rate(p.user.tx_packets, q.user.tx_packets),
            rate(p.xdp_forwarded, q.xdp_forwarded),
            rate(p.xdp_dropped, q.xdp_dropped),
            rate(p.xdp_passed, q.xdp_passed),
            rate(p.user.to_kernel, q.user.to_kernel),
            drops(p),
        );
        if let Some(b) = &p.bond {
            let last = q.bond.as_ref().map(|b| &b.members);
            for (i, m) in b.members.iter().enumerate() {
                let before = last.and_then(|l| l.get(i));
                let zero = xskit_fwd::MemberCount::default();
                out!(
                    "{elapsed:7.1}s   {}",
                    member_line(m, Some(before.unwrap_or(&zero)), secs)
                );
                if let Some(l) = &m.lacp {
                    out!("{elapsed:7.1}s     {}", lacp_line(l));
                }
            }
            if let Some(line) = bond_line(b) {
                out!("{elapsed:7.1}s   {line}");
            }
        }
    }
    let unclassifiable =
        (now.unclassifiable.packets > 0).then_some((&now.unclassifiable, &last.unclassifiable));
    // A long list shows the rules that matched in the interval, the busiest.
    let moved: Vec<u64> = now
        .rules
        .iter()
        .zip(&last.rules)
        .map(|(r, q)| r.packets - q.packets.min(r.packets))
        .collect();
    let (shown, rest) = crate::rule_lines::shown(&moved);
    let pairs = shown
        .iter()
        .filter_map(|&i| now.rules.get(i).zip(last.rules.get(i)));
    for (r, q) in pairs.chain(unclassifiable) {
        out!(
            "{elapsed:7.1}s   rule {:<18} {:<10} {:>11} pps  total {:>13}{}",
            r.name,
            r.action,
            rate(r.packets, q.packets),
            thousands(r.packets),
            limit_words(r)
        );
    }
    if let Some(rest) = rest {
        out!("{elapsed:7.1}s   {rest} in the last {secs:.0} s");
    }
    if let Some(line) = blocked_line(now) {
        out!("{elapsed:7.1}s   {line}");
    }
    for line in element_lines(now) {
        out!("{elapsed:7.1}s   {line}");
    }
    if answered_any(now) {
        out!(
            "{elapsed:7.1}s   answered ARP {}  echo {}  refused {}",
            thousands(now.arp_replies),
            thousands(now.echo_replies),
            thousands(now.respond_refused)
        );
    }
}

impl FwdArgs {
    /// How much of its bonds' doings to tell on stderr (-v, -vv).
    pub(crate) fn verbose(&self) -> u8 {
        self.verbose
    }
}

pub(crate) fn run(args: &FwdArgs) -> Result<i32> {
    if args.help_rules {
        out!("{}", crate::help::RULES_REFERENCE.trim_end());
        return Ok(0);
    }
    let FwdPlan {
        rules,
        times,
        config,
    } = FwdPlan::new(args)?;
    let (duration, interval) = (times.duration, times.interval);
    // Said after the header, which a driver waits for as the sign that the ports are open.
    let notes = rule_notes(args, &rules);
    let Some(config) = config else {
        notes.iter().for_each(|n| note!("xskit fwd: {n}"));
        explain(
            rules
                .kernel_share(args.xdp_forward)
                .passing_to_tap(args.tap.is_some()),
        );
        return Ok(0);
    };
    let stop = stop_flag()?;
    // Taken from here on, so that a SIGHUP before the forwarder runs does not end it.
    let hangups = hangups()?;
    let group = control_group(args)?;
    let (live, forwarder, mut control, no_control) = if args.takeover {
        take_over(args, config, group)?
    } else {
        let mut live = args.run.live("fwd")?;
        // Before anything is attached: a --control path that cannot be served stops it here.
        let (control, no_control) = start_control(args, group, &mut live, false)?;
        let forwarder = Forwarder::new(config).map_err(|e| setting_up(args, e))?;
        (live, forwarder, control, no_control)
    };
    if let Some(control) = &control {
        serve_control(control, &forwarder, &live)?;
    }
    Reload {
        path: args.rules.clone(),
        changer: forwarder.rule_changer(),
    }
    .on_every(hangups);
    let header = header(args, &forwarder);
    live.announce(&header);
    announce_control(control.as_ref(), no_control);
    notes.iter().for_each(|n| note!("xskit fwd: {n}"));
    announce_setup(args, &forwarder);
    let status = header
        .trim_start_matches("xskit fwd: ")
        .trim_end_matches("; Ctrl-C stops");
    crate::service::ready(&format!("forwarding {status}"), args.takeover);
    let capture = start_capture(args, &forwarder)?;
    if let Some(d) = duration {
        stop_after(d, &stop);
    }
    let (modes, promiscuous) = (forwarder.modes(), forwarder.promiscuous());
    let warnings = forwarder.warnings().to_vec();
    let report = forward(args, forwarder, &stop, interval, (&live, control.as_ref()))?;
    ended(args, &report, &live, control.as_mut());
    let captured = finish_capture(args, capture)?;
    if args.run.json_output() {
        crate::opts::print_json(
            "fwd",
            &FwdJson {
                interfaces: &args.interfaces,
                modes,
                promiscuous,
                warnings: &warnings,
                report: &report,
                capture: captured,
            },
        )?;
    } else {
        print_report(&report);
    }
    Ok(exit_status(args, &report))
}

/// The control socket takes applies for `forwarder`, and hands the metrics' socket to a
/// successor with the forwarder's.
fn serve_control(
    control: &ControlServer,
    forwarder: &Forwarder,
    live: &crate::opts::Live,
) -> Result<()> {
    control.take_applies(forwarder.rule_changer());
    if let Some(metrics) = live.metrics_listener() {
        control.hand_also("metrics", metrics)?;
    }
    Ok(())
}

/// After the run: says it stops (to the service manager, and what stays in the kernel), or,
/// handed over, leaves the metrics' and control sockets to the successor, where the service
/// goes on.
fn ended(
    args: &FwdArgs,
    report: &xskit_fwd::Report,
    live: &crate::opts::Live,
    control: Option<&mut ControlServer>,
) {
    if report.handed_to.is_none() {
        crate::service::stopping();
        note_kept(args);
        return;
    }
    live.leave_metrics_to_successor();
    if let Some(control) = control {
        control.leave_to_successor();
    }
}

/// The error of a set-up, with the flags to look at.
fn setting_up(args: &FwdArgs, e: xskit_fwd::Error) -> anyhow::Error {
    let flags = flags_for(&e);
    anyhow::Error::new(e).context(format!(
        "setting up forwarding on {}{flags}",
        args.interfaces.join(" and ")
    ))
}

/// What `run` starts with.
type Started = (
    crate::opts::Live,
    Forwarder,
    Option<ControlServer>,
    Option<String>,
);

/// `--takeover`: asks the running forwarder to hand over, checks what came, commits, and
/// sets up on it; then serves the control socket in its place, and the metrics once its
/// port is free.
fn take_over(args: &FwdArgs, config: ForwardConfig, group: Option<u32>) -> Result<Started> {
    let path = control_path(args).context("--takeover")?;
    let (client, mut inherited) = xskit_fwd::control::HandoverClient::request(&path)
        .with_context(|| format!("--takeover: asking the forwarder at {}", path.display()))?;
    let metrics = inherited.take_extra("metrics");
    let predecessor = inherited.state().pid;
    let forwarder = Forwarder::take_over(config, inherited, client).map_err(|e| {
        setting_up(args, e).context(format!(
            "--takeover: from forwarder {predecessor} (which goes on unless it had paused for \
             this one, then nothing forwards: start a forwarder without --takeover)"
        ))
    })?;
    let mut live = args.run.live_without_metrics("fwd");
    let (control, no_control) = start_control(args, group, &mut live, true)?;
    live.start_metrics_when_free(&args.run, metrics)?;
    match forwarder.carried_rules() {
        Some(rules) => note!(
            "xskit fwd: took over from forwarder {predecessor}, with the counters and rate-limit \
             state of {rules} rules (by name)"
        ),
        None => note!("xskit fwd: took over from forwarder {predecessor}"),
    }
    Ok((live, forwarder, control, no_control))
}

/// Where the control socket is: `--control`, or the default in the runtime directory.
fn control_path(args: &FwdArgs) -> Result<std::path::PathBuf> {
    if args.no_control {
        bail!("there is no control socket (--no-control)");
    }
    Ok(match &args.control {
        Some(path) => path.clone(),
        None => crate::state::dir().join(xskit_fwd::control::socket_name(
            &args.interfaces,
            crate::state::netns(),
        )),
    })
}

/// Says what stays in the kernel after an exit with --on-exit kernel.
fn note_kept(args: &FwdArgs) {
    if args.on_exit != OnExit::Kernel {
        return;
    }
    let dir = args.bpf_dir.join(xskit_fwd::control::forwarder_name(
        &args.interfaces,
        crate::state::netns(),
    ));
    note!(
        "xskit fwd: the XDP programs stay on {} (--on-exit kernel, pinned in {}): their \
         rules' drops go on, and what user space would decide is dropped and counted until \
         a forwarder on the same interfaces takes them over; rm -r {} detaches them",
        args.interfaces.join(" and "),
        dir.display(),
        dir.display()
    );
}

/// Closes the capture file, saying what it holds.
fn finish_capture(
    args: &FwdArgs,
    capture: Option<crate::fwd_capture::FwdCapture>,
) -> Result<Option<crate::fwd_capture::CaptureTally>> {
    let captured = capture
        .map(crate::fwd_capture::FwdCapture::finish)
        .transpose()?;
    if let (Some(c), Some(path)) = (captured, &args.capture) {
        note!(
            "xskit fwd: {} packets captured to {}, {} skipped by the --capture-rate cap, {} lost \
             (the perf buffer was full)",
            thousands(c.captured),
            path.display(),
            thousands(c.skipped),
            thousands(c.lost)
        );
    }
    Ok(captured)
}

/// The forwarder's configuration from the command line.
fn forward_config(args: &FwdArgs, rules: RuleSet) -> Result<ForwardConfig> {
    crate::opts::check_ring_size(args.ring_size, "vector size (--vector)", args.vector)?;
    Ok(ForwardConfig::default()
        .interfaces(args.interfaces.clone())
        .mode(args.mode.into())
        .queues(args.queues)
        .rules(rules)
        .reflect(args.reflect)
        .respond(args.respond)
        .tap(args.tap.clone())
        .xdp_forward(args.xdp_forward)
        .check(args.check)
        .vector(args.vector)
        .frames(None)
        .cpus(args.cpus.clone())
        .socket(
            SocketConfig::default()
                .rx_size(args.ring_size)
                .tx_size(args.ring_size)
                .fill_size(args.ring_size.saturating_mul(2))
                .completion_size(args.ring_size),
        )
        .promiscuous(!args.no_promisc)
        .pins(Some(args.bpf_dir.join(xskit_fwd::control::forwarder_name(
            &args.interfaces,
            crate::state::netns(),
        ))))
        .keep_in_kernel(args.on_exit == OnExit::Kernel)
        .checksum(match args.checksum {
            ChecksumArg::Offload => ChecksumMode::Offload,
            ChecksumArg::Software => ChecksumMode::Software,
        })
        .bonds(bond_configs(args)?))
}

/// The line that says the forwarder runs, and how.
fn header(args: &FwdArgs, forwarder: &Forwarder) -> String {
    format!(
        "xskit fwd: {} ({}, {}){}{}{}{}; Ctrl-C stops",
        args.interfaces.join(" <-> "),
        forwarder.modes().join(", "),
        if forwarder.zero_copy() {
            "zero-copy"
        } else {
            "copy"
        },
        if args.reflect { ", reflecting" } else { "" },
        if args.xdp_forward {
            ", forwarding in XDP where the rules allow"
        } else {
            ""
        },
        args.respond
            .map(|a| format!(", answering for {a}"))
            .unwrap_or_default(),
        args.tap
            .as_ref()
            .map(|t| format!(", kernel path via {t}"))
            .unwrap_or_default(),
    )
}

/// What to say of the rules file at the start: that it has no rules, and what its sets hold.
fn rule_notes(args: &FwdArgs, rules: &RuleSet) -> Vec<String> {
    let mut notes = Vec::new();
    if let (Some(path), []) = (&args.rules, rules.rules()) {
        notes.push(format!(
            "{} has no rules: every packet takes the default ({})",
            path.display(),
            rules.default_verdict().name()
        ));
    }
    if let Some(v) = rules.vectors() {
        notes.push(format!(
            "{} rules, looked up by bit vectors: {} vectors and {} IPv6 rule prefixes; in the \
             kernel about {:.1} MiB on each interface (twice the tables, so that a change \
             is put in force whole)",
            thousands(v.rules() as u64),
            thousands(v.len() as u64),
            thousands(v.trie_entries() as u64),
            v.kernel_bytes() as f64 / f64::from(1 << 20)
        ));
    }
    notes.extend(set_lines(rules));
    notes
}

/// A line for each of the rules file's sets: what was read, and the kernel memory it takes.
fn set_lines(rules: &RuleSet) -> Vec<String> {
    let ports = rules.port_sets().iter().map(|set| {
        format!(
            "set {}: {} ports; in the kernel a bitmap of 8 KiB on each interface",
            set.name(),
            thousands(set.len() as u64)
        )
    });
    rules
        .sets()
        .iter()
        .map(|set| {
            let st = set.stats();
            let mut read = Vec::new();
            if st.normalised > 0 {
                read.push(format!(
                    "{} with host bits set, taken as their networks",
                    thousands(st.normalised as u64)
                ));
            }
            if st.covered > 0 {
                read.push(format!(
                    "{} duplicates or inside another",
                    thousands(st.covered as u64)
                ));
            }
            let read = if read.is_empty() {
                String::new()
            } else {
                format!(" ({})", read.join(", "))
            };
            let (partial, trie) = set.kernel_entries();
            if set.is_tracked() {
                return tracked_set_line(set, &read);
            }
            let bytes = xskit_fwd::rules::set_kernel_bytes(1, partial, trie);
            format!(
                "set {}: {} prefixes, {} of them IPv6{read}; in the kernel /16 and /24 tables, {} \
                 /24s held in part and {} IPv6 trie entries, about {:.1} MiB on each interface",
                set.name(),
                thousands(st.prefixes as u64),
                thousands(st.ipv6 as u64),
                thousands(partial as u64),
                thousands(trie as u64),
                bytes as f64 / f64::from(1 << 20)
            )
        })
        .chain(ports)
        .collect()
}

/// `--explain`'s line for a set with timeouts or counters: kept element by element.
fn tracked_set_line(set: &xskit_fwd::rules::PrefixSet, read: &str) -> String {
    let st = set.stats();
    let (_, trie) = set.kernel_entries();
    let elements = set.kernel_elements();
    let bytes = xskit_fwd::rules::set_kernel_bytes(1, 0, trie + elements);
    let counted = if set.counts_elements() {
        ", each counting its hits"
    } else {
        ""
    };
    format!(
        "set {}: {} prefixes, {} of them IPv6, {} with a timeout{read}; in the kernel element \
         by element{counted} ({} elements in a trie, an expired one looked past to a shorter \
         live one), about {:.1} MiB on each interface",
        set.name(),
        thousands(st.prefixes as u64),
        thousands(st.ipv6 as u64),
        thousands(st.timed as u64),
        thousands(elements as u64),
        bytes as f64 / f64::from(1 << 20)
    )
}

fn announce_setup(args: &FwdArgs, forwarder: &Forwarder) {
    for (name, members) in &args.bonds {
        note!(
            "xskit fwd: bond {name}: {} over {}",
            bond_mode_text(args),
            members.join(", ")
        );
    }
    for w in forwarder.warnings() {
        note!("xskit fwd: note: {w}");
    }
    let kept = forwarder.kept_programs_taken_over();
    if !kept.is_empty() {
        note!(
            "xskit fwd: took over the XDP programs an earlier forwarder left on {} (--on-exit \
             kernel), each replaced in one step",
            kept.join(", ")
        );
    }
    let promiscuous = forwarder.promiscuous();
    if !promiscuous.is_empty() {
        note!(
            "xskit fwd: {} promiscuous while forwarding (--no-promisc leaves the MAC filters \
             alone)",
            promiscuous.join(", ")
        );
    }
}

/// The devices the command line names: each interface, or a bond's members in its place (to
/// check before anything is opened; the forwarder's own list is [`Forwarder::devices`]).
fn devices(args: &FwdArgs) -> Vec<String> {
    args.interfaces
        .iter()
        .flat_map(|i| match args.bonds.iter().find(|(name, _)| name == i) {
            Some((_, members)) => members.clone(),
            None => vec![i.clone()],
        })
        .collect()
}

/// With --capture: the capture thread, on every interface a program runs on.
fn start_capture(
    args: &FwdArgs,
    forwarder: &Forwarder,
) -> Result<Option<crate::fwd_capture::FwdCapture>> {
    let Some(path) = &args.capture else {
        return Ok(None);
    };
    let capture = crate::fwd_capture::FwdCapture::start(
        path,
        forwarder.devices(),
        forwarder.capture_reasons(),
        args.capture_rate,
    )?;
    note!(
        "xskit fwd: capturing to {} (at most {} packets a second)",
        path.display(),
        args.capture_rate
    );
    Ok(Some(capture))
}

/// SIGHUP, which would otherwise end the forwarder without its summary: each asks for the
/// rules file to be read again ([`Reload`]).
fn hangups() -> Result<signal_hook::iterator::Signals> {
    signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .context("installing a signal handler")
}

/// What SIGHUP does: `--rules` read again and applied, as `xskit ctl apply` does, on a
/// thread of its own (the forwarder's supervisor, which answers applies, must not wait on
/// it); signals that come during a reload make one more after it.
struct Reload {
    path: Option<std::path::PathBuf>,
    changer: xskit_fwd::RuleChanger,
}

impl Reload {
    /// Reloads on each of `hangups`, on a thread of its own for as long as the process
    /// lives (after the forwarder stops, a reload is refused, saying so).
    fn on_every(self, mut hangups: signal_hook::iterator::Signals) {
        std::thread::spawn(move || {
            for _ in hangups.forever() {
                self.reload();
            }
        });
    }

    /// Reads the rules file again and applies it, saying what it did.
    fn reload(&self) {
        let Some(path) = &self.path else {
            note!("xskit fwd: SIGHUP: no --rules file to read again; forwarding goes on as it was");
            return;
        };
        let applied = load_rules(path).and_then(|rules| {
            self.changer
                .apply(rules, xskit_fwd::control::APPLY_TIMEOUT)
                .map_err(anyhow::Error::from)
        });
        match applied {
            Ok(a) => note!(
                "xskit fwd: SIGHUP: {} applied: generation {}, {} rules ({} kept with their \
                     counters, {} new, {} gone)",
                path.display(),
                a.generation,
                a.rules,
                a.kept,
                a.added,
                a.removed
            ),
            Err(e) => note!(
                "xskit fwd: SIGHUP: {} refused, the running rules stand: {e:#}",
                path.display()
            ),
        }
    }
}

/// Says where the control socket is, or why there is none.
fn announce_control(control: Option<&ControlServer>, no_control: Option<String>) {
    match (control, no_control) {
        (Some(c), _) => note!(
            "xskit fwd: control socket {} (xskit ctl)",
            c.path().display()
        ),
        (None, Some(why)) => note!(
            "xskit fwd: no control socket ({why}); --control PATH puts it where this user may, \
             --no-control says none is wanted"
        ),
        (None, None) => {}
    }
}

/// Sets `stop` once `duration` has passed.
fn stop_after(duration: Duration, stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let stop = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// `--control-group`'s group id: a number, or a group's name looked up.
fn control_group(args: &FwdArgs) -> Result<Option<u32>> {
    let Some(group) = &args.control_group else {
        return Ok(None);
    };
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(Some(gid));
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(Some(g.gid.as_raw())),
        Ok(None) => bail!("--control-group {group}: no such group (getent group lists them)"),
        Err(e) => bail!("--control-group {group}: cannot look the group up ({e})"),
    }
}

/// The control socket: at `--control`, or by default in the runtime directory, named after
/// the interfaces and the network namespace. The default is skipped where it cannot be made
/// (a user without /run/xskit), saying why; a path given that cannot be served is an error.
fn start_control(
    args: &FwdArgs,
    group: Option<u32>,
    live: &mut crate::opts::Live,
    replace: bool,
) -> Result<(Option<ControlServer>, Option<String>)> {
    if args.no_control {
        return Ok((None, None));
    }
    let start = |live: &mut crate::opts::Live, path: &std::path::Path| {
        ControlServer::start(live.events()?, path, group, replace)
    };
    if let Some(path) = &args.control {
        let server = start(live, path).with_context(|| format!("--control {}", path.display()))?;
        return Ok((Some(server), None));
    }
    let path = control_path(args)?;
    let dir = crate::state::dir();
    let started = std::fs::create_dir_all(&dir)
        .map_err(anyhow::Error::from)
        .and_then(|()| start(live, &path));
    Ok(match started {
        Ok(server) => (Some(server), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    })
}

/// Runs the forwarder until `stop`, publishing and printing its counters each interval.
fn forward(
    args: &FwdArgs,
    forwarder: Forwarder,
    stop: &std::sync::atomic::AtomicBool,
    interval: std::time::Duration,
    (live, control): (&crate::opts::Live, Option<&ControlServer>),
) -> Result<Report> {
    let start = Instant::now();
    let mut last = Counters::default();
    let mut last_at = Instant::now();
    let json = args.run.json_output();
    let mut state = crate::state::StateFile::new();
    let report = forwarder
        .run(stop, interval, |c| {
            state.write(c);
            live.tick(c);
            if let Some(control) = control {
                if let Ok(line) = live.interval_line(c) {
                    control.publish(line);
                }
            }
            note_link_changes(c, &last);
            if !json {
                let secs = last_at.elapsed().as_secs_f64().max(1e-3);
                if last.ports.is_empty() {
                    last = Counters {
                        ports: c.ports.iter().map(|_| Default::default()).collect(),
                        rules: c.rules.iter().map(|_| Default::default()).collect(),
                        ..Counters::default()
                    };
                }
                print_tick(start.elapsed().as_secs_f64(), c, &last, secs);
            }
            last = c.clone();
            last_at = Instant::now();
        })
        .context("forwarding")?;
    Ok(report)
}

/// The summary at the end, as text.
fn print_report(report: &Report) {
    if let Some(pid) = report.handed_to {
        out!(
            "handed over after {:.1} s to forwarder {pid}: it has the sockets, the UMEM's {} \
             frames and the programs; the counters below are this forwarder's",
            report.duration_s,
            report.frames.total
        );
    } else {
        print_frames(report);
    }
}

/// Where the frames are at the end.
fn print_frames(report: &Report) {
    out!(
        "stopped after {:.1} s: frames {} = pool {} + fill {} + rx {} + tx {} + held by the kernel {}{}",
        report.duration_s,
        report.frames.total,
        report.frames.pool,
        report.frames.fill,
        report.frames.rx,
        report.frames.tx,
        report.frames.kernel_held,
        if report.frames.unaccounted == 0 {
            String::new()
        } else {
            format!(" ({} unaccounted)", report.frames.unaccounted)
        }
    );
    for p in &report.counters.ports {
        print_port(p);
    }
    let c = &report.counters;
    // A long list shows its busiest rules (--json has every one).
    let totals: Vec<u64> = c.rules.iter().map(|r| r.packets).collect();
    let (shown, rest) = crate::rule_lines::shown(&totals);
    let rules = shown.iter().filter_map(|&i| c.rules.get(i));
    for r in rules.chain(std::iter::once(&c.unclassifiable)) {
        out!(
            "  rule {:<18} {:<10} packets {}  bytes {}  in kernel {}{}",
            r.name,
            r.action,
            thousands(r.packets),
            thousands(r.bytes),
            thousands(r.in_kernel),
            limit_words(r)
        );
    }
    if let Some(rest) = rest {
        out!("  {rest} (--json lists every rule)");
    }
    if let Some(line) = blocked_line(c) {
        out!("  {line}");
    }
    for line in element_lines(c) {
        out!("  {line}");
    }
    if answered_any(c) {
        out!(
            "  answered ARP {}  echo {}  refused {}",
            thousands(c.arp_replies),
            thousands(c.echo_replies),
            thousands(c.respond_refused)
        );
    }
}

/// What a rule's rate limit did, when it did anything: "  over rate N  blocked N (sources N,
/// refused N)".
fn limit_words(r: &RuleCount) -> String {
    let mut words = String::new();
    if r.over_rate > 0 {
        words += &format!("  over rate {}", thousands(r.over_rate));
    }
    if r.sources_blocked > 0 || r.blocked > 0 || r.blocks_refused > 0 {
        words += &format!(
            "  blocked {} (sources {}, refused {})",
            thousands(r.blocked),
            thousands(r.sources_blocked),
            thousands(r.blocks_refused)
        );
    }
    words
}

/// The sources blocked now, most dropped first, when there are any.
fn blocked_line(c: &Counters) -> Option<String> {
    if c.blocked_sources.is_empty() {
        return None;
    }
    let top: Vec<String> = c
        .blocked_sources
        .iter()
        .take(5)
        .map(|b| {
            format!(
                "{} ({} {}, {}s)",
                b.source,
                b.rule,
                thousands(b.drops),
                b.left_s
            )
        })
        .collect();
    Some(format!(
        "blocked now {}, most dropped: {}",
        thousands(c.blocked_now),
        top.join("  ")
    ))
}

/// The sets with timeouts or counters: their elements, the expired, and the busiest.
fn element_lines(c: &Counters) -> Vec<String> {
    c.sets
        .iter()
        .map(|s| {
            let mut line = format!(
                "set {}: {} elements, {} expired",
                s.name,
                thousands(s.elements),
                thousands(s.expired)
            );
            if !s.top.is_empty() {
                let top: Vec<String> = s
                    .top
                    .iter()
                    .take(5)
                    .map(|e| match e.left_s {
                        Some(left) => format!("{} {} ({left}s)", e.element, thousands(e.packets)),
                        None => format!("{} {}", e.element, thousands(e.packets)),
                    })
                    .collect();
                line += &format!(
                    "; {} packets matched, most: {}",
                    thousands(s.packets),
                    top.join("  ")
                );
            }
            line
        })
        .collect()
}

/// One interface's lines of the summary, and its bond's members'.
fn print_port(p: &PortCount) {
    out!(
        "  {:<12} rx {}  tx {}  xdp-fwd {}  xdp-drop {}  xdp-pass {}  to-kernel {}  from-kernel {}",
        p.interface,
        thousands(p.user.rx_packets),
        thousands(p.user.tx_packets),
        thousands(p.xdp_forwarded),
        thousands(p.xdp_dropped),
        thousands(p.xdp_passed),
        thousands(p.user.to_kernel),
        thousands(p.user.from_kernel)
    );
    out!(
        "  {:<12} dropped: {}  checksums finished {}  super-packets segmented {} (into {})  copies {}",
        "",
        drops(p),
        thousands(p.user.checksums_offloaded + p.user.checksums_completed),
        thousands(p.user.segmented),
        thousands(p.user.segments),
        thousands(p.user.copies)
    );
    if p.user.tx_stall_wakeups > 0 {
        out!(
            "  {:<12} transmit woken {} times unasked: frames had waited a millisecond, none taken or completed",
            "",
            thousands(p.user.tx_stall_wakeups)
        );
    }
    if let Some(b) = &p.bond {
        for m in &b.members {
            out!("  {:<12} {}", "", member_line(m, None, 1.0));
            if let Some(l) = &m.lacp {
                out!("  {:<12}   {}", "", lacp_line(l));
            }
        }
        if let Some(line) = bond_line(b) {
            out!("  {:<12} {line}", "");
        }
    }
}

/// The exit status, after saying on stderr what went wrong: 1 for a fault, or for frames
/// unaccounted under --check.
fn exit_status(args: &FwdArgs, report: &Report) -> i32 {
    for p in &report.counters.ports {
        if p.xdp_forward_undelivered > 0 {
            note!(
                "xskit fwd: {} packets forwarded in XDP did not leave {} (its transmit counter \
                 says so): on veth, the far end needs GRO on or an XDP program",
                thousands(p.xdp_forward_undelivered),
                p.interface
            );
        }
    }
    if let Some(fault) = &report.fault {
        note!("xskit fwd: stopped early: {fault}");
        return 1;
    }
    if report.frames.unaccounted != 0 {
        note!(
            "xskit fwd: {} frames unaccounted at exit: a frame was lost or counted twice",
            report.frames.unaccounted
        );
        if args.check {
            return 1;
        }
    }
    0
}
