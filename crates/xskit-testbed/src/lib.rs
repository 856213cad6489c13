#![doc = include_str!("../README.md")]

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

use nix::sched::{setns, CloneFlags};

/// Prefix of every namespace a testbed creates: `xskit-<pid>-<n>-<host>`.
pub const NS_PREFIX: &str = "xskit-";

/// Namespaces created by this process and not yet removed, for the signal handler.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NEXT: AtomicU32 = AtomicU32::new(0);
static SIGNALS: Once = Once::new();

/// Which documentation subnet the testbed's hosts are numbered from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Subnet {
    /// 198.51.100.0/24 (TEST-NET-2).
    #[default]
    TestNet2,
    /// 203.0.113.0/24 (TEST-NET-3).
    TestNet3,
}

impl Subnet {
    fn host(self, n: u8) -> Ipv4Addr {
        match self {
            Subnet::TestNet2 => Ipv4Addr::new(198, 51, 100, n),
            Subnet::TestNet3 => Ipv4Addr::new(203, 0, 113, n),
        }
    }
}

/// How to build a testbed: `TestbedConfig::default()` and the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TestbedConfig {
    /// Receive and transmit queues of each veth end.
    pub queues: u32,
    /// MTU of the link (None: the default 1500).
    pub mtu: Option<u32>,
    /// Address block.
    pub subnet: Subnet,
    /// Keep IPv6 on. Off by default, so that no router solicitation or DAD packet mixes with
    /// the traffic a test counts.
    pub ipv6: bool,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            queues: 1,
            mtu: None,
            subnet: Subnet::default(),
            ipv6: false,
        }
    }
}

xskit_os::config_setters!(TestbedConfig {
    /// Sets the queues of each veth end.
    queues: u32,
    /// Sets the link's MTU (`None`: 1500).
    mtu: Option<u32>,
    /// Sets the address block.
    subnet: Subnet,
    /// Keeps IPv6 on, or not.
    ipv6: bool,
});

mod guest;
pub use guest::{
    check_requirements, errors_written, kernel_dir, qemu_dir, Guest, GuestConfig, GuestKernel,
    GuestRun, GuestWire, RunningGuest, BRIDGE_A, BRIDGE_C, WAIT_FOR,
};

/// A network namespace by name (under /run/netns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn enter(&self) -> io::Result<()> {
        let file = File::open(Path::new("/run/netns").join(&self.name))?;
        setns(file, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
    }

    /// Runs `f` on a thread inside the namespace and returns its result. A panic in `f` is
    /// resumed on the calling thread.
    pub fn run<F, R>(&self, f: F) -> io::Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        std::thread::scope(|s| {
            let handle = s.spawn(|| -> io::Result<R> {
                self.enter()?;
                Ok(f())
            });
            match handle.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Starts `f` on a new thread inside the namespace.
    pub fn spawn<F, R>(&self, f: F) -> std::thread::JoinHandle<io::Result<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let ns = self.clone();
        std::thread::spawn(move || {
            ns.enter()?;
            Ok(f())
        })
    }

    /// A command that runs `program` inside the namespace (through `ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }
}

/// One end of the link: a host namespace and its interface.
#[derive(Clone, Debug)]
pub struct Host {
    /// The host's namespace.
    pub ns: Netns,
    /// Its veth interface.
    pub ifname: String,
    /// Its IPv4 address (/24).
    pub ip: Ipv4Addr,
    /// Its IPv6 address (/64), where the testbed enables IPv6.
    pub ip6: Option<std::net::Ipv6Addr>,
    /// Its MAC address.
    pub mac: [u8; 6],
}

/// Two hosts joined by a veth pair. Dropping it removes both namespaces and the link.
#[derive(Debug)]
pub struct Testbed {
    /// The first host (the veth end `xsk-a`).
    pub a: Host,
    /// The second host (the veth end `xsk-b`).
    pub b: Host,
}

fn run(cmd: &mut Command) -> io::Result<Output> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run {:?} ({e}): install iproute2", cmd.get_program()),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

fn ip(args: &[&str]) -> io::Result<Output> {
    run(Command::new("ip").args(args))
}

