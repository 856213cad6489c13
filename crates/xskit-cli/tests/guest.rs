//! The guest testbed: Debian's 6.12 kernel under QEMU with virtio NICs on TAP devices, for
//! what the host kernel lacks (bonding, virtio_net). Each boot takes seconds under TCG, so a
//! test puts its steps into one script where it can.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use xskit_testbed::{Guest, GuestConfig};
use xskit_traffic::baseline::{PacketRxRing, PacketTx};
use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

/// A guest for a test, or a skip without root (a failure under XSKIT_REQUIRE_PRIVILEGES,
/// and a failure saying what is missing when the guest's packages are not installed).
fn guest(config: GuestConfig) -> Option<Guest> {
    if !privileged() {
        return None;
    }
    Some(Guest::new(&config).unwrap_or_else(|e| panic!("guest testbed: {e}")))
}

/// Shell functions the bond scripts wait with, each for a condition, not for a time:
/// `bond_up BOND` until the bond and both its members report MII up; `drained DEV...` until
/// no queue of the devices holds a packet (what was sent has gone to the NIC); `xdp_on DEV
/// PID` until a program is attached to DEV (a bond's, not its members', shows it), failing if
/// process PID (what attaches it) ends.
const WAIT_FOR_BOND: &str = r#"bond_up() { until [ "$(grep -c 'MII Status: up' /proc/net/bonding/$1)" -ge 3 ]; do sleep 0.05; done; }
drained() { for d in "$@"; do while tc -s qdisc show dev $d | grep backlog | grep -vq 'backlog 0b 0p'; do sleep 0.05; done; done; }
xdp_on() { until ip -d link show $1 | grep -q 'prog/xdp'; do kill -0 $2 || return 1; sleep 0.05; done; }
"#;

#[test]
fn the_guest_runs_host_binaries_and_reaches_its_namespace() {
    let Some(mut guest) = guest(GuestConfig::default().nics(2)) else {
        return;
    };
    let script = format!(
        "uname -r
         ip addr add 203.0.113.2/24 dev eth0
         ip link set eth0 up
         ping -c 2 -W 3 203.0.113.1
         ethtool -i eth0 | grep driver
         {XSKIT} info -i eth0
         {XSKIT} recv -i eth0 -m zc -d 1 || echo zc-refused
         ip link add bond0 type bond mode balance-xor xmit_hash_policy layer3+4
         ip link set eth1 master bond0
         ip link set bond0 up
         ip link show bond0
         {XSKIT} info -i bond0
         {XSKIT} info -i eth1
         exit 7"
    );
    let run = guest.run(&script).unwrap();
    let out = &run.output;
    assert_eq!(run.status, 7, "the script's status comes back: {out}");
    assert!(out.contains("6.12."), "Debian's 6.12 kernel: {out}");
    assert!(
        out.contains("2 received"),
        "the guest pings its namespace: {out}"
    );
    assert!(out.contains("driver: virtio_net"), "{out}");
    assert!(out.contains("native XDP        yes"), "{out}");
    // No device this guest can have does AF_XDP zero-copy (virtio_net in 6.12 and QEMU 7.2
    // do not offer it): xskit says so and a zero-copy bind is refused with the reason.
    assert!(out.contains("AF_XDP zero-copy  no"), "{out}");
    assert!(
        out.contains("zero-copy is not available on eth0") && out.contains("zc-refused"),
        "{out}"
    );
    assert!(out.contains("bond0:"), "the bonding driver is there: {out}");
    // xskit info reads a kernel bond: its mode and policy, its members, a member's master.
    assert!(
        out.contains("kind              bond")
            && out.contains("bond              balance-xor, xmit_hash_policy layer3+4")
            && out.contains("members           eth1 (")
            && out.contains("master            bond0"),
        "{out}"
    );
    eprintln!("boot and script: {:?}", run.elapsed);
}

