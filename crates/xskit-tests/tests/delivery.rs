//! Probes across a veth testbed arrive complete, in order and intact, in every mode and
//! variant (modelled on the kernel's xskxceiver tests).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use xskit::{BusyPoll, Mode, Port, PortConfig, SocketConfig, UmemConfig};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, ReceiveOptions, SendOptions, SequenceCheck};

const COUNT: u64 = 10_000;

fn check_delivery(
    mode: Mode,
    rx_cfg: PortConfig,
    tx_cfg: PortConfig,
    recv: ReceiveOptions,
    size: usize,
) {
    let bed = bed(TestbedConfig::default());
    let mut rx = open(&bed.b, 0, &rx_cfg.mode(mode)).expect("receiver port");
    let mut tx = open(&bed.a, 0, &tx_cfg.mode(mode)).expect("sender port");
    let send = SendOptions {
        count: COUNT,
        size,
        ..SendOptions::default()
    };
    let recv = recv.count(COUNT);
    let (sent, report) = transfer(&mut rx, &mut tx, &addrs(&bed.a, &bed.b), &send, &recv);
    assert_eq!(sent, COUNT, "{mode:?}: every probe handed to the kernel");
    assert!(
        report.check.is_perfect(COUNT),
        "{mode:?} ({}): {:?}, kernel {}",
        rx.mode(),
        report.check,
        rx.statistics().unwrap()
    );
    assert_eq!(tx.tx_in_flight(), 0, "every transmit completed");
}

#[test]
fn in_order_delivery_skb_and_drv() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(
            mode,
            PortConfig::default(),
            PortConfig::default(),
            ReceiveOptions::default(),
            64,
        );
    }
}

#[test]
fn modes_report_what_the_kernel_gave() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    for (mode, attach) in [
        (Mode::Skb, "xdp-skb copy"),
        (Mode::Drv, "xdp-drv copy"),
        (Mode::Auto, "xdp-drv copy"),
    ] {
        let port = open(&bed.b, 0, &PortConfig::default().mode(mode)).unwrap();
        assert_eq!(port.mode().to_string(), attach);
        assert!(!port.mode().zero_copy);
        if mode == Mode::Auto {
            // veth has no zero-copy: auto must say it fell back, and why.
            assert!(
                port.mode()
                    .fallbacks
                    .iter()
                    .any(|r| r.contains("zero-copy is not available on")
                        && r.contains("using copy mode")),
                "{:?}",
                port.mode().fallbacks
            );
        }
    }
}

#[test]
fn poll_mode_delivery() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let recv = ReceiveOptions::default().poll_wait(Some(Duration::from_millis(100)));
        check_delivery(mode, PortConfig::default(), PortConfig::default(), recv, 64);
    }
}

#[test]
fn busy_poll_delivery() {
    if !privileged() {
        return;
    }
    let cfg =
        PortConfig::default().socket(SocketConfig::default().busy_poll(Some(BusyPoll::default())));
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(mode, cfg, cfg, ReceiveOptions::default(), 64);
    }
}

#[test]
fn need_wakeup_off_delivery() {
    if !privileged() {
        return;
    }
    let cfg = PortConfig::default().socket(SocketConfig::default().need_wakeup(false));
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(mode, cfg, cfg, ReceiveOptions::default(), 64);
    }
}

#[test]
fn frames_of_2k() {
    if !privileged() {
        return;
    }
    let cfg = PortConfig::default().umem(UmemConfig::default().frame_size(2048));
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(mode, cfg, cfg, ReceiveOptions::default(), 1500);
    }
}

#[test]
fn unaligned_chunks() {
    if !privileged() {
        return;
    }
    // 3000-byte chunks are only possible in unaligned mode; packets then start at addresses
    // that are not a multiple of the chunk size, and the kernel reports offsets in the top bits.
    let cfg = PortConfig::default().umem(UmemConfig::default().frame_size(3000).unaligned(true));
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(mode, cfg, cfg, ReceiveOptions::default(), 1000);
    }
}

