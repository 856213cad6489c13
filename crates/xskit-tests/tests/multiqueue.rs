//! Multi-buffer packets and shared UMEM across queues.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use xskit::{
    Interface, Mode, Port, PortConfig, Socket, SocketConfig, Umem, UmemConfig, XdpProgram,
};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, SendOptions, SequenceCheck};

const JUMBO: usize = 9000;

/// Sends `count` jumbo probes, each as a chain of frames marked XDP_PKT_CONTD.
fn send_jumbo(tx: &mut Port, addrs: &probe::ProbeAddrs, count: u64, seen: &AtomicU64) {
    let umem = tx.umem().clone();
    let mut packet = vec![0u8; JUMBO];
    let mut chain = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for seq in 0..count {
        while seq.saturating_sub(seen.load(Ordering::Acquire)) >= 32 && Instant::now() < deadline {
            tx.complete();
        }
        probe::write(&mut packet, JUMBO, seq, addrs).unwrap();
        let mut rest = &packet[..];
        while !rest.is_empty() {
            while tx.alloc(&mut chain, 1) == 0 && Instant::now() < deadline {}
            let frame = chain.last_mut().unwrap();
            let take = rest.len().min(umem.capacity(frame));
            umem.write(frame, &rest[..take]).unwrap();
            rest = &rest[take..];
            frame.set_continued(!rest.is_empty());
        }
        assert!(chain.len() >= 3, "a jumbo probe spans several frames");
        while !chain.is_empty() && Instant::now() < deadline {
            tx.send(&mut chain).unwrap();
        }
    }
    tx.finish_sending(deadline.saturating_duration_since(Instant::now()))
        .unwrap();
}

/// Receives frame chains and checks each reassembled packet.
fn receive_jumbo(rx: &mut Port, count: u64, seen: &AtomicU64) -> (SequenceCheck, u64) {
    let umem = rx.umem().clone();
    let mut frames = Vec::with_capacity(64);
    let mut packet = Vec::with_capacity(JUMBO);
    let mut check = SequenceCheck::default();
    let mut max_chain = 0;
    let mut chain = 0;
    let mut last = Instant::now();
    while check.probes() < count && last.elapsed() < Duration::from_secs(3) {
        if rx.receive(&mut frames, 64).unwrap() == 0 {
            continue;
        }
        last = Instant::now();
        let mut chains = xskit::packets(&frames);
        for frames in chains.by_ref() {
            umem.gather(frames, &mut packet);
            check.observe(&packet);
            max_chain = max_chain.max(chain + frames.len());
            packet.clear();
            chain = 0;
        }
        umem.gather(chains.remainder(), &mut packet);
        chain += chains.remainder().len();
        rx.recycle(&mut frames);
        seen.store(check.probes(), Ordering::Release);
    }
    (check, max_chain as u64)
}

#[test]
fn jumbo_packets_through_multi_buffer() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let bed = bed(TestbedConfig::default().mtu(Some(JUMBO as u32)));
        let cfg = PortConfig::default()
            .mode(mode)
            .socket(SocketConfig::default().multi_buffer(true));
        let mut rx = open(&bed.b, 0, &cfg).unwrap();
        let mut tx = open(&bed.a, 0, &cfg).unwrap();
        assert!(rx.program().is_some_and(|p| p.is_multi_buffer()));
        let seen = AtomicU64::new(0);
        let count = 300;
        let ab = addrs(&bed.a, &bed.b);
        let (check, max_chain) = std::thread::scope(|s| {
            let r = s.spawn(|| receive_jumbo(&mut rx, count, &seen));
            send_jumbo(&mut tx, &ab, count, &seen);
            r.join().unwrap()
        });
        assert!(
            check.is_perfect(count),
            "{mode:?}: {check:?} kernel {}",
            rx.statistics().unwrap()
        );
        assert!(
            max_chain >= 3,
            "{mode:?}: packets arrived as chains of {max_chain}"
        );
    }
}

#[test]
fn jumbo_packets_without_multi_buffer_are_dropped_and_counted() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default().mtu(Some(JUMBO as u32)));
    let mut rx = open(&bed.b, 0, &PortConfig::default().mode(Mode::Skb)).unwrap();
    let mut tx = open(
        &bed.a,
        0,
        &PortConfig::default()
            .mode(Mode::Skb)
            .socket(SocketConfig::default().multi_buffer(true)),
    )
    .unwrap();
    let seen = AtomicU64::new(u64::MAX / 2);
    send_jumbo(&mut tx, &addrs(&bed.a, &bed.b), 10, &seen);
    let deadline = Instant::now() + Duration::from_secs(2);
    while rx.statistics().unwrap().rx_dropped < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rx.statistics().unwrap().rx_dropped, 10);
    let mut frames = Vec::new();
    assert_eq!(rx.receive(&mut frames, 64).unwrap(), 0);
}