#[test]
fn a_guest_that_hangs_is_killed_at_its_timeout_with_its_console() {
    let Some(mut guest) = guest(GuestConfig::default().timeout(Duration::from_secs(40))) else {
        return;
    };
    let started = std::time::Instant::now();
    let err = guest.run("echo started; sleep 600").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("did not finish") && text.contains("started") && text.contains("console"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "killed at its timeout"
    );
    // The guest is gone: the TAP device can be opened by a new one.
    let again = guest.run("exit 0").unwrap();
    assert_eq!(again.status, 0);
}

/// A guest kernel that panics before the script starts is booted again, and after the last
/// boot the error names the panic (a kernel told to run an init that does not exist panics in
/// every boot).
#[test]
fn a_guest_kernel_that_panics_while_booting_is_retried_then_reported() {
    let Some(mut guest) = guest(
        GuestConfig::default()
            .cpus(1)
            .extra_kernel_args("rdinit=/xskit-no-such-init")
            .timeout(Duration::from_secs(60)),
    ) else {
        return;
    };
    let err = guest.run("echo never").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::Interrupted, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("each of 3 boots")
            && text.contains("panicked while booting")
            && text.contains("Kernel panic"),
        "{text}"
    );
}

/// The kernel's bond is the reference for xskit's hashes: a balance-xor bond of two virtio
/// NICs in the guest sends UDP flows (64 source ports, 32 destinations) and ICMP echoes of 16
/// ids under each xmit_hash_policy; the namespace captures every frame on both TAP devices,
/// and xskit's hash of each frame must name the member it left on.
#[test]
fn xskit_hashes_every_frame_to_the_member_the_kernels_bond_chose() {
    let Some(mut guest) = guest(GuestConfig::default().nics(2)) else {
        return;
    };
    let policies: Vec<&str> = XmitHashPolicy::ALL.iter().map(|p| p.name()).collect();
    let script = format!(
        r#"set -e
{WAIT_FOR_BOND}
ip link add bond0 type bond mode balance-xor miimon 50
ip link set eth0 master bond0
ip link set eth1 master bond0
ip link set bond0 up
ip addr add 203.0.113.2/24 dev bond0
for n in $(seq 10 41); do
    ip neigh replace 203.0.113.$n lladdr 02:58:47:ff:00:$(printf %02x $n) dev bond0
done
bond_up bond0
grep -i "slave interface\|mii status" /proc/net/bonding/bond0
python3 - <<'PY'
import socket, subprocess, struct
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff
for k, policy in enumerate({policies:?}):
    subprocess.run(["ip", "link", "set", "bond0", "type", "bond", "xmit_hash_policy", policy], check=True)
    for i in range(64):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("203.0.113.2", 20000 + i * 7))
        s.sendto(b"xskit bond reference", ("203.0.113.%d" % (10 + i % 32), 5000 + k))
        s.close()
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    for i in range(16):
        ident = 1 + i * 4099 % 65535
        body = struct.pack("!BBHHH", 8, 0, 0, ident, k) + b"xskit"
        body = body[:2] + struct.pack("!H", csum(body + b"\0")) + body[4:]
        r.sendto(body, ("203.0.113.%d" % (10 + i), 0))
    r.close()
print("sent")
PY
drained eth0 eth1
"#
    );
    let capture = TapCapture::start(&guest);
    let run = guest.run(&script);
    let captured = capture.finish_when(|f| reference_policy(f).is_some(), 80 * policies.len());
    let out = run.unwrap().ok().unwrap();
    assert!(out.contains("sent"), "{out}");
    // (policy, member) counts, and every disagreement.
    let mut seen = vec![[0usize; 2]; policies.len()];
    let mut wrong = Vec::new();
    for (member, frames) in captured.iter().enumerate() {
        for f in frames {
            let Some(k) = reference_policy(f) else {
                continue;
            };
            let policy = XmitHashPolicy::ALL[k];
            seen[k][member] += 1;
            let predicted = xmit_hash(policy, f) as usize % 2;
            if predicted != member {
                wrong.push(format!(
                    "{}: left on {member}, xskit says {predicted}: {f:02x?}",
                    policy.name()
                ));
            }
        }
    }
    for (k, counts) in seen.iter().enumerate() {
        assert_eq!(
            counts[0] + counts[1],
            80,
            "{}: {counts:?}\n{out}",
            policies[k]
        );
    }
    let l34 = seen[2];
    assert!(
        l34[0] > 0 && l34[1] > 0,
        "layer3+4 spreads the flows: {l34:?}"
    );
    assert!(
        wrong.is_empty(),
        "{} of {} frames disagree:\n{}",
        wrong.len(),
        80 * policies.len(),
        wrong.join("\n")
    );
}