fn mac_string(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A veth pair: `name` (with MAC `mac`) in namespace `ns`, its peer `peer` in `peer_ns`.
fn veth(name: &str, ns: &str, mac: &[u8; 6], peer: &str, peer_ns: &str) -> io::Result<Output> {
    let mac = mac_string(mac);
    ip(&[
        "link", "add", name, "netns", ns, "address", &mac, "type", "veth", "peer", "name", peer,
        "netns", peer_ns,
    ])
}

/// A veth pair between `a` and `b`, with their names and MACs and `queues` queues each way.
fn veth_with_queues(a: &Host, b: &Host, queues: u32) -> io::Result<Output> {
    let q = queues.to_string();
    let (mac_a, mac_b) = (mac_string(&a.mac), mac_string(&b.mac));
    ip(&[
        "link",
        "add",
        &a.ifname,
        "netns",
        &a.ns.name,
        "address",
        &mac_a,
        "numrxqueues",
        &q,
        "numtxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        &b.ifname,
        "netns",
        &b.ns.name,
        "address",
        &mac_b,
        "numrxqueues",
        &q,
        "numtxqueues",
        &q,
    ])
}

/// The host's MTU (if set), its IPv4 address (if it has one: a bridge port has none), and
/// its interface and loopback up.
fn address_host(host: &Host, mtu: Option<u32>) -> io::Result<()> {
    let ns = host.ns.name.as_str();
    if let Some(mtu) = mtu {
        let mtu = mtu.to_string();
        ip(&["-n", ns, "link", "set", &host.ifname, "mtu", &mtu])?;
    }
    if !host.ip.is_unspecified() {
        let addr = format!("{}/24", host.ip);
        ip(&["-n", ns, "addr", "add", &addr, "dev", &host.ifname])?;
    }
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    ip(&["-n", ns, "link", "set", &host.ifname, "up"])?;
    Ok(())
}

fn delete_ns(name: &str) {
    // Deleting the namespace destroys the veth end inside it, and with it the pair.
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn forget(name: &str) {
    let mut live = LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    live.retain(|n| n != name);
}

/// Removes every namespace this process created and has not removed yet, and stops its
/// guests.
pub fn cleanup_all() {
    guest::stop_all();
    let names: Vec<String> = {
        let mut live = LIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *live)
    };
    for name in names {
        delete_ns(&name);
    }
}

/// Installs (once) a SIGINT/SIGTERM handler thread that removes this process's namespaces and
/// then exits with 128 + the signal number.
pub fn install_signal_cleanup() {
    SIGNALS.call_once(|| {
        let Ok(mut signals) = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ]) else {
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                cleanup_all();
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Removes namespaces left by testbed processes that no longer exist (killed with SIGKILL).
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            delete_ns(&name);
        }
    }
}

struct NsGuard(Vec<String>);

/// Creates `ns` (registered for the signal handler and with `guard`), with IPv6 off unless
/// `ipv6`, so that no router solicitation or DAD packet mixes with a test's traffic.
fn add_netns(ns: &Netns, ipv6: bool, guard: &mut NsGuard) -> io::Result<()> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(ns.name.clone());
    guard.0.push(ns.name.clone());
    ip(&["netns", "add", &ns.name])?;
    if !ipv6 {
        ns.run(|| -> io::Result<()> {
            for scope in ["default", "all"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{scope}/disable_ipv6"), "1")?;
            }
            Ok(())
        })??;
    }
    Ok(())
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        for name in &self.0 {
            delete_ns(name);
            forget(name);
        }
    }
}

