//! The kernel's XDP_STATISTICS counters move when they should, and malformed transmit
//! descriptors are dropped while the valid ones around them arrive.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use common::*;
use xskit::{
    Interface, Mode, PortConfig, RawDesc, Socket, SocketConfig, Statistics, Umem, UmemConfig,
    XdpProgram,
};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, ReceiveOptions, SendOptions};

/// Polls `stats` until `done` holds or two seconds pass; returns the last reading.
fn wait_for(
    mut stats: impl FnMut() -> Statistics,
    done: impl Fn(&Statistics) -> bool,
) -> Statistics {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let s = stats();
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn blast(tx: &mut xskit::Port, bed: &xskit_testbed::Testbed, count: u64, size: usize) -> u64 {
    let send = SendOptions {
        count,
        size,
        window: u64::MAX,
        idle_timeout: Duration::from_secs(1),
        ..SendOptions::default()
    };
    probe::send(
        tx,
        &addrs(&bed.a, &bed.b),
        &send,
        &AtomicU64::new(0),
        &AtomicBool::new(false),
    )
    .unwrap()
}

#[test]
fn rx_dropped_when_headroom_leaves_no_room() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        // 2048-byte frames with 1024 bytes of headroom (plus the kernel's 256) hold 768 bytes.
        let rx_cfg =
            PortConfig::default().umem(UmemConfig::default().frame_size(2048).headroom(1024));
        let (mut rx, mut tx, bed) = receiver_and_sender(mode, rx_cfg);
        assert_eq!(blast(&mut tx, &bed, 50, 1000), 50);
        let s = wait_for(|| rx.statistics().unwrap(), |s| s.rx_dropped >= 50);
        assert_eq!(s.rx_dropped, 50, "{mode:?}: {s}");
        let mut frames = Vec::new();
        assert_eq!(
            rx.receive(&mut frames, 64).unwrap(),
            0,
            "nothing too large was delivered"
        );
    }
}

#[test]
fn rx_ring_full_when_rx_ring_is_smaller_than_fill_ring() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let rx_cfg =
            PortConfig::default().socket(SocketConfig::default().rx_size(64).fill_size(2048));
        let (rx, mut tx, bed) = receiver_and_sender(mode, rx_cfg);
        // Nobody reads the rx ring: after 64 packets it is full and the rest are dropped.
        blast(&mut tx, &bed, 300, 64);
        let s = wait_for(|| rx.statistics().unwrap(), |s| s.rx_ring_full > 0);
        assert!(s.rx_ring_full > 0, "{mode:?}: {s}");
    }
}

#[test]
fn fill_ring_empty_when_no_frames_are_given() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let bed = bed(TestbedConfig::default());
        let ifname = bed.b.ifname.clone();
        // The low-level API: a socket whose fill ring never gets a frame.
        let (socket, program) = bed
            .b
            .ns
            .run(|| -> xskit::Result<_> {
                let iface = Interface::by_name(&ifname)?;
                let program = XdpProgram::attach(&iface, mode, false)?;
                let umem = Umem::new(UmemConfig::default())?;
                let socket = Socket::bind(&umem, &iface, 0, &SocketConfig::default())?;
                program.register(&socket)?;
                Ok((socket, program))
            })
            .unwrap()
            .unwrap();
        let mut tx = open(&bed.a, 0, &PortConfig::default().mode(mode)).unwrap();
        blast(&mut tx, &bed, 20, 64);
        let s = wait_for(
            || socket.statistics().unwrap(),
            |s| s.rx_fill_ring_empty_descs > 0,
        );
        assert!(s.rx_fill_ring_empty_descs > 0, "{mode:?}: {s}");
        drop(program);
    }
}

#[test]
fn invalid_tx_descriptors_are_dropped_and_valid_ones_arrive() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let (mut rx, mut tx, bed) = receiver_and_sender(mode, PortConfig::default());
        let umem = tx.umem().clone();
        let umem_len = umem.config().len();
        let a2b = addrs(&bed.a, &bed.b);
        let mut batch = Vec::new();
        let mut seq = 0;
        let mut send_valid = |tx: &mut xskit::Port, n: u64| {
            tx.alloc(&mut batch, n as usize);
            for f in batch.iter_mut() {
                let len = probe::write(umem.buffer_mut(f), 64, seq, &a2b).unwrap();
                umem.set_len(f, len).unwrap();
                seq += 1;
            }
            assert_eq!(tx.send(&mut batch).unwrap(), n as usize);
        };
        send_valid(&mut tx, 10);
        let invalid = [
            // Past the end of the UMEM.
            RawDesc {
                addr: umem_len + 4096,
                len: 64,
                options: 0,
            },
            // Longer than a frame.
            RawDesc {
                addr: umem_len - 4096,
                len: 5000,
                options: 0,
            },
            // Crossing from one chunk into the next (aligned mode).
            RawDesc {
                addr: umem_len - 4096 - 32,
                len: 64,
                options: 0,
            },
        ];
        let ring = tx.socket().tx().unwrap();
        // SAFETY: the kernel rejects all three descriptors, so none is ever completed and no
        // second handle to a chunk can appear.
        let queued = unsafe { ring.send_raw(&invalid) };
        assert_eq!(queued, 3);
        ring.wakeup().unwrap();
        send_valid(&mut tx, 10);
        // Each invalid descriptor stops one copy-mode transmit call: kick until drained.
        let ring = tx.socket().tx().unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while ring.pending() > 0 && Instant::now() < deadline {
            ring.wakeup().unwrap();
        }
        assert_eq!(ring.pending(), 0, "the kernel consumed every descriptor");
        let recv = ReceiveOptions::default()
            .count(20)
            .idle_timeout(Duration::from_secs(2));
        let report =
            probe::receive(&mut rx, &recv, &AtomicU64::new(0), &AtomicBool::new(false)).unwrap();
        assert!(report.check.is_perfect(20), "{mode:?}: {:?}", report.check);
        let s = wait_for(|| tx.statistics().unwrap(), |s| s.tx_invalid_descs >= 3);
        assert_eq!(s.tx_invalid_descs, 3, "{mode:?}: {s}");
    }
}
