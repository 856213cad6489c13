//! One XDP program for a device or a bond: xskit's bond reflector (xskit_bond.h's example)
//! attached to both links of a chain's forwarding namespace sends every packet from host a
//! back out of the member the bond's hash names — XDP_TX when that is the link it came in
//! on, XDP_REDIRECT to the other — in SKB and DRV mode; a member going down moves the traffic
//! with the programs still attached; a one-member bond is a plain device.
//!
//! (In DRV mode the far hosts run a pass-through XDP program: veth hands frames sent with
//! XDP_TX to a peer that runs XDP, and leaves them in its ring otherwise.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use xskit::{Interface, Mode, XdpProgram};
use xskit_bond::{xmit_hash, XdpBond, XdpBondMode, XmitHashPolicy};
use xskit_os::packet::{PacketRxRing, PacketTx};
use xskit_testbed::{Chain, Host};

const PORT: u16 = 4343;

fn udp(dst: [u8; 6], src: [u8; 6], sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 51, 100, 1]);
    f[30..34].copy_from_slice(&[203, 0, 113, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&PORT.to_be_bytes());
    f
}

/// What arrives on `host` from `from_mac` (reflected frames carry the member's MAC as
/// source), until `stop`; counted in `seen` as it comes, and `ready` once the ring is open.
fn capture(
    host: &Host,
    from_mac: [u8; 6],
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
    ready: mpsc::Sender<()>,
) -> std::thread::JoinHandle<std::io::Result<Vec<Vec<u8>>>> {
    let ifname = host.ifname.clone();
    host.ns.spawn(move || {
        let index = Interface::by_name(&ifname).unwrap().index();
        let mut ring = PacketRxRing::open(index).unwrap();
        ready.send(()).unwrap();
        let mut got = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            ring.receive(Some(Duration::from_millis(20)), |f| {
                if f.len() >= 38 && f[6..12] == from_mac && f[36..38] == PORT.to_be_bytes() {
                    got.push(f.to_vec());
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })
            .unwrap();
        }
        got
    })
}

/// Sends `n` flows from a to m_a and returns what came back at a and at c (all `n`
/// expected).
fn round(chain: &Chain, first_port: u16, n: u16) -> [Vec<Vec<u8>>; 2] {
    round_from(
        chain,
        &chain.a,
        chain.m_a.mac,
        first_port,
        n,
        usize::from(n),
    )
}

/// Sends `n` flows from `from` to the member with MAC `to`; returns what came back (from
/// that member's MAC) at a and at c, once `expect` frames came back (or 5 s passed; with
/// `expect` 0, after half a second more).
fn round_from(
    chain: &Chain,
    from: &Host,
    to: [u8; 6],
    first_port: u16,
    n: u16,
    expect: usize,
) -> [Vec<Vec<u8>>; 2] {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready) = mpsc::channel();
    let captures = [
        capture(&chain.a, to, stop.clone(), seen.clone(), ready_tx.clone()),
        capture(&chain.c, to, stop.clone(), seen.clone(), ready_tx),
    ];
    for _ in 0..2 {
        ready.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let (src, ifname) = (from.mac, from.ifname.clone());
    from.ns
        .run(move || {
            let tx = PacketTx::open(Interface::by_name(&ifname).unwrap().index()).unwrap();
            for i in 0..n {
                assert_eq!(
                    tx.send_copies(&udp(to, src, first_port + i * 3), 1)
                        .unwrap(),
                    1
                );
            }
        })
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while expect > 0
        && seen.load(Ordering::Relaxed) < expect
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Time for anything more (or unexpected) to arrive.
    std::thread::sleep(Duration::from_millis(if expect > 0 { 100 } else { 500 }));
    stop.store(true, Ordering::Relaxed);
    captures.map(|h| h.join().unwrap().unwrap())
}

/// The chain's two links (m_a, m_c) as interfaces, in m's namespace (call it there).
fn links(names: &[String; 2]) -> Vec<Interface> {
    names
        .iter()
        .map(|n| Interface::by_name(n).unwrap())
        .collect()
}

/// xskit's bond reflector on m_a and m_c.
fn reflector(chain: &Chain, mode: XdpBondMode, attach: Mode) -> XdpBond {
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    chain
        .m_a
        .ns
        .run(move || XdpBond::reflector(&links(&names), mode, attach))
        .unwrap()
        .unwrap()
}