/// The kernel's flow dissector is the reference for the encap policies (and for what the
/// other policies do with frames that are not plain IP): the guest's bond sends hand-built
/// frames through a packet socket (tunnels IP-in-IP, IPv6-in-IP and GRE with every optional
/// field and with Ethernet inside, in-band VLAN tags, IPv6 extension headers and fragments,
/// ARP, MPLS, ICMP types with and without an id, ICMP and ICMPv6 errors of each type quoting
/// TCP, UDP, an echo, a fragment, another error, and quotes cut short), 8 flows of each, under
/// every policy; each
/// frame ends in a trailer naming its policy, and xskit's hash of each captured frame must
/// name the member it left on.
#[test]
fn xskit_follows_the_kernels_flow_dissector_through_tunnels_and_odd_frames() {
    let Some(mut guest) = guest(GuestConfig::default().nics(2)) else {
        return;
    };
    let policies: Vec<&str> = XmitHashPolicy::ALL.iter().map(|p| p.name()).collect();
    let script = format!(
        r#"set -e
{WAIT_FOR_BOND}
ip link add bond0 type bond mode balance-xor miimon 50
ip link set eth0 master bond0
ip link set eth1 master bond0
ip link set bond0 up
bond_up bond0
python3 - <<'PY'
import random, socket, struct, subprocess
rnd = random.Random(7)
def b(n): return bytes(rnd.randrange(256) for _ in range(n))
def eth(proto, dst=None, src=None):
    return (dst or b"\x02" + b(5)) + (src or b"\x02" + b(5)) + struct.pack("!H", proto)
def ip4(proto, payload, frag=0, src=None, dst=None):
    return struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(payload), 1, frag, 64, proto, 0) + (src or b(4)) + (dst or b(4)) + payload
def ip6(nxt, payload):
    return struct.pack("!IHBB", 0x60000000, len(payload), nxt, 64) + b(16) + b(16) + payload
def udp(): return struct.pack("!HHHH", rnd.randrange(1, 65536), rnd.randrange(1, 65536), 16, 0) + b"xskitudp"
def tcp(): return struct.pack("!HHIIBBHHH", rnd.randrange(1, 65536), rnd.randrange(1, 65536), 1, 0, 0x50, 2, 1024, 0, 0)
def icmp(t): return struct.pack("!BBHHH", t, 0, 0, rnd.randrange(0, 65536), 1) + b"xskit"
def err(t, quote): return struct.pack("!BBHI", t, rnd.randrange(0, 16), 0, 0) + quote
def gre(flags, proto, inner):
    extra = b"".join(b(4) for bit in (0x8000, 0x2000, 0x1000) if flags & bit)
    return struct.pack("!HH", flags, proto) + extra + inner
templates = [
    ("arp", lambda: (0x0806, eth(0x0806) + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + b(6) + b(4) + b(6) + b(4))),
    ("ipip", lambda: (0x0800, eth(0x0800) + ip4(4, ip4(17, udp())))),
    ("ip6-in-ip", lambda: (0x0800, eth(0x0800) + ip4(41, ip6(17, udp())))),
    ("gre", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0, 0x0800, ip4(17, udp()))))),
    ("gre-csum-key-seq", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0xb000, 0x0800, ip4(6, tcp()))))),
    ("gre-key-ip6", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0x2000, 0x86dd, ip6(17, udp()))))),
    ("gretap", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0x2000, 0x6558, eth(0x0800) + ip4(17, udp()))))),
    ("gretap-vlan", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0, 0x6558, eth(0x8100) + struct.pack("!HH", 5, 0x0800) + ip4(17, udp()))))),
    ("gre-routing", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0x4000, 0x0800, ip4(17, udp()))))),
    ("gre-v1", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0x2001, 0x880b, b(8))))),
    ("ipip-first-fragment", lambda: (0x0800, eth(0x0800) + ip4(4, ip4(17, udp()), frag=0x2000))),
    ("ip6-hop-by-hop", lambda: (0x86dd, eth(0x86dd) + ip6(0, bytes([17, 0]) + b(6) + udp()))),
    ("ip6-fragment", lambda: (0x86dd, eth(0x86dd) + ip6(44, bytes([17, 0, 0, 0]) + b(4) + udp()))),
    ("ip6-in-ip6-tcp", lambda: (0x86dd, eth(0x86dd) + ip6(41, ip6(6, tcp())))),
    ("vlan-udp", lambda: (0x8100, eth(0x8100) + struct.pack("!HH", 7, 0x0800) + ip4(17, udp()))),
    ("qinq-udp", lambda: (0x88a8, eth(0x88a8) + struct.pack("!HHHH", 7, 0x8100, 9, 0x0800) + ip4(17, udp()))),
    ("mpls", lambda: (0x8847, eth(0x8847) + b(4) + ip4(17, udp()))),
    ("icmp-echo", lambda: (0x0800, eth(0x0800) + ip4(1, icmp(8)))),
    ("icmp-timestamp", lambda: (0x0800, eth(0x0800) + ip4(1, icmp(13)))),
    ("icmp-info", lambda: (0x0800, eth(0x0800) + ip4(1, icmp(15)))),
    ("icmp-mask", lambda: (0x0800, eth(0x0800) + ip4(1, icmp(17)))),
    ("icmp6-echo", lambda: (0x86dd, eth(0x86dd) + ip6(58, icmp(128)))),
    ("icmp6-type8", lambda: (0x86dd, eth(0x86dd) + ip6(58, icmp(8)))),
    ("udp-in-ipip-in-gre", lambda: (0x0800, eth(0x0800) + ip4(47, gre(0, 0x0800, ip4(4, ip4(17, udp())))))),
    ("ihl-4", lambda: (0x0800, eth(0x0800) + bytes([0x44]) + ip4(17, udp())[1:])),
    ("ihl-0", lambda: (0x0800, eth(0x0800) + bytes([0x40]) + ip4(17, udp())[1:])),
    ("icmp-unreach-udp", lambda: (0x0800, eth(0x0800) + ip4(1, err(3, ip4(17, udp()))))),
    ("icmp-quench-tcp", lambda: (0x0800, eth(0x0800) + ip4(1, err(4, ip4(6, tcp()))))),
    ("icmp-redirect-udp", lambda: (0x0800, eth(0x0800) + ip4(1, err(5, ip4(17, udp()))))),
    ("icmp-time-exceeded-tcp", lambda: (0x0800, eth(0x0800) + ip4(1, err(11, ip4(6, tcp()))))),
    ("icmp-parameter-problem-udp", lambda: (0x0800, eth(0x0800) + ip4(1, err(12, ip4(17, udp()))))),
    ("icmp-unreach-echo", lambda: (0x0800, eth(0x0800) + ip4(1, err(3, ip4(1, icmp(8)))))),
    ("icmp-unreach-fragment", lambda: (0x0800, eth(0x0800) + ip4(1, err(3, ip4(17, udp(), frag=0x2000))))),
    ("icmp-error-in-error", lambda: (0x0800, eth(0x0800) + ip4(1, err(11, ip4(1, err(3, ip4(17, udp()))))))),
    ("icmp-quote-cut-short", lambda: (0x0800, eth(0x0800) + ip4(1, err(3, b(4))))),
    ("icmp-quote-without-ports", lambda: (0x0800, eth(0x0800) + ip4(1, err(3, ip4(17, b"")[:20])))),
    ("icmp6-unreach-udp", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(1, ip6(17, udp()))))),
    ("icmp6-too-big-tcp", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(2, ip6(6, tcp()))))),
    ("icmp6-time-exceeded-udp", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(3, ip6(17, udp()))))),
    ("icmp6-parameter-problem-tcp", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(4, ip6(6, tcp()))))),
    ("icmp6-error-in-error", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(1, ip6(58, err(3, ip6(17, udp()))))))),
    ("icmp6-quote-cut-short", lambda: (0x86dd, eth(0x86dd) + ip6(58, err(1, b(20))))),
]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
for k, policy in enumerate({policies:?}):
    subprocess.run(["ip", "link", "set", "bond0", "type", "bond", "xmit_hash_policy", policy], check=True)
    for t, (name, make) in enumerate(templates):
        for i in range(8):
            proto, frame = make()
            s.sendto(frame + b"XSKB" + struct.pack("!HH", k, t), ("bond0", proto))