#[test]
fn headroom_is_left_in_front_of_packets() {
    if !privileged() {
        return;
    }
    let cfg = PortConfig::default().umem(UmemConfig::default().headroom(512));
    let bed = bed(TestbedConfig::default());
    let mut rx = open(&bed.b, 0, &cfg.mode(Mode::Drv)).unwrap();
    let mut tx = open(&bed.a, 0, &PortConfig::default().mode(Mode::Drv)).unwrap();
    let umem = rx.umem().clone();
    let seen = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let send = SendOptions {
        count: 100,
        ..SendOptions::default()
    };
    probe::send(&mut tx, &addrs(&bed.a, &bed.b), &send, &seen, &stop).unwrap();
    let mut frames = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while frames.len() < 100 && Instant::now() < deadline {
        rx.receive(&mut frames, 64).unwrap();
    }
    assert_eq!(frames.len(), 100);
    for f in &frames {
        assert_eq!(
            f.addr() % 4096,
            256 + 512,
            "data starts after XDP and user headroom"
        );
        assert!(matches!(
            probe::check(umem.data(f)),
            probe::Probe::Valid { .. }
        ));
    }
    rx.recycle(&mut frames);
}

/// Both ends send and receive at once on one port each.
#[test]
fn bidirectional_on_one_pair() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let bed = bed(TestbedConfig::default());
        let cfg = PortConfig::default().mode(mode);
        let mut a = open(&bed.a, 0, &cfg).unwrap();
        let mut b = open(&bed.b, 0, &cfg).unwrap();
        let seen_by_a = AtomicU64::new(0);
        let seen_by_b = AtomicU64::new(0);
        let ab = addrs(&bed.a, &bed.b);
        let ba = addrs(&bed.b, &bed.a);
        let (check_a, check_b) = std::thread::scope(|s| {
            let ta = s.spawn(|| duplex(&mut a, &ab, &seen_by_b, &seen_by_a));
            let tb = s.spawn(|| duplex(&mut b, &ba, &seen_by_a, &seen_by_b));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(check_a.is_perfect(COUNT), "{mode:?} a received {check_a:?}");
        assert!(check_b.is_perfect(COUNT), "{mode:?} b received {check_b:?}");
    }
}

/// Sends COUNT probes while receiving the peer's COUNT, one batch of each per turn.
fn duplex(
    port: &mut Port,
    addrs: &probe::ProbeAddrs,
    peer_seen: &AtomicU64,
    seen: &AtomicU64,
) -> SequenceCheck {
    let umem = port.umem().clone();
    let mut out = Vec::with_capacity(64);
    let mut inbox = Vec::with_capacity(64);
    let mut check = SequenceCheck::default();
    let mut seq = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while (seq < COUNT || check.probes() < COUNT || !out.is_empty()) && Instant::now() < deadline {
        if out.is_empty() && seq < COUNT {
            let room = 128u64.saturating_sub(seq - peer_seen.load(Ordering::Acquire));
            port.alloc(&mut out, room.min(32).min(COUNT - seq) as usize);
            for f in out.iter_mut() {
                let len = probe::write(umem.buffer_mut(f), 64, seq, addrs).unwrap();
                umem.set_len(f, len).unwrap();
                seq += 1;
            }
        }
        port.send(&mut out).unwrap();
        port.receive(&mut inbox, 64).unwrap();
        for f in &inbox {
            check.observe(umem.data(f));
        }
        port.recycle(&mut inbox);
        seen.store(check.probes(), Ordering::Release);
    }
    check
}

#[test]
fn tx_skb_budget_and_tx_metadata_room() {
    if !privileged() {
        return;
    }
    let cfg = PortConfig::default()
        .umem(UmemConfig::default().tx_metadata_len(16))
        .socket(SocketConfig::default().tx_skb_budget(Some(32)));
    for mode in [Mode::Skb, Mode::Drv] {
        check_delivery(
            mode,
            PortConfig::default(),
            cfg,
            ReceiveOptions::default(),
            64,
        );
    }
}

/// A UMEM on huge pages. The test reserves a few 2 MiB pages for its duration and gives them
/// back; where none can be reserved it checks the error instead.
#[test]
fn huge_page_umem() {
    if !privileged() {
        return;
    }
    const KNOB: &str = "/proc/sys/vm/nr_hugepages";
    let before: u64 = std::fs::read_to_string(KNOB)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(KNOB, self.0.to_string());
        }
    }
    let _restore = Restore(before);
    let _ = std::fs::write(KNOB, (before + 8).to_string());
    let cfg = PortConfig::default().umem(UmemConfig::default().frame_count(2048).huge_pages(true));
    match xskit::Umem::new(cfg.umem) {
        Ok(umem) => {
            drop(umem);
            for mode in [Mode::Skb, Mode::Drv] {
                check_delivery(mode, cfg, cfg, ReceiveOptions::default(), 1500);
            }
        }
        Err(e) => assert!(e.to_string().contains("nr_hugepages"), "{e}"),
    }
}