/// An XDP program on a host's veth, passing everything up: veth delivers what its peer sends
/// with XDP_TX only to a device that runs XDP itself (XDP_REDIRECT needs GRO alone).
fn xdp_pass(host: &Host) -> XdpProgram {
    let name = host.ifname.clone();
    host.ns
        .run(move || XdpProgram::attach(&Interface::by_name(&name).unwrap(), Mode::Drv, false))
        .unwrap()
        .unwrap()
}

fn gro_on(host: &Host) {
    let ok = host
        .ns
        .command("ethtool")
        .args(["-K", &host.ifname, "gro", "on"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "ethtool -K {} gro on", host.ifname);
}

#[test]
fn the_bond_reflector_leaves_through_the_hash_and_fails_over_while_attached() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let policy = XmitHashPolicy::Layer34;
    for mode in [Mode::Skb, Mode::Drv] {
        let chain = Chain::new().unwrap();
        // Frames XDP sends into a veth reach its far end through GRO (or XDP) there.
        gro_on(&chain.a);
        gro_on(&chain.c);
        let _far_ends = (mode == Mode::Drv).then(|| (xdp_pass(&chain.a), xdp_pass(&chain.c)));
        let mut bond = reflector(&chain, XdpBondMode::BalanceXor(policy), mode);
        let ids: Vec<u32> = bond.programs().map(|p| p.id()).collect();

        let [at_a, at_c] = round(&chain, 20000, 64);
        assert_eq!(
            at_a.len() + at_c.len(),
            64,
            "{mode:?}: every packet reflected once"
        );
        assert!(
            !at_a.is_empty() && !at_c.is_empty(),
            "{mode:?}: both members used"
        );
        for (member, frames) in [(0, &at_a), (1, &at_c)] {
            for f in frames.iter() {
                assert_eq!(xmit_hash(policy, f) as usize % 2, member, "{mode:?}");
                assert_eq!(f[0..6], chain.a.mac, "MACs swapped");
            }
        }
        // m_c goes down: everything leaves through m_a, the programs untouched.
        bond.set_up(1, false).unwrap();
        let [at_a, at_c] = round(&chain, 30000, 64);
        assert_eq!((at_a.len(), at_c.len()), (64, 0), "{mode:?}");
        // No member left: dropped and counted.
        bond.set_up(0, false).unwrap();
        let [at_a, at_c] = round_from(&chain, &chain.a, chain.m_a.mac, 40000, 16, 0);
        assert_eq!((at_a.len(), at_c.len()), (0, 0), "{mode:?}");
        assert_eq!(bond.dropped().unwrap(), 16, "{mode:?}");
        assert_eq!(bond.count().unwrap(), 64 + 64 + 16, "{mode:?}");
        let again: Vec<u32> = bond.programs().map(|p| p.id()).collect();
        assert_eq!(ids, again, "{mode:?}: the same programs stayed attached");
        let lost: Vec<Option<String>> = chain
            .m_a
            .ns
            .run(|| bond.programs().map(|p| p.lost()).collect())
            .unwrap();
        assert!(lost.iter().all(Option::is_none), "{mode:?}: {lost:?}");
    }
}

#[test]
fn a_one_member_bond_is_a_plain_device() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let _far_end = xdp_pass(&chain.a);
    let name = chain.m_a.ifname.clone();
    let bond = chain
        .m_a
        .ns
        .run(move || {
            let members = [Interface::by_name(&name).unwrap()];
            XdpBond::reflector(&members, XdpBondMode::ActiveBackup, Mode::Drv)
        })
        .unwrap()
        .unwrap();
    let [at_a, at_c] = round(&chain, 50000, 32);
    assert_eq!((at_a.len(), at_c.len()), (32, 0));
    assert_eq!(bond.count().unwrap(), 32);
}

