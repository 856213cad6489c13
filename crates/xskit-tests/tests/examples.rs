//! The library's examples, run: their code is compiled into this test as it is.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use common::*;
use xskit::{AsyncPort, PortConfig};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, ReceiveOptions, SendOptions};

#[allow(dead_code)]
#[path = "../../xskit/examples/tokio_reflect.rs"]
mod tokio_reflect;

#[allow(dead_code)]
#[path = "../../xskit/examples/own_program.rs"]
mod own_program;

/// Fewer than the 256 slots of a veth receive ring: the sender does not wait for the
/// reflections before it reads them.
const PROBES: u64 = 200;

/// tokio drives host b's port (receive and transmit through `AsyncFd`); host a sends probes
/// and gets every one back, in order and intact.
#[test]
fn tokio_reflect_sends_every_probe_back_in_order() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let b = open(&bed.b, 0, &PortConfig::default()).expect("reflector port");
    let mut a = open(&bed.a, 0, &PortConfig::default()).expect("sender port");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (seen, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (reflected, sent, report) = std::thread::scope(|s| {
        let reflector = s.spawn(|| {
            runtime.block_on(async {
                let mut b = AsyncPort::new(b)?;
                tokio_reflect::reflect(&mut b, PROBES, Duration::from_secs(5)).await
            })
        });
        let send = SendOptions {
            count: PROBES,
            window: u64::MAX,
            ..SendOptions::default()
        };
        let sent = probe::send(&mut a, &addrs(&bed.a, &bed.b), &send, &seen, &stop).unwrap();
        let recv = ReceiveOptions::default().count(PROBES);
        let report = probe::receive(&mut a, &recv, &seen, &stop).unwrap();
        (reflector.join().unwrap().unwrap(), sent, report)
    });
    assert_eq!(sent, PROBES);
    assert_eq!(reflected, PROBES);
    assert!(
        report.check.is_perfect(PROBES),
        "{:?}, kernel {}",
        report.check,
        a.statistics().unwrap()
    );
}

/// The example's program, compiled as its header says a user compiles it.
/// Three pings from `from` to `to`, a second's wait for each answer.
fn ping(from: &xskit_testbed::Host, to: &xskit_testbed::Host) -> std::process::Output {
    from.ns
        .command("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "1", &to.ip.to_string()])
        .output()
        .unwrap()
}

fn own_program_object() -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("xskit-own-program-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let object = dir.join("udp_to_socket.o");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../xskit/examples/bpf/udp_to_socket.c"
    );
    let status = std::process::Command::new("clang")
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!(
            "-I/usr/include/{}-linux-gnu",
            std::env::consts::ARCH
        ))
        .args(["-c", source, "-o"])
        .arg(&object)
        .status()
        .expect("clang (scripts/setup.sh installs it)");
    assert!(status.success(), "clang compiles {source}");
    let elf = std::fs::read(&object).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    elf
}

/// A user's own XDP program feeds an xskit port: UDP probes to port 9 reach the socket,
/// while the kernel still answers ping through the same program (which counts what it
/// passed on in a map of its own).
#[test]
fn own_program_steers_probes_to_the_socket_and_the_rest_to_the_kernel() {
    if !privileged() {
        return;
    }
    let elf = own_program_object();
    let bed = bed(TestbedConfig::default());
    let (attached, wait_attached) = std::sync::mpsc::channel();
    let ifname = bed.b.ifname.clone();
    let seen = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            bed.b.ns.run(|| {
                own_program::receive_through(
                    &ifname,
                    &elf,
                    "udp_to_socket",
                    PROBES,
                    Duration::from_secs(5),
                    move || attached.send(()).unwrap(),
                )
            })
        });
        wait_attached
            .recv_timeout(Duration::from_secs(10))
            .expect("the program attached and the socket registered");
        let ping = ping(&bed.a, &bed.b);
        assert!(
            ping.status.success(),
            "{}",
            String::from_utf8_lossy(&ping.stdout)
        );
        // Host a only sends: its replies to ping stay with its kernel.
        let mut a = open(&bed.a, 0, &PortConfig::default().tx_only(true)).expect("sender port");
        let send = SendOptions {
            count: PROBES,
            window: u64::MAX,
            ..SendOptions::default()
        };
        let (seen_by_peer, stop) = (AtomicU64::new(0), AtomicBool::new(false));
        let sent =
            probe::send(&mut a, &addrs(&bed.a, &bed.b), &send, &seen_by_peer, &stop).unwrap();
        assert_eq!(sent, PROBES);
        receiver.join().unwrap().unwrap().unwrap()
    });
    assert_eq!(seen.received, PROBES, "{seen:?}");
    assert!(
        seen.passed >= 3,
        "the echo requests went to the kernel: {seen:?}"
    );
}

#[allow(dead_code)]
#[path = "../../xskit-fwd/examples/bump_in_the_wire.rs"]
mod bump_in_the_wire;

/// The forwarder as a library, in the wire between hosts a and c: probes cross intact and in
/// order, ping does not, and the rule counts the pings it dropped in the kernel.
#[test]
fn bump_in_the_wire_forwards_probes_and_drops_ping() {
    if !privileged() {
        return;
    }
    // a and c on one subnet, m not routing: they reach each other only through the bump.
    let chain = xskit_testbed::Chain::bridged().unwrap();
    let (ma, mc) = (chain.m_a.ifname.clone(), chain.m_c.ifname.clone());
    let stop = AtomicBool::new(false);
    let (running, wait_running) = std::sync::mpsc::channel();
    let (report, ping, probes) = std::thread::scope(|s| {
        let forwarder = s.spawn(|| {
            chain.m_a.ns.run(|| {
                // Its first tick: set up, rules installed, workers forwarding.
                let on_tick = move |_: &xskit_fwd::Counters| {
                    let _ = running.send(());
                };
                bump_in_the_wire::bump(&ma, &mc, &stop, on_tick).map_err(|e| e.to_string())
            })
        });
        wait_running
            .recv_timeout(Duration::from_secs(20))
            .expect("the forwarder set up and ran");
        let ping = ping(&chain.a, &chain.c);
        let mut tx = open(&chain.a, 0, &PortConfig::default().tx_only(true)).unwrap();
        let mut rx = open(&chain.c, 0, &PortConfig::default()).unwrap();
        let (seen, done) = (AtomicU64::new(0), AtomicBool::new(false));
        let probes = std::thread::scope(|p| {
            let receiver = p.spawn(|| {
                let options = ReceiveOptions::default().count(PROBES);
                probe::receive(&mut rx, &options, &seen, &done).unwrap()
            });
            let send = SendOptions {
                count: PROBES,
                ..SendOptions::default()
            };
            let to_c = addrs(&chain.a, &chain.c);
            probe::send(&mut tx, &to_c, &send, &seen, &done).unwrap();
            receiver.join().unwrap()
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let report = forwarder.join().unwrap().unwrap().unwrap();
        (report, ping, probes)
    });
    assert!(
        !ping.status.success(),
        "ping crossed a filter that drops it"
    );
    assert!(probes.check.is_perfect(PROBES), "{:?}", probes.check);
    let rule = &report.counters.rules[0];
    assert_eq!(rule.name, "no-ping");
    assert!(
        rule.in_kernel >= 3 && rule.packets == rule.in_kernel,
        "{rule:?}"
    );
    assert_eq!(report.frames.unaccounted, 0, "{:?}", report.frames);
}