print("sent", len(templates))
PY
drained eth0 eth1
"#
    );
    let capture = TapCapture::start(&guest);
    let out = guest.run(&script).unwrap().ok().unwrap();
    let templates: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("sent "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the guest sent its frames: {out}"));
    let marked = |f: &[u8]| f.len() >= 8 && &f[f.len() - 8..f.len() - 4] == b"XSKB";
    let captured = capture.finish_when(marked, templates * 8 * policies.len());
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (member, frames) in captured.iter().enumerate() {
        for f in frames {
            let n = f.len();
            if n < 8 || &f[n - 8..n - 4] != b"XSKB" {
                continue;
            }
            let k = usize::from(u16::from_be_bytes([f[n - 4], f[n - 3]]));
            let t = u16::from_be_bytes([f[n - 2], f[n - 1]]);
            let policy = XmitHashPolicy::ALL[k];
            seen += 1;
            // In-band VLAN tags (templates 14 and 15): what Linux hashes depends on how the
            // tag reached the bond, not on the frame. Sent from a packet socket, the
            // network header is put after the tags while the protocol stays 802.1Q. The
            // dissector then reads the IP header as a tag, and vlan+srcmac sees no VLAN id
            // at all, as it reads only an accelerated tag. xskit hashes the frame as it is
            // on the wire.
            let in_band_vlan = matches!(t, 14 | 15)
                && matches!(
                    policy,
                    XmitHashPolicy::Encap23 | XmitHashPolicy::Encap34 | XmitHashPolicy::VlanSrcMac
                );
            if in_band_vlan {
                continue;
            }
            let predicted = xmit_hash(policy, f) as usize % 2;
            if predicted != member {
                wrong.push(format!(
                    "{} template {t}: left on {member}, xskit says {predicted}: {f:02x?}",
                    policy.name()
                ));
            }
        }
    }
    assert_eq!(
        seen,
        templates * 8 * policies.len(),
        "every frame captured\n{out}"
    );
    assert!(
        wrong.is_empty(),
        "{} of {seen} frames disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The policy index a reference frame was sent under: UDP to port 5000 + k, or an ICMP echo
/// request with sequence k, from 203.0.113.2.
fn reference_policy(f: &[u8]) -> Option<usize> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[26..30] != [203, 0, 113, 2] {
        return None;
    }
    let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
    let k = match f[23] {
        17 => usize::from(u16::from_be_bytes([f[l4 + 2], f[l4 + 3]])).checked_sub(5000)?,
        1 if f[l4] == 8 => usize::from(u16::from_be_bytes([f[l4 + 6], f[l4 + 7]])),
        _ => return None,
    };
    (k < XmitHashPolicy::ALL.len()).then_some(k)
}

/// Generic zero-copy transmit ("xsk: build skb by page") for real: AF_XDP copy-mode transmit on virtio_net,
/// which sets IFF_TX_SKB_NO_LINEAR so the kernel builds each skb around the UMEM page, against
/// a veth pair in the same guest, which copies the frame into a new skb. One guest run, the
/// same sizes on both; the rates are TCG's, so only their ratio means anything, and the test
/// asserts only that both transmitted (the README has the table).
#[test]
fn copy_mode_transmit_on_virtio_net_against_veth_in_one_guest() {
    let Some(mut guest) = guest(GuestConfig::default().nics(1)) else {
        return;
    };
    let sizes = [64, 512, 1500];
    let mut script = String::from(
        "set -e
         ip link set eth0 up
         ip link add xva type veth peer name xvb
         ip link set xva up
         ip link set xvb up
         ",
    );
    for size in sizes {
        for dev in ["eth0", "xva"] {
            script.push_str(&format!(
                "echo \"run {dev} {size} $({XSKIT} bench txpush -i {dev} -m skb -s {size} -d 2 --json)\"\n"
            ));
        }
    }
    let out = guest.run(&script).unwrap().ok().unwrap();
    let mut table = String::new();
    for size in sizes {
        let rate = |dev: &str| -> f64 {
            let prefix = format!("run {dev} {size} ");
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no {dev} {size}: {out}"));
            let json: serde_json::Value = serde_json::from_str(line).unwrap();
            json["tx_pps"].as_f64().unwrap()
        };
        let (virtio, veth) = (rate("eth0"), rate("xva"));
        assert!(virtio > 0.0 && veth > 0.0, "{size}: {virtio} {veth}\n{out}");
        table.push_str(&format!(
            "{size:>5} B  virtio_net {virtio:>9.0} pps  veth {veth:>9.0} pps  ratio {:.2}\n",
            virtio / veth
        ));
    }
    eprintln!("AF_XDP copy-mode txpush in the guest (TCG):\n{table}");
}

/// Every frame arriving on the guest's TAP devices (its NICs' far ends), captured from the
/// namespace until [`TapCapture::finish_when`].
struct TapCapture {
    stop: Arc<AtomicBool>,
    frames: Vec<Arc<std::sync::Mutex<Vec<Vec<u8>>>>>,
    handles: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl TapCapture {
    fn start(guest: &Guest) -> TapCapture {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let frames: Vec<_> = guest.taps().iter().map(|_| Arc::default()).collect();
        let handles: Vec<_> = guest
            .taps()
            .iter()
            .zip(&frames)
            .map(|(tap, kept)| {
                let (tap, stop, ready) = (tap.clone(), stop.clone(), ready_tx.clone());
                let kept: Arc<std::sync::Mutex<Vec<Vec<u8>>>> = Arc::clone(kept);
                guest.ns().spawn(move || {
                    let index = xskit::Interface::by_name(&tap).unwrap().index();
                    let mut ring = PacketRxRing::open(index).unwrap();
                    ready.send(()).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        ring.receive(Some(Duration::from_millis(50)), |f| {
                            kept.lock().unwrap().push(f.to_vec());
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..handles.len() {
            ready.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        TapCapture {
            stop,
            frames,
            handles,
        }
    }

    /// Each TAP's frames, in NIC order, once `want` of them (all TAPs together) are as
    /// `counted` says, or after a minute (the caller's checks then say what is missing).
    fn finish_when(self, counted: impl Fn(&[u8]) -> bool, want: usize) -> Vec<Vec<Vec<u8>>> {
        let have = || -> usize {
            let kept = self.frames.iter().map(|k| k.lock().unwrap());
            kept.map(|k| k.iter().filter(|f| counted(f)).count()).sum()
        };
        xskit_testbed::wait_for(Duration::from_secs(60), || (have() >= want).then_some(()));
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.join().unwrap().unwrap();
        }
        self.frames
            .into_iter()
            .map(|k| std::mem::take(&mut *k.lock().unwrap()))
            .collect()
    }
}

/// A UDP frame of flow `i` from the namespace to the guest's MAC `dst`.
fn flow_frame(dst: [u8; 6], i: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 0x58, 0x47, 0xee, 0x00, 0x01]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[203, 0, 113, 1 + (i % 8) as u8 * 16]);
    f[30..34].copy_from_slice(&[203, 0, 113, 2]);
    f[34..36].copy_from_slice(&(30000 + i * 13).to_be_bytes());
    f[36..38].copy_from_slice(&7777u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// The XDP bonding patch for real: xskit's XDP program attached (native) to the kernel's bond in the guest
/// sends every packet back with XDP_TX, and the bond's hash picks the member it leaves on —
/// the member xskit's layer3+4 hash names for the reflected frame. Then the same program on
/// a single virtio NIC reflects everything out of that NIC.
#[test]
fn xdp_tx_on_a_kernel_bond_leaves_through_the_bonds_hash() {
    let Some(mut guest) = guest(GuestConfig::default().nics(2)) else {
        return;
    };
    let script = format!(
        r#"set -e
{WAIT_FOR_BOND}
ip link add bond0 type bond mode balance-xor xmit_hash_policy layer3+4 miimon 50
ip link set eth0 master bond0
ip link set eth1 master bond0
ip link set bond0 up
bond_up bond0
{XSKIT} bench xdp-tx -i bond0 -m drv -d 6 --json > $TMPDIR/bond.json 2>$TMPDIR/bond.err &
xdp_on bond0 $!
{XSKIT} info -i eth1 | grep "xdp program"
echo bond-ready
wait
cat $TMPDIR/bond.json $TMPDIR/bond.err
ip link set eth1 nomaster
ip link set eth1 up
until ! ip -d link show eth1 | grep -q 'prog/xdp'; do sleep 0.05; done
{XSKIT} bench xdp-tx -i eth1 -m drv -d 6 --json > $TMPDIR/nic.json 2>$TMPDIR/nic.err &
xdp_on eth1 $!
echo nic-ready
wait
cat $TMPDIR/nic.json $TMPDIR/nic.err
"#
    );
    let capture = TapCapture::start(&guest);
    let taps = guest.taps().to_vec();
    let ns = guest.ns().clone();
    let send = move |tap: &str, dst: [u8; 6]| {
        let tap = tap.to_string();
        ns.run(move || {
            let index = xskit::Interface::by_name(&tap).unwrap().index();
            let tx = PacketTx::open(index).unwrap();
            for i in 0..64 {
                assert_eq!(tx.send_copies(&flow_frame(dst, i), 1).unwrap(), 1);
            }
        })
        .unwrap();
    };
    let run = {
        // Fails, with the console, if the bond's program was not attached.
        let running = guest
            .spawn_until(&script, "bond-ready", Duration::from_secs(90))
            .unwrap();
        // The bond's members carry the bond's MAC, eth0's.
        send(&taps[0], Guest::mac(0));
        assert!(running.wait_for_output("nic-ready", Duration::from_secs(90)));
        send(&taps[1], Guest::mac(1));
        running.wait().unwrap()
    };
    // The 64 flows sent to the bond and the 64 to the single NIC, reflected.
    let reflected_flow = |f: &[u8]| f.len() >= 42 && f[36..38] == 7777u16.to_be_bytes();
    let captured = capture.finish_when(reflected_flow, 128);
    let out = run.ok().unwrap();
    assert!(
        out.contains("xdp program"),
        "the bond put the program on its members: {out}"
    );
    // Reflected frames: from the guest's MAC (swapped), to the namespace's.
    let reflected = |member: usize, src: [u8; 6]| -> Vec<&Vec<u8>> {
        captured[member]
            .iter()
            .filter(|f| f.len() >= 42 && f[6..12] == src && f[36..38] == 7777u16.to_be_bytes())
            .collect()
    };
    let (bond0, bond1) = (reflected(0, Guest::mac(0)), reflected(1, Guest::mac(0)));
    assert_eq!(
        bond0.len() + bond1.len(),
        64,
        "every bond packet came back once: {out}"
    );
    assert!(
        !bond0.is_empty() && !bond1.is_empty(),
        "the hash spread the flows: {} / {}",
        bond0.len(),
        bond1.len()
    );
    for (member, frames) in [(0, &bond0), (1, &bond1)] {
        for f in frames.iter() {
            assert_eq!(
                xmit_hash(XmitHashPolicy::Layer34, f) as usize % 2,
                member,
                "{f:02x?}"
            );
        }
    }
    let nic = reflected(1, Guest::mac(1));
    assert_eq!(
        nic.len(),
        64,
        "the single NIC sent every packet back: {out}"
    );
    assert!(out.contains("\"bench\":\"xdp-tx\""), "{out}");
}
