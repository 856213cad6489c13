//! The guest testbed: Debian's 6.12 kernel under QEMU with virtio NICs on TAP devices, for
//! what the host kernel lacks (bonding, virtio_net). Each boot takes seconds under TCG, so a
//! test puts its steps into one script where it can.

mod common;

use std::time::Duration;

use common::*;
use xskit_testbed::{Guest, GuestConfig};
use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

/// A guest for a test, or a skip without root (a failure under XSKIT_REQUIRE_PRIVILEGES,
/// and a failure saying what is missing when the guest's packages are not installed).
fn guest(config: GuestConfig) -> Option<Guest> {
    if !privileged() {
        return None;
    }
    Some(Guest::new(&config).unwrap_or_else(|e| panic!("guest testbed: {e}")))
}

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
         ip link add bond0 type bond mode balance-xor
         ip link show bond0
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
    eprintln!("boot and script: {:?}", run.elapsed);
}

#[test]
fn a_guest_that_hangs_is_killed_at_its_timeout_with_its_console() {
    let Some(mut guest) = guest(GuestConfig::default().timeout(Duration::from_secs(25))) else {
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
    assert!(started.elapsed() < Duration::from_secs(60));
    // The guest is gone: the TAP device can be opened by a new one.
    let again = guest.run("exit 0").unwrap();
    assert_eq!(again.status, 0);
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
ip link add bond0 type bond mode balance-xor miimon 50
ip link set eth0 master bond0
ip link set eth1 master bond0
ip link set bond0 up
ip addr add 203.0.113.2/24 dev bond0
for n in $(seq 10 41); do
    ip neigh replace 203.0.113.$n lladdr 02:58:47:ff:00:$(printf %02x $n) dev bond0
done
sleep 1
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
sleep 1
"#
    );
    let taps = guest.taps().to_vec();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let collectors: Vec<_> = taps
        .iter()
        .map(|tap| {
            let (tap, stop) = (tap.clone(), stop.clone());
            guest.ns().spawn(move || {
                let index = xskit::Interface::by_name(&tap).unwrap().index();
                let mut ring = xskit_traffic::baseline::PacketRxRing::open(index).unwrap();
                let mut frames: Vec<Vec<u8>> = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    ring.receive(Some(Duration::from_millis(50)), |f| frames.push(f.to_vec()))
                        .unwrap();
                }
                frames
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let run = guest.run(&script);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let captured: Vec<Vec<Vec<u8>>> = collectors
        .into_iter()
        .map(|c| c.join().unwrap().unwrap())
        .collect();
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