/// Two sockets on queues 0 and 1 of one device share one UMEM; each has its own fill and
/// completion ring, and each receives exactly its queue's stream (DRV mode keeps queues).
#[test]
fn shared_umem_across_two_queues_drv() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default().queues(2));
    let ifname = bed.b.ifname.clone();
    let (mut sockets, umem, program) = bed
        .b
        .ns
        .run(|| -> xskit::Result<_> {
            let iface = Interface::by_name(&ifname)?;
            let program = XdpProgram::attach(&iface, Mode::Drv, false)?;
            let umem = Umem::new(UmemConfig::default())?;
            let sockets = Socket::bind_shared(
                &umem,
                &[(iface.clone(), 0), (iface.clone(), 1)],
                &SocketConfig::default(),
            )?;
            for s in &sockets {
                program.register(s)?;
            }
            Ok((sockets, umem, program))
        })
        .unwrap()
        .unwrap();
    let mut pool = umem.take_frames().unwrap();
    for s in sockets.iter_mut() {
        let fill = s.fill().expect("each queue has its own fill ring");
        assert_eq!(fill.fill(&mut pool, 1024), 1024);
        assert!(s.completion().is_some());
    }
    let a_if = bed.a.ifname.clone();
    let cfg = PortConfig::default().mode(Mode::Drv);
    let mut ports = bed
        .a
        .ns
        .run(|| Port::open_queues(&a_if, &[0, 1], &cfg))
        .unwrap()
        .unwrap();
    let count = 5000u64;
    let streams: Vec<_> = (0..2u8)
        .map(|q| probe::ProbeAddrs {
            src_ip: [198, 51, 100, 100 + q],
            ..addrs(&bed.a, &bed.b)
        })
        .collect();
    let seen = [AtomicU64::new(0), AtomicU64::new(0)];
    let stop = AtomicBool::new(false);
    let send = SendOptions {
        count,
        ..SendOptions::default()
    };
    let checks = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut checks = [SequenceCheck::default(), SequenceCheck::default()];
            let mut frames = Vec::with_capacity(64);
            let mut last = Instant::now();
            while checks.iter().any(|c| c.probes() < count)
                && last.elapsed() < Duration::from_secs(3)
            {
                for (q, socket) in sockets.iter_mut().enumerate() {
                    let fill = socket.fill().unwrap();
                    if fill.needs_wakeup() {
                        fill.wakeup().unwrap();
                    }
                    if socket.rx().unwrap().receive(&mut frames, 64) == 0 {
                        continue;
                    }
                    last = Instant::now();
                    for f in &frames {
                        let data = umem.data(f);
                        assert_eq!(data[29], 100 + q as u8, "queue {q} got only its own stream");
                        checks[q].observe(data);
                    }
                    socket.fill().unwrap().fill(&mut frames, usize::MAX);
                    seen[q].store(checks[q].probes(), Ordering::Release);
                }
            }
            checks
        });
        let mut it = ports.iter_mut();
        let (p0, p1) = (it.next().unwrap(), it.next().unwrap());
        let s1 = s.spawn(|| probe::send(p1, &streams[1], &send, &seen[1], &stop).unwrap());
        probe::send(p0, &streams[0], &send, &seen[0], &stop).unwrap();
        s1.join().unwrap();
        receiver.join().unwrap()
    });
    for (q, c) in checks.iter().enumerate() {
        assert!(c.is_perfect(count), "queue {q}: {c:?}");
    }
    drop(program);
}

/// A second socket on the same (device, queue) shares the first one's fill and completion
/// rings: it gets none of its own.
#[test]
fn shared_umem_on_the_same_queue() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let ifname = bed.b.ifname.clone();
    bed.b
        .ns
        .run(|| -> xskit::Result<()> {
            let iface = Interface::by_name(&ifname)?;
            let umem = Umem::new(UmemConfig::default())?;
            let mut sockets = Socket::bind_shared(
                &umem,
                &[(iface.clone(), 0), (iface, 0)],
                &SocketConfig::default(),
            )?;
            assert!(sockets[0].fill().is_some() && sockets[0].completion().is_some());
            assert!(sockets[1].fill().is_none() && sockets[1].completion().is_none());
            assert!(sockets[1].rx().is_some() && sockets[1].tx().is_some());
            Ok(())
        })
        .unwrap()
        .unwrap();
}