#[test]
fn active_backup_takes_only_the_active_members_frames() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let _far_ends = (xdp_pass(&chain.a), xdp_pass(&chain.c));
    let mut bond = reflector(&chain, XdpBondMode::ActiveBackup, Mode::Drv);
    assert_eq!(bond.active(), Some(0));
    // m_a is active: a's frames come back to a; c's arrive on the backup and are dropped.
    let [at_a, _] = round_from(&chain, &chain.a, chain.m_a.mac, 1000, 8, 8);
    let [_, at_c] = round_from(&chain, &chain.c, chain.m_c.mac, 2000, 8, 0);
    assert_eq!((at_a.len(), at_c.len()), (8, 0));
    assert_eq!(bond.dropped_inactive().unwrap(), 8);
    // m_c made active: now c's frames come back (out of m_c), and a's are dropped.
    bond.set_active(1).unwrap();
    let [_, at_c] = round_from(&chain, &chain.c, chain.m_c.mac, 3000, 8, 8);
    let [at_a, _] = round_from(&chain, &chain.a, chain.m_a.mac, 4000, 8, 0);
    assert_eq!((at_a.len(), at_c.len()), (0, 8));
    assert_eq!(bond.dropped_inactive().unwrap(), 16);
    // The active member goes down: the other one takes over.
    bond.set_up(1, false).unwrap();
    assert_eq!(bond.active(), Some(0));
    let [at_a, _] = round_from(&chain, &chain.a, chain.m_a.mac, 5000, 8, 8);
    assert_eq!(at_a.len(), 8);
}

#[test]
fn bad_bonds_are_refused_and_leave_nothing_attached() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let name = chain.m_a.ifname.clone();
    let errors = chain
        .m_a
        .ns
        .run(move || {
            let m = Interface::by_name(&name).unwrap();
            let twice = XdpBond::reflector(
                &[m.clone(), m.clone()],
                XdpBondMode::ActiveBackup,
                Mode::Skb,
            )
            .unwrap_err()
            .to_string();
            let none = XdpBond::reflector(&[], XdpBondMode::ActiveBackup, Mode::Skb)
                .unwrap_err()
                .to_string();
            let attached = settled_program(&m);
            (twice, none, attached)
        })
        .unwrap();
    assert!(errors.0.contains("given twice"), "{}", errors.0);
    assert!(errors.1.contains("1 to 8 members, not 0"), "{}", errors.1);
    assert_eq!(errors.2, None, "nothing left attached");
}

