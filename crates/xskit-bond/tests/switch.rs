//! A bond behind a switch (a Linux bridge in another namespace): after a failover the new
//! active member sends gratuitous ARPs, the bridge's forwarding table points the bond's MAC
//! at the new port, and the host's traffic reaches the bond through it.

use std::time::Duration;

use xskit::{Interface, Mode};
use xskit_bond::{announce, LinkMonitor, XdpBond, XdpBondMode};
use xskit_os::packet::{PacketRxRing, PacketTx};
use xskit_testbed::{Host, Switched};

const BOND_IP: [u8; 4] = [203, 0, 113, 20];
const PORT: u16 = 4545;

/// A test frame of the local experimental EtherType 0x88b5 (a bridge with netfilter hooks
/// would drop an IPv4 frame without a valid header), numbered at the ports' offsets.
fn udp(dst: [u8; 6], src: [u8; 6], sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&PORT.to_be_bytes());
    f
}

/// Announces the bond from member `i` (in the bond's namespace).
fn announce_from(sw: &Switched, member: &Interface, mac: [u8; 6]) {
    let member = member.clone();
    sw.bonded
        .run(move || announce(&member, mac, BOND_IP, 2).unwrap())
        .unwrap();
}

/// Waits until the switch has learnt `mac` behind `port` (the announcement crossed it).
fn learnt_behind(sw: &Switched, mac: [u8; 6], port: &str) {
    let learnt = xskit_testbed::wait_for(Duration::from_secs(10), || {
        (sw.port_of(mac).unwrap().as_deref() == Some(port)).then_some(())
    });
    assert!(
        learnt.is_some(),
        "the switch did not learn the bond's MAC behind {port}: {:?}",
        sw.port_of(mac)
    );
}

/// Sends `n` frames from the host to `bond_mac` and counts those that come back reflected.
fn echoes(host: &Host, bond_mac: [u8; 6], n: u16) -> usize {
    let (ifname, mac) = (host.ifname.clone(), host.mac);
    host.ns
        .run(move || {
            let index = Interface::by_name(&ifname).unwrap().index();
            let mut rx = PacketRxRing::open(index).unwrap();
            let tx = PacketTx::open(index).unwrap();
            for i in 0..n {
                tx.send_copies(&udp(bond_mac, mac, 1000 + i), 1).unwrap();
            }
            let mut back = 0;
            let deadline = std::time::Instant::now() + Duration::from_millis(600);
            while std::time::Instant::now() < deadline {
                rx.receive(Some(Duration::from_millis(20)), |f| {
                    if f.len() >= 38 && f[6..12] == bond_mac && f[36..38] == PORT.to_be_bytes() {
                        back += 1;
                    }
                })
                .unwrap();
            }
            back
        })
        .unwrap()
}

#[test]
fn after_failover_the_switch_learns_the_new_member_and_traffic_flows() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let sw = Switched::new(2).unwrap();
    let members = sw.members.clone();
    let (mut bond, bond_mac, ifaces) = sw
        .bonded
        .run(move || {
            let ifaces: Vec<Interface> = members
                .iter()
                .map(|n| Interface::by_name(n).unwrap())
                .collect();
            // The bond's MAC is its first member's, as Linux's bond takes it.
            let mac = ifaces[0].link_info().unwrap().mac.unwrap();
            let bond = XdpBond::reflector(&ifaces, XdpBondMode::ActiveBackup, Mode::Skb).unwrap();
            announce(&ifaces[0], mac, BOND_IP, 2).unwrap();
            (bond, mac, ifaces)
        })
        .unwrap();
    learnt_behind(&sw, bond_mac, "sw0");
    let n = echoes(&sw.host, bond_mac, 20);
    assert_eq!(n, 20, "through the active member");

    // An administrative switch-over: without the announcement the bridge would keep sending
    // to sw0, where the now inactive member drops everything.
    bond.set_active(1).unwrap();
    announce_from(&sw, &ifaces[1], bond_mac);
    learnt_behind(&sw, bond_mac, "sw1");
    assert_eq!(
        echoes(&sw.host, bond_mac, 20),
        20,
        "through the new active member"
    );

    // Back to member 0, then a carrier loss on it: the monitor reports it, the bond fails
    // over, the new active member announces itself.
    bond.set_active(0).unwrap();
    announce_from(&sw, &ifaces[0], bond_mac);
    learnt_behind(&sw, bond_mac, "sw0");
    let members = ifaces.clone();
    let monitor = sw
        .bonded
        .run(move || LinkMonitor::new(&members, Duration::ZERO, Duration::ZERO).unwrap())
        .unwrap();
    assert!(sw
        .switch
        .command("ip")
        .args(["link", "set", "sw0", "down"])
        .status()
        .unwrap()
        .success());
    let (monitor, changes) = sw
        .bonded
        .run(move || {
            let mut monitor = monitor;
            let mut changes = Vec::new();
            for _ in 0..100 {
                changes.extend(monitor.poll(Some(Duration::from_millis(20))).unwrap());
                if !changes.is_empty() {
                    break;
                }
            }
            (monitor, changes)
        })
        .unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((changes[0].member, changes[0].up), (0, false));
    bond.set_up(0, false).unwrap();
    assert_eq!(bond.active(), Some(1));
    announce_from(&sw, &ifaces[1], bond_mac);
    learnt_behind(&sw, bond_mac, "sw1");
    assert_eq!(echoes(&sw.host, bond_mac, 20), 20, "after the carrier loss");
    assert_eq!(monitor.up(), &[false, true]);
}

/// The kernel takes xskit's unsolicited neighbour advertisement: it checks the ICMPv6
/// checksum, the hop limit of 255 and the option before it creates the neighbour entry
/// (a router with `accept_untracked_na`, RFC 9131).
#[test]
fn the_kernel_accepts_the_unsolicited_neighbour_advertisement() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let bed =
        xskit_testbed::Testbed::new(&xskit_testbed::TestbedConfig::default().ipv6(true)).unwrap();
    let b_if = bed.b.ifname.clone();
    bed.b
        .ns
        .run(move || -> std::io::Result<()> {
            // A router learns from untracked advertisements (RFC 9131).
            std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
            std::fs::write(
                format!("/proc/sys/net/ipv6/conf/{b_if}/accept_untracked_na"),
                "1",
            )
        })
        .unwrap()
        .unwrap();
    // NAs are not taken before IPv6 is up on the link.
    let settled = xskit_testbed::wait_for(Duration::from_secs(20), || {
        xskit_testbed::ipv6_settled(&bed.b.ns, &bed.b.ifname)
            .unwrap()
            .then_some(())
    });
    assert!(settled.is_some(), "b's IPv6 addresses stayed tentative");
    let ip: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x55,
    ];
    let mac = [0x02, 0x58, 0x42, 0x00, 0x00, 0x55];
    let a_if = bed.a.ifname.clone();
    bed.a
        .ns
        .run(move || {
            xskit_bond::announce_v6(&Interface::by_name(&a_if).unwrap(), mac, ip, 2).unwrap()
        })
        .unwrap();
    let neighbours = || {
        let out = bed
            .b
            .ns
            .command("ip")
            .args(["-6", "neigh", "show", "dev", &bed.b.ifname])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let learnt = xskit_testbed::wait_for(Duration::from_secs(10), || {
        let text = neighbours();
        (text.contains("2001:db8::55") && text.contains("02:58:42:00:00:55")).then_some(())
    });
    assert!(learnt.is_some(), "{}", neighbours());
}
