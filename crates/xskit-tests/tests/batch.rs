//! The ports' batch verbs on veth: every frame received is counted, reflected frames reach
//! the sender's interface, and resent frames keep going out, with no frame lost on the way.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use xskit::{Interface, Mode, PortConfig};
use xskit_traffic::probe::{self, SendOptions};

fn rx_packets(host: &xskit_testbed::Host) -> u64 {
    let name = host.ifname.clone();
    host.ns
        .run(move || Interface::by_name(&name)?.link_info())
        .unwrap()
        .unwrap()
        .stats
        .rx_packets
}

#[test]
fn drop_received_counts_every_probe_sent_to_it() {
    if !privileged() {
        return;
    }
    let (mut rx, mut tx, bed) = receiver_and_sender(Mode::Drv, PortConfig::default());
    let (seen, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let opts = SendOptions {
        count: 20_000,
        ..SendOptions::default()
    };
    let sent = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while seen.load(Ordering::Relaxed) < opts.count && Instant::now() < deadline {
                let n = rx.drop_received(64).unwrap();
                seen.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        let sent = probe::send(&mut tx, &addrs(&bed.a, &bed.b), &opts, &seen, &stop).unwrap();
        receiver.join().unwrap();
        sent
    });
    assert_eq!(sent, opts.count);
    assert_eq!(seen.load(Ordering::Relaxed), opts.count);
    let stats = rx.statistics().unwrap();
    assert_eq!(stats.rx_dropped, 0, "{stats:?}");
    for len in [0, 1 << 20] {
        let refused = tx.resend(64, len).unwrap_err().to_string();
        assert!(refused.contains("sent again with 1 to"), "{refused}");
    }
}

#[test]
fn reflected_frames_come_back_to_the_sender_with_their_macs_swapped_in_place() {
    if !privileged() {
        return;
    }
    let bed = bed(xskit_testbed::TestbedConfig::default());
    let mut port = open(&bed.b, 0, &PortConfig::default().mode(Mode::Drv)).unwrap();
    // The kernel's own pings, to a neighbour whose address a knows without asking.
    let mac = bed.b.mac.map(|b| format!("{b:02x}")).join(":");
    let status = bed
        .a
        .ns
        .command("ip")
        .args(["neigh", "replace", &bed.b.ip.to_string(), "lladdr", &mac])
        .args(["dev", &bed.a.ifname, "nud", "permanent"])
        .status()
        .unwrap();
    assert!(status.success());
    let before = rx_packets(&bed.a);
    let stop = AtomicBool::new(false);
    let (reflected, macs) = std::thread::scope(|s| {
        let reflector = s.spawn(|| {
            let (mut n, mut macs) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                n += port
                    .reflect(64, |bytes| {
                        let (dst, rest) = bytes.split_at_mut(6);
                        dst.swap_with_slice(&mut rest[..6]);
                        macs.push((bytes[..6].to_vec(), bytes[6..12].to_vec()));
                    })
                    .unwrap() as u64;
            }
            port.finish_sending(Duration::from_secs(1)).unwrap();
            (n, macs)
        });
        let ping = bed
            .a
            .ns
            .command("ping")
            .args([
                "-c",
                "20",
                "-i",
                "0.01",
                "-w",
                "3",
                "-q",
                &bed.b.ip.to_string(),
            ])
            .output()
            .unwrap();
        // Stopped once a's interface has its pings back (or the count below says otherwise).
        xskit_testbed::wait_for(Duration::from_secs(30), || {
            (rx_packets(&bed.a) - before >= 20).then_some(())
        });
        stop.store(true, Ordering::Relaxed);
        assert!(
            !ping.status.success(),
            "nobody answers: b's frames are reflected"
        );
        reflector.join().unwrap()
    });
    assert!(reflected >= 20, "{reflected} reflected");
    let echoes = macs
        .iter()
        .filter(|(dst, src)| dst[..] == bed.a.mac && src[..] == bed.b.mac)
        .count();
    assert!(echoes >= 20, "{echoes} of a's pings were turned back to a");
    let back = rx_packets(&bed.a) - before;
    assert!(back >= 20, "a's interface received {back} of them back");
}