/// Carrier loss moves the traffic: a monitor thread in the bond's namespace applies the
/// kernel's link notifications to the bond; the far end of m_c goes down (m_c loses its
/// carrier), everything leaves through m_a; it comes back and both are used again. The delay
/// from the `ip link set down` to the bond's maps rewritten is printed (no bound asserted:
/// the VM's timing is not the code's).
/// Waits until `host`'s interface reports its operational state up: both ends of a link
/// carry frames again once both do.
fn wait_until_up(host: &Host) {
    let brief = || {
        let out = host
            .ns
            .command("ip")
            .args(["-br", "link", "show", "dev", &host.ifname])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let up = xskit_testbed::wait_for(Duration::from_secs(10), || {
        (brief().split_whitespace().nth(1) == Some("UP")).then_some(())
    });
    assert!(up.is_some(), "not up: {}", brief());
}

/// The link changes a bond was told of: (member, up, when).
type Applied = Arc<std::sync::Mutex<Vec<(usize, bool, std::time::Instant)>>>;

/// A balance-xor reflector on m_a and m_c whose members follow the kernel's link events,
/// each change applied and written down in `applied`, until `stop`; returns once it watches.
/// Its thread ends with the bond's count of reflected frames.
fn bond_following_links(
    chain: &Chain,
    stop: Arc<AtomicBool>,
    applied: Applied,
) -> std::thread::JoinHandle<std::io::Result<u64>> {
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (monitoring_tx, monitoring) = mpsc::channel();
    let monitor = chain.m_a.ns.spawn(move || {
        let members = links(&names);
        let mut bond = XdpBond::reflector(
            &members,
            XdpBondMode::BalanceXor(XmitHashPolicy::Layer34),
            Mode::Drv,
        )
        .unwrap();
        let mut links =
            xskit_bond::LinkMonitor::new(&members, Duration::ZERO, Duration::ZERO).unwrap();
        assert_eq!(links.up(), &[true, true]);
        monitoring_tx.send(()).unwrap();
        while !stop.load(Ordering::Relaxed) {
            for change in links.poll(Some(Duration::from_millis(10))).unwrap() {
                bond.set_up(change.member, change.up).unwrap();
                let when = std::time::Instant::now();
                applied
                    .lock()
                    .unwrap()
                    .push((change.member, change.up, when));
            }
        }
        bond.count().unwrap()
    });
    monitoring
        .recv_timeout(Duration::from_secs(30))
        .expect("the bond attached and its link monitor started");
    monitor
}

#[test]
fn carrier_loss_fails_over_from_the_kernels_link_events() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let _far_ends = (xdp_pass(&chain.a), xdp_pass(&chain.c));
    let stop = Arc::new(AtomicBool::new(false));
    let applied: Applied = Arc::default();
    let monitor = bond_following_links(&chain, stop.clone(), applied.clone());
    let [at_a, at_c] = round(&chain, 10000, 64);
    assert!(!at_a.is_empty() && !at_c.is_empty(), "both members in use");
    let set = |up: &str| {
        let ok = chain
            .c
            .ns
            .command("ip")
            .args(["link", "set", &chain.c.ifname, up])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    let before = std::time::Instant::now();
    set("down");
    let deadline = before + Duration::from_secs(5);
    while applied.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (member, up, at) = applied.lock().unwrap()[0];
    assert_eq!((member, up), (1, false), "m_c reported down");
    eprintln!(
        "failover: carrier loss applied to the bond {:?} after `ip link set down`",
        at - before
    );
    let [at_a, at_c] = round(&chain, 20000, 64);
    assert_eq!((at_a.len(), at_c.len()), (64, 0), "everything through m_a");
    set("up");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while applied.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(applied.lock().unwrap()[1].0, 1, "m_c again");
    assert!(applied.lock().unwrap()[1].1, "m_c reported up again");
    wait_until_up(&chain.c);
    wait_until_up(&chain.m_c);
    let [at_a, at_c] = round(&chain, 30000, 64);
    assert_eq!(at_a.len() + at_c.len(), 64);
    assert!(!at_c.is_empty(), "m_c carries its flows again");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(monitor.join().unwrap().unwrap(), 64 * 3);
}

/// A flap shorter than `downdelay` is not reported; a change that lasts is, once.
#[test]
fn downdelay_hides_a_short_flap() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let name = chain.m_c.ifname.clone();
    let (c_ns, c_if) = (chain.c.ns.clone(), chain.c.ifname.clone());
    let changes = chain
        .m_a
        .ns
        .run(move || {
            let members = [Interface::by_name(&name).unwrap()];
            let mut links =
                xskit_bond::LinkMonitor::new(&members, Duration::ZERO, Duration::from_secs(3600))
                    .unwrap();
            let set = |up: &str| {
                assert!(c_ns
                    .command("ip")
                    .args(["link", "set", &c_if, up])
                    .status()
                    .unwrap()
                    .success());
            };
            set("down");
            set("up");
            let mut seen = Vec::new();
            for _ in 0..20 {
                seen.extend(links.poll(Some(Duration::from_millis(20))).unwrap());
            }
            // A loss that lasts past a zero delay is reported (the second monitor).
            let mut quick =
                xskit_bond::LinkMonitor::new(&members, Duration::ZERO, Duration::ZERO).unwrap();
            set("down");
            let mut lasting = Vec::new();
            for _ in 0..50 {
                lasting.extend(quick.poll(Some(Duration::from_millis(20))).unwrap());
                if !lasting.is_empty() {
                    break;
                }
            }
            set("up");
            (seen, lasting)
        })
        .unwrap();
    assert!(changes.0.is_empty(), "the flap was hidden: {:?}", changes.0);
    assert_eq!(changes.1.len(), 1, "{:?}", changes.1);
    assert!(!changes.1[0].up);
}