impl Testbed {
    /// Builds two namespaces joined by a veth pair, both ends up and addressed.
    pub fn new(config: &TestbedConfig) -> io::Result<Testbed> {
        if config.queues == 0 || config.queues > 256 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a testbed link needs between 1 and 256 queues",
            ));
        }
        install_signal_cleanup();
        sweep_stale();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let ns_a = Netns {
            name: format!("{NS_PREFIX}{pid}-{id}-a"),
        };
        let ns_b = Netns {
            name: format!("{NS_PREFIX}{pid}-{id}-b"),
        };
        // Until the testbed is complete, this guard removes whatever was made.
        let mut guard = NsGuard(Vec::new());
        for ns in [&ns_a, &ns_b] {
            add_netns(ns, config.ipv6, &mut guard)?;
        }
        let a = Host {
            ns: ns_a,
            ifname: "xsk-a".into(),
            ip: config.subnet.host(1),
            ip6: None,
            mac: [0x02, 0x58, 0x53, 0x4b, 0x00, 0x0a],
        };
        let b = Host {
            ns: ns_b,
            ifname: "xsk-b".into(),
            ip: config.subnet.host(2),
            ip6: None,
            mac: [0x02, 0x58, 0x53, 0x4b, 0x00, 0x0b],
        };
        veth_with_queues(&a, &b, config.queues)?;
        for host in [&a, &b] {
            address_host(host, config.mtu)?;
        }
        std::mem::take(&mut guard.0);
        Ok(Testbed { a, b })
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        drop(NsGuard(vec![
            self.a.ns.name.clone(),
            self.b.ns.name.clone(),
        ]));
    }
}

/// How to build [`Chain::bridged_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BridgedOptions {
    /// Receive and transmit queues per link (at least 1).
    pub queues: u32,
    /// Every link's MTU; `None` keeps veth's 1500.
    pub mtu: Option<u32>,
    /// Give a and c IPv6 addresses too.
    pub ipv6: bool,
}

/// Three hosts in a row, a — m — c, with m routing between 198.51.100.0/24 (a's side) and
/// 203.0.113.0/24 (c's side): traffic from a to c is forwarded, never delivered to a local
/// socket on the way. Dropping it removes all three namespaces.
#[derive(Debug)]
pub struct Chain {
    /// The first host, 198.51.100.1, routing everything via m.
    pub a: Host,
    /// m's interface towards a, 198.51.100.2.
    pub m_a: Host,
    /// m's interface towards c, 203.0.113.1.
    pub m_c: Host,
    /// The last host, 203.0.113.2, routing everything via m.
    pub c: Host,
}

impl Chain {
    /// Builds the three namespaces, both links, addresses, routes and forwarding on m.
    pub fn new() -> io::Result<Chain> {
        Chain::with_mtu(None)
    }

    /// As [`Chain::new`], with every link's MTU set (up to 65535 on veth).
    pub fn with_mtu(mtu: Option<u32>) -> io::Result<Chain> {
        Chain::build(mtu, false, 1)
    }

    /// Three hosts for a bump in the wire: a (198.51.100.1) and c (198.51.100.3) share one
    /// subnet, and m's interfaces have no address and m does not route, so a and c reach each
    /// other only through whatever m forwards at layer 2 (`xskit fwd`). `m_a.ip` and
    /// `m_c.ip` are 0.0.0.0.
    pub fn bridged() -> io::Result<Chain> {
        Chain::build(None, true, 1)
    }

    /// As [`Chain::bridged`], every link with `queues` receive and transmit queues (in DRV
    /// mode what a veth sends on queue k arrives on its peer's queue k).
    pub fn bridged_queues(queues: u32) -> io::Result<Chain> {
        Chain::build(None, true, queues.max(1))
    }

