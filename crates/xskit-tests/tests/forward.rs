//! Forwarding through real AF_XDP ports that share one UMEM: host a -> forwarder in m
//! (xsk-ma -> xsk-mc) -> host c, with exact frame accounting in the forwarder.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use xskit::{Frame, Interface, Mode, Port, PortConfig, SocketConfig, Umem, UmemConfig, XdpProgram};
use xskit_pipeline::{
    Next, Outputs, Pipeline, PipelinePort, SharedFrames, Stage, StageContext, XskPort,
};
use xskit_testbed::Chain;
use xskit_traffic::probe::{self, ProbeAddrs, ReceiveOptions, SendOptions};
use xskit_wire::ethernet;

/// Bump in the wire at layer 2: rewrite the MACs for the next hop and send out of `port`.
struct Bridge {
    src: [u8; 6],
    dst: [u8; 6],
    port: u16,
}

impl Stage for Bridge {
    fn name(&self) -> &'static str {
        "bridge"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            if let Ok(mut eth) = ethernet::Frame::new_checked(umem.data_mut(f)) {
                eth.set_src_addr(self.src);
                eth.set_dst_addr(self.dst);
                *n = Next::Tx(self.port);
            }
        }
    }
}

#[test]
fn forwarding_between_interfaces_on_one_umem() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    const FRAMES: u32 = 4096;
    let (ma, mc) = (chain.m_a.ifname.clone(), chain.m_c.ifname.clone());
    let (umem, shared, mut port_a, mut port_c) = chain
        .m_a
        .ns
        .run(move || {
            let umem = Umem::new(UmemConfig::default().frame_count(FRAMES)).unwrap();
            let shared = SharedFrames::new(umem.take_frames().unwrap());
            let cfg = SocketConfig::default().fill_size(1024);
            let prog = |name: &str| {
                Arc::new(
                    XdpProgram::attach(&Interface::by_name(name).unwrap(), Mode::Drv, false)
                        .unwrap(),
                )
            };
            let port_a = XskPort::open(&umem, prog(&ma), 0, &cfg).unwrap();
            let port_c = XskPort::open(&umem, prog(&mc), 0, &cfg).unwrap();
            (umem, shared, port_a, port_c)
        })
        .unwrap();
    let mut pool = shared.pool(256);
    let mut a_to_c = Pipeline::new(2);
    a_to_c.add_stage(Box::new(Bridge {
        src: chain.m_c.mac,
        dst: chain.c.mac,
        port: 1,
    }));

    let (a_if, c_if) = (chain.a.ifname.clone(), chain.c.ifname.clone());
    let cfg = PortConfig::default().mode(Mode::Drv);
    let mut tx = chain
        .a
        .ns
        .run(|| Port::open(&a_if, 0, &cfg.tx_only(true)))
        .unwrap()
        .unwrap();
    let mut rx = chain
        .c
        .ns
        .run(|| Port::open(&c_if, 0, &cfg))
        .unwrap()
        .unwrap();
    let addrs = ProbeAddrs {
        src_mac: chain.a.mac,
        dst_mac: chain.m_a.mac,
        src_ip: chain.a.ip.octets(),
        dst_ip: chain.c.ip.octets(),
    };
    let count = 20_000u64;
    let (seen, stop, forwarding) = (
        AtomicU64::new(0),
        AtomicBool::new(false),
        AtomicBool::new(true),
    );
    // The fill rings are stocked before the first probe leaves a: the sender's window opens
    // only on what c saw, so probes dropped at an empty fill ring would stall it for good.
    port_a.refill(&umem, &mut pool).unwrap();
    port_c.refill(&umem, &mut pool).unwrap();
    let report = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            probe::receive(
                &mut rx,
                &ReceiveOptions::default().count(count),
                &seen,
                &stop,
            )
            .unwrap()
        });
        let sender = s.spawn(|| {
            probe::send(
                &mut tx,
                &addrs,
                &SendOptions {
                    count,
                    ..SendOptions::default()
                },
                &seen,
                &stop,
            )
            .unwrap()
        });
        // The forwarder runs here, checking the accounting after every vector.
        let (mut input, mut out) = (Vec::with_capacity(64), Outputs::new(2));
        let deadline = Instant::now() + Duration::from_secs(20);
        while forwarding.load(Ordering::Relaxed) && Instant::now() < deadline {
            port_a.refill(&umem, &mut pool).unwrap();
            port_c.refill(&umem, &mut pool).unwrap();
            // A port that says it may have received has frames to take. (The worker passes
            // by a port that says it has not: were that said of a port with packets, no
            // forwarding test would see them.)
            let may_have = port_a.may_have_received();
            let got = port_a.receive(&umem, &mut pool, &mut input, 64).unwrap();
            assert!(
                got > 0 || !may_have,
                "a port that may have received had nothing"
            );
            a_to_c.process(&umem, StageContext::default(), &mut input, &mut out);
            port_c.send(&umem, &mut out.tx[1], &mut pool).unwrap();
            pool.free(&mut out.drop);
            port_a.complete(&mut pool);
            let accounted = shared.len() + pool.cached() + port_a.in_flight() + port_c.in_flight();
            assert_eq!(
                accounted, FRAMES as usize,
                "every frame is in the pool or the kernel"
            );
            if seen.load(Ordering::Relaxed) >= count {
                forwarding.store(false, Ordering::Relaxed);
            }
        }
        sender.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        receiver.join().unwrap()
    });
    assert!(
        report.check.is_perfect(count),
        "{:?}\nm_a's socket: {:?}\nm_c's socket: {:?}",
        report.check,
        port_a.socket().statistics(),
        port_c.socket().statistics()
    );
    assert_eq!(port_a.socket().statistics().unwrap().rx_dropped, 0);
    let accounted = shared.len() + pool.cached() + port_a.in_flight() + port_c.in_flight();
    assert_eq!(accounted, FRAMES as usize, "exact after the run");
}