/// The program attached to `iface` once a detach has settled (up to a second): a child
/// process another test thread spawns holds a copy of every descriptor, a link's too, until
/// its exec, and the link detaches only when the last copy closes.
fn settled_program(iface: &Interface) -> Option<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let id = iface.link_info().unwrap().xdp.any();
        if id.is_none() || std::time::Instant::now() > deadline {
            return id;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A member that already runs another XDP program is refused, named, and the members
/// attached before it are detached again; a member deleted while the bond runs is reported
/// removed and the bond carries on with the rest.
#[test]
fn a_taken_member_is_refused_and_a_deleted_one_is_reported() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (err, left) = chain
        .m_a
        .ns
        .run(move || {
            let members = links(&names);
            // Someone else's program on the second member.
            let other = XdpProgram::attach(&members[1], Mode::Skb, false).unwrap();
            let err = XdpBond::reflector(&members, XdpBondMode::ActiveBackup, Mode::Skb)
                .unwrap_err()
                .to_string();
            let left = settled_program(&members[0]);
            drop(other);
            (err, left)
        })
        .unwrap();
    assert!(err.contains("already has an XDP program attached"), "{err}");
    assert_eq!(left, None, "the first member's program was detached again");

    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (changes, usable) = chain
        .m_a
        .ns
        .run(move || {
            let members = links(&names);
            let mut bond =
                XdpBond::reflector(&members, XdpBondMode::ActiveBackup, Mode::Skb).unwrap();
            let mut links =
                xskit_bond::LinkMonitor::new(&members, Duration::ZERO, Duration::ZERO).unwrap();
            let ok = std::process::Command::new("ip")
                .args(["link", "del", &names[1]])
                .status()
                .unwrap()
                .success();
            assert!(ok);
            let mut changes = Vec::new();
            for _ in 0..100 {
                changes.extend(links.poll(Some(Duration::from_millis(20))).unwrap());
                if changes.iter().any(|c| c.removed) {
                    break;
                }
            }
            for c in &changes {
                bond.set_up(c.member, c.up).unwrap();
            }
            (changes, bond.usable().to_vec())
        })
        .unwrap();
    let removed = changes
        .iter()
        .find(|c| c.removed)
        .expect("a removal reported");
    assert_eq!((removed.member, removed.up), (1, false), "{changes:?}");
    assert_eq!(usable, [0]);
}

/// 802.3ad's control frames are not the bond's traffic: the reflector passes LACPDUs to the
/// kernel, where `LacpControl`'s sockets read them, and reflects nothing of them.
#[test]
fn lacpdus_pass_the_bond_program_to_the_lacp_control_path() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    use xskit_bond::lacp::{LacpConfig, LacpControl, SlowSockets};
    use xskit_wire::lacp::{Lacpdu, PortInfo, DESTINATION, ETHERTYPE};
    let chain = Chain::new().unwrap();
    let bond = reflector(
        &chain,
        XdpBondMode::BalanceXor(XmitHashPolicy::Layer2),
        Mode::Drv,
    );
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let mut sockets = chain
        .m_a
        .ns
        .run(move || SlowSockets::open(&links(&names)).unwrap())
        .unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let mut control = LacpControl::new(LacpConfig::default(), [2, 0, 0, 0, 0, 9], &macs).unwrap();
    control.set_link(0, true, Some((10_000, true)), 0);
    let mut frame = vec![0u8; 14 + 110];
    frame[..6].copy_from_slice(&DESTINATION);
    frame[6..12].copy_from_slice(&chain.a.mac);
    frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    let partner = PortInfo {
        system: [2, 0, 0, 0, 0, 7],
        port: 1,
        key: 5,
        state: 0x05,
        ..PortInfo::default()
    };
    Lacpdu::new_unchecked(&mut frame[14..]).emit(&partner, &PortInfo::default(), 0);
    let ifname = chain.a.ifname.clone();
    chain
        .a
        .ns
        .run(move || {
            let tx = PacketTx::open(Interface::by_name(&ifname).unwrap().index()).unwrap();
            assert_eq!(tx.send_copies(&frame, 3).unwrap(), 3);
        })
        .unwrap();
    // The machines run at 200 ms each time: what changes is only what has arrived.
    xskit_testbed::wait_for(Duration::from_secs(10), || {
        control.poll(&mut sockets, 200);
        (control.lacp().ports()[0].counters.pdus_in >= 3).then_some(())
    });
    let port = &control.lacp().ports()[0];
    assert_eq!(port.counters.pdus_in, 3);
    assert_eq!(port.partner.system, [2, 0, 0, 0, 0, 7]);
    assert_eq!(bond.count().unwrap(), 0, "nothing of them reflected");
}