    /// As [`Chain::bridged`], with the given queues, link MTU, and IPv6 on a (2001:db8::1) and
    /// c (2001:db8::3) as well (m keeps IPv6 off, so it never speaks on the links itself).
    pub fn bridged_with(options: &BridgedOptions) -> io::Result<Chain> {
        let mut chain = Chain::build(options.mtu, true, options.queues.max(1))?;
        if options.ipv6 {
            for (h, last) in [(&mut chain.a, 1u16), (&mut chain.c, 3)] {
                let addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last);
                h.ns.run(|| -> io::Result<()> {
                    for scope in ["default", "all"] {
                        std::fs::write(
                            format!("/proc/sys/net/ipv6/conf/{scope}/disable_ipv6"),
                            "0",
                        )?;
                    }
                    Ok(())
                })??;
                let ifconf = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", h.ifname);
                h.ns.run(|| std::fs::write(&ifconf, "0"))??;
                ip(&[
                    "-n",
                    &h.ns.name,
                    "addr",
                    "add",
                    &format!("{addr}/64"),
                    "dev",
                    &h.ifname,
                    "nodad",
                ])?;
                h.ip6 = Some(addr);
            }
        }
        Ok(chain)
    }

    fn build(mtu: Option<u32>, bridged: bool, queues: u32) -> io::Result<Chain> {
        install_signal_cleanup();
        sweep_stale();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let mut guard = NsGuard(Vec::new());
        let mut make = |tag: &str| -> io::Result<Netns> {
            let ns = Netns {
                name: format!("{NS_PREFIX}{pid}-{id}-{tag}"),
            };
            add_netns(&ns, false, &mut guard)?;
            Ok(ns)
        };
        let (ns_a, ns_m, ns_c) = (make("a")?, make("m")?, make("c")?);
        let host = |ns: &Netns, ifname: &str, ip: Ipv4Addr, last: u8| Host {
            ns: ns.clone(),
            ifname: ifname.into(),
            ip,
            ip6: None,
            mac: [0x02, 0x58, 0x53, 0x4b, 0x01, last],
        };
        let (a, m_a, m_c, c) = if bridged {
            (
                host(&ns_a, "xsk-a", Ipv4Addr::new(198, 51, 100, 1), 1),
                host(&ns_m, "xsk-ma", Ipv4Addr::UNSPECIFIED, 2),
                host(&ns_m, "xsk-mc", Ipv4Addr::UNSPECIFIED, 3),
                host(&ns_c, "xsk-c", Ipv4Addr::new(198, 51, 100, 3), 4),
            )
        } else {
            (
                host(&ns_a, "xsk-a", Ipv4Addr::new(198, 51, 100, 1), 1),
                host(&ns_m, "xsk-ma", Ipv4Addr::new(198, 51, 100, 2), 2),
                host(&ns_m, "xsk-mc", Ipv4Addr::new(203, 0, 113, 1), 3),
                host(&ns_c, "xsk-c", Ipv4Addr::new(203, 0, 113, 2), 4),
            )
        };
        for (x, y) in [(&a, &m_a), (&m_c, &c)] {
            veth_with_queues(x, y, queues)?;
        }
        for h in [&a, &m_a, &m_c, &c] {
            address_host(h, mtu)?;
        }
        if !bridged {
            for (host, router) in [(&a, &m_a), (&c, &m_c)] {
                let via = router.ip.to_string();
                ip(&["-n", &host.ns.name, "route", "add", "default", "via", &via])?;
            }
            ns_m.run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))??;
        }
        std::mem::take(&mut guard.0);
        Ok(Chain { a, m_a, m_c, c })
    }

    /// A second link between a and m (`xsk-a2` and `xsk-m2`, no addresses, up) beside the
    /// chain: for a measurement on m that runs at the same time as one on `m_a`. It goes
    /// with the namespaces when the chain is dropped.
    pub fn side_link(&self) -> io::Result<(Host, Host)> {
        let host = |ns: &Netns, ifname: &str, last: u8| Host {
            ns: ns.clone(),
            ifname: ifname.into(),
            ip: Ipv4Addr::UNSPECIFIED,
            ip6: None,
            mac: [0x02, 0x58, 0x53, 0x4b, 0x02, last],
        };
        let (a2, m2) = (
            host(&self.a.ns, "xsk-a2", 1),
            host(&self.m_a.ns, "xsk-m2", 2),
        );
        veth_with_queues(&a2, &m2, 1)?;
        for h in [&a2, &m2] {
            address_host(h, None)?;
        }
        Ok((a2, m2))
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        drop(NsGuard(vec![
            self.a.ns.name.clone(),
            self.m_a.ns.name.clone(),
            self.c.ns.name.clone(),
        ]));
    }
}

/// A switch for a bond: `members` links from a namespace of their own (the bond's side) to
/// the ports of a Linux bridge in the switch's namespace, and a host on a third port. The
/// bridge learns where each MAC is, as a switch does; `bridge fdb` in the switch's namespace
/// shows it. Dropping it removes all three namespaces.
#[derive(Debug)]
pub struct Switched {
    /// The bond's side: the member links' ends (`xsb0`, `xsb1`, ...), no addresses.
    pub bonded: Netns,
    /// The member interfaces in `bonded`.
    pub members: Vec<String>,
    /// The switch's namespace, with the bridge `xbr0`.
    pub switch: Netns,
    /// The bridge's ports towards the members (`sw0`, `sw1`, ...), in member order.
    pub ports: Vec<String>,
    /// A host on the bridge, 203.0.113.10.
    pub host: Host,
    /// With [`Switched::with_far_host`]: a host linked to the bond's side (203.0.113.20 on
    /// `xf`; its peer in `bonded` is [`FAR_END`]), so that a forwarder there between the bond
    /// and `xsf` joins `host` and `far` in one subnet.
    pub far: Option<Host>,
}

/// The bonded side's end of the link to [`Switched::far`].
pub const FAR_END: &str = "xsf";

impl Switched {
    /// Builds the switch with `members` (1 to 8) member links, everything up.
    pub fn new(members: usize) -> io::Result<Switched> {
        if members == 0 || members > 8 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a switch for a bond takes 1 to 8 member links",
            ));
        }
        install_signal_cleanup();
        sweep_stale();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let mut guard = NsGuard(Vec::new());
        let mut make = |role: &str| -> io::Result<Netns> {
            let ns = Netns {
                name: format!("{NS_PREFIX}{pid}-{id}-{role}"),
            };
            add_netns(&ns, false, &mut guard)?;
            ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
            Ok(ns)
        };
        let bonded = make("b")?;
        let switch = make("sw")?;
        let host_ns = make("h")?;
        ip(&["-n", &switch.name, "link", "add", "xbr0", "type", "bridge"])?;
        ip(&["-n", &switch.name, "link", "set", "xbr0", "up"])?;
        let mut member_names = Vec::new();
        let mut ports = Vec::new();
        for i in 0..members {
            let (m, p) = (format!("xsb{i}"), format!("sw{i}"));
            let mac = [0x02, 0x58, 0x53, 0x42, 0x00, i as u8];
            veth(&m, &bonded.name, &mac, &p, &switch.name)?;
            ip(&["-n", &bonded.name, "link", "set", &m, "up"])?;
            ip(&["-n", &switch.name, "link", "set", &p, "master", "xbr0"])?;
            ip(&["-n", &switch.name, "link", "set", &p, "up"])?;
            member_names.push(m);
            ports.push(p);
        }
        let host = Host {
            ns: host_ns,
            ifname: "xh".into(),
            ip: Ipv4Addr::new(203, 0, 113, 10),
            ip6: None,
            mac: [0x02, 0x58, 0x53, 0x48, 0x00, 0x01],
        };
        veth(&host.ifname, &host.ns.name, &host.mac, "swh", &switch.name)?;
        ip(&["-n", &switch.name, "link", "set", "swh", "master", "xbr0"])?;
        ip(&["-n", &switch.name, "link", "set", "swh", "up"])?;
        ip(&[
            "-n",
            &host.ns.name,
            "addr",
            "add",
            "203.0.113.10/24",
            "dev",
            &host.ifname,
        ])?;
        ip(&["-n", &host.ns.name, "link", "set", &host.ifname, "up"])?;
        std::mem::take(&mut guard.0);
        Ok(Switched {
            bonded,
            members: member_names,
            switch,
            ports,
            host,
            far: None,
        })
    }

    /// As [`Switched::new`], with a host linked to the bond's side: `far`, 203.0.113.20,
    /// reached from `host` only through what the bond's side forwards between the members
    /// and [`FAR_END`] (which has no address).
    pub fn with_far_host(members: usize) -> io::Result<Switched> {
        let mut switched = Switched::new(members)?;
        let name = format!(
            "{}-f",
            switched
                .host
                .ns
                .name
                .strip_suffix("-h")
                .unwrap_or(&switched.host.ns.name)
        );
        switched.far = Some(link_far_host(&switched.bonded, name)?);
        Ok(switched)
    }

    /// The bridge port the switch has learnt `mac` on, if any (`bridge fdb`).
    pub fn port_of(&self, mac: [u8; 6]) -> io::Result<Option<String>> {
        let out = run(self
            .switch
            .command("bridge")
            .args(["fdb", "show", "br", "xbr0"]))?;
        let mac = mac_string(&mac);
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&mac) && !l.contains("permanent"))
            .find_map(|l| {
                let mut words = l.split_whitespace();
                words.find(|w| *w == "dev")?;
                words.next().map(str::to_string)
            }))
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        let mut names = vec![
            self.bonded.name.clone(),
            self.switch.name.clone(),
            self.host.ns.name.clone(),
        ];
        names.extend(self.far.as_ref().map(|f| f.ns.name.clone()));
        drop(NsGuard(names));
    }
}

/// Makes namespace `name` with a host in it, 203.0.113.20 on `xf`, linked to [`FAR_END`] in
/// `beside` (no address there), both ends up.
fn link_far_host(beside: &Netns, name: String) -> io::Result<Host> {
    let mut guard = NsGuard(Vec::new());
    let ns = Netns { name };
    add_netns(&ns, false, &mut guard)?;
    let far = Host {
        ns,
        ifname: "xf".into(),
        ip: Ipv4Addr::new(203, 0, 113, 20),
        ip6: None,
        mac: [0x02, 0x58, 0x53, 0x46, 0x00, 0x01],
    };
    veth(&far.ifname, &far.ns.name, &far.mac, FAR_END, &beside.name)?;
    ip(&["-n", &far.ns.name, "link", "set", "lo", "up"])?;
    ip(&[
        "-n",
        &far.ns.name,
        "addr",
        "add",
        "203.0.113.20/24",
        "dev",
        &far.ifname,
    ])?;
    ip(&["-n", &far.ns.name, "link", "set", &far.ifname, "up"])?;
    ip(&["-n", &beside.name, "link", "set", FAR_END, "up"])?;
    std::mem::take(&mut guard.0);
    Ok(far)
}

/// A host of its own linked to another namespace (a guest's, for one): 203.0.113.20 on
/// `xf`, its peer [`FAR_END`] in that namespace. Dropping it removes its namespace.
#[derive(Debug)]
pub struct FarHost {
    /// The host.
    pub host: Host,
}

impl FarHost {
    /// Links a new far host to `beside`.
    pub fn new(beside: &Netns) -> io::Result<FarHost> {
        install_signal_cleanup();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NS_PREFIX}{}-{id}-f", std::process::id());
        Ok(FarHost {
            host: link_far_host(beside, name)?,
        })
    }
}

impl Drop for FarHost {
    fn drop(&mut self) {
        drop(NsGuard(vec![self.host.ns.name.clone()]));
    }
}

/// Asks `check` every 20 ms until it answers, for at most `timeout`: the way a test waits
/// for a condition (an address usable, a table learned, a counter reached) instead of for a
/// time. None when the time ran out; the caller's assertion then says what never happened.
pub fn wait_for<T>(
    timeout: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(answer) = check() {
            return Some(answer);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `ifname` in `ns` has its IPv6 link-local address and every IPv6 address is past
/// duplicate address detection (none tentative): before that, the kernel neither sends from
/// them nor takes neighbour advertisements.
pub fn ipv6_settled(ns: &Netns, ifname: &str) -> io::Result<bool> {
    let show = |extra: &[&str]| -> io::Result<bool> {
        let out = run(ns
            .command("ip")
            .args(["-6", "addr", "show", "dev", ifname])
            .args(extra))?;
        Ok(!out.stdout.is_empty())
    };
    Ok(show(&["scope", "link"])? && !show(&["tentative"])?)
}

/// Whether this process may build testbeds (it runs as root).
pub fn have_privileges() -> bool {
    nix::unistd::geteuid().is_root()
}

/// For tests that need a testbed: true if they may run. Without root they skip with a message,
/// unless XSKIT_REQUIRE_PRIVILEGES is set (as in CI), where a skip would hide a failure, so
/// this panics instead.
pub fn privileged_or_skip() -> bool {
    if have_privileges() {
        return true;
    }
    assert!(
        std::env::var_os("XSKIT_REQUIRE_PRIVILEGES").is_none(),
        "XSKIT_REQUIRE_PRIVILEGES is set but the tests do not run as root"
    );
    eprintln!("skipped: testbed tests need root");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_returns_the_first_answer_or_none_when_the_time_runs_out() {
        let mut asked = 0;
        let answer = wait_for(std::time::Duration::from_secs(10), || {
            asked += 1;
            (asked == 3).then_some(asked)
        });
        assert_eq!(answer, Some(3));
        let never = wait_for(std::time::Duration::from_millis(50), || None::<()>);
        assert_eq!(never, None);
    }

    fn exists(ns: &Netns) -> bool {
        Path::new("/run/netns").join(ns.name()).exists()
    }

    #[test]
    fn testbed_is_built_and_removed() {
        if !have_privileges() {
            eprintln!("skipped: needs root");
            return;
        }
        let bed = Testbed::new(&TestbedConfig {
            queues: 2,
            ..Default::default()
        })
        .unwrap();
        let (a, b) = (bed.a.ns.clone(), bed.b.ns.clone());
        assert!(exists(&a) && exists(&b));
        let queues = b
            .run(|| std::fs::read_dir("/sys/class/net").map(|d| d.count()))
            .unwrap()
            .unwrap();
        assert!(queues >= 1);
        let out = a
            .command("ping")
            .args(["-c", "1", "-W", "2", &bed.b.ip.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ping across the link: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        drop(bed);
        assert!(!exists(&a) && !exists(&b), "namespaces removed on drop");
    }

    #[test]
    fn testbed_is_removed_when_a_test_panics() {
        if !have_privileges() {
            eprintln!("skipped: needs root");
            return;
        }
        let names = std::sync::Mutex::new(None);
        let result = std::panic::catch_unwind(|| {
            let bed = Testbed::new(&TestbedConfig::default()).unwrap();
            *names.lock().unwrap() = Some((bed.a.ns.clone(), bed.b.ns.clone()));
            panic!("test failure while the testbed is up");
        });
        assert!(result.is_err());
        let (a, b) = names.into_inner().unwrap().unwrap();
        assert!(
            !exists(&a) && !exists(&b),
            "namespaces removed while unwinding"
        );
    }

    #[test]
    fn chain_forwards_from_a_to_c() {
        if !have_privileges() {
            eprintln!("skipped: needs root");
            return;
        }
        let chain = Chain::new().unwrap();
        let names = [chain.a.ns.clone(), chain.m_a.ns.clone(), chain.c.ns.clone()];
        let out = chain
            .a
            .ns
            .command("ping")
            .args(["-c", "1", "-W", "2", &chain.c.ip.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "a reaches c through m: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        drop(chain);
        assert!(
            names.iter().all(|n| !exists(n)),
            "all three namespaces removed"
        );
    }

    #[test]
    fn a_side_link_joins_a_and_m_and_goes_with_the_chain() {
        if !have_privileges() {
            eprintln!("skipped: needs root");
            return;
        }
        let chain = Chain::bridged().unwrap();
        let (a2, m2) = chain.side_link().unwrap();
        for h in [&a2, &m2] {
            let out =
                h.ns.command("ip")
                    .args(["-j", "link", "show", "dev", &h.ifname])
                    .output()
                    .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("\"LOWER_UP\""), "{} up: {text}", h.ifname);
        }
        // A frame from a2 arrives at m2: its peer.
        let rx = |h: &Host| {
            let out =
                h.ns.command("ip")
                    .args(["-s", "-j", "link", "show", "dev", &h.ifname])
                    .output()
                    .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            v[0]["stats64"]["rx"]["packets"]
                .as_u64()
                .expect("rx packets")
        };
        let before = rx(&m2);
        // One broadcast frame of the local experimental EtherType, through a packet socket.
        let send = format!(
            "import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
             s.bind(('{}', 0)); s.send(b'\\xff' * 6 + bytes(6) + b'\\x88\\xb5' + bytes(46))",
            a2.ifname
        );
        let out = a2
            .ns
            .command("python3")
            .args(["-c", &send])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(rx(&m2) > before, "a2's frame reached m2");
        let names = [a2.ns.clone(), m2.ns.clone()];
        drop(chain);
        assert!(
            names.iter().all(|n| !exists(n)),
            "the side link went with the chain"
        );
    }

    #[test]
    fn run_resumes_panics_and_reports_missing_namespace() {
        let ns = Netns {
            name: "xskit-no-such-namespace".into(),
        };
        assert!(ns.run(|| 1).is_err());
    }
}
