//! A bond port over AF_XDP sockets on two real (veth) interfaces sharing one UMEM: the
//! forwarding namespace of a chain bonds its two links, sends flows through the bond, and the
//! hosts at the far ends capture what each member carried; what the hosts send comes up
//! through the bond, merged.

// A scenario reads top to bottom as the steps it takes, however many there are.
#![allow(clippy::too_many_lines)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xskit::{Frame, Interface, Mode, SocketConfig, Umem, UmemConfig, XdpProgram};
use xskit_bond::{xmit_hash, BondMode, BondPort, XmitHashPolicy};
use xskit_os::packet::{PacketRxRing, PacketTx};
use xskit_pipeline::{PipelinePort, SharedFrames, XskPort};
use xskit_testbed::{Chain, Host};

fn udp(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[2, 0x58, 0x42, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 51, 100, 77]);
    f[30..34].copy_from_slice(&[203, 0, 113, 77]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&4242u16.to_be_bytes());
    f
}

/// Captures what arrives on `host`'s interface from the bond (source port 4242 as dst),
/// counted in `seen` as it comes; says `ready` once its ring is open.
fn capture(
    host: &Host,
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
    ready: std::sync::mpsc::Sender<()>,
) -> std::thread::JoinHandle<std::io::Result<Vec<Vec<u8>>>> {
    let ifname = host.ifname.clone();
    host.ns.spawn(move || {
        let index = Interface::by_name(&ifname).unwrap().index();
        let mut ring = PacketRxRing::open(index).unwrap();
        ready.send(()).unwrap();
        let mut got = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            ring.receive(Some(Duration::from_millis(20)), |f| {
                if f.len() >= 38 && f[36..38] == 4242u16.to_be_bytes() {
                    got.push(f.to_vec());
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })
            .unwrap();
        }
        got
    })
}

#[test]
fn a_bond_of_two_af_xdp_ports_hashes_out_and_merges_in() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let captures = [
        capture(&chain.a, stop.clone(), seen.clone(), ready_tx.clone()),
        capture(&chain.c, stop.clone(), seen.clone(), ready_tx),
    ];
    for _ in 0..2 {
        ready.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let policy = XmitHashPolicy::Layer34;
    let members = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (a, c) = (chain.a.clone(), chain.c.clone());
    let (stats, received) = chain
        .m_a
        .ns
        .run(move || {
            let umem = Umem::new(UmemConfig::default().frame_count(4096)).unwrap();
            let config = SocketConfig::default()
                .rx_size(512)
                .tx_size(512)
                .fill_size(512)
                .completion_size(512);
            let ports: Vec<XskPort> = members
                .iter()
                .map(|name| {
                    let iface = Interface::by_name(name).unwrap();
                    let program = Arc::new(XdpProgram::attach(&iface, Mode::Skb, false).unwrap());
                    XskPort::open(&umem, program, 0, &config).unwrap()
                })
                .collect();
            let mut bond = BondPort::new(ports, BondMode::BalanceXor { policy }).unwrap();
            // A worker sleeping on the bond wakes for either member.
            let mut fds = Vec::new();
            bond.readiness(&mut fds);
            assert_eq!(fds.len(), 2);
            drop(fds);
            let shared = SharedFrames::new(umem.take_frames().unwrap());
            let mut pool = shared.pool(256);
            bond.refill(&umem, &mut pool).unwrap();
            let mut frames: Vec<Frame> = Vec::new();
            for i in 0..64u16 {
                pool.alloc(&mut frames, 1);
                let f = frames.last_mut().unwrap();
                umem.reset(f);
                umem.write(f, &udp(20000 + i * 11)).unwrap();
            }
            assert_eq!(bond.send(&umem, &mut frames, &mut pool).unwrap(), 64);
            bond.flush().unwrap();
            // The hosts send to the bond: both members' traffic comes up merged.
            for (host, sport) in [(&a, 1u16), (&c, 2)] {
                let ifname = host.ifname.clone();
                host.ns
                    .run(move || {
                        let index = Interface::by_name(&ifname).unwrap().index();
                        let tx = PacketTx::open(index).unwrap();
                        for _ in 0..10 {
                            tx.send_copies(&udp(sport), 1).unwrap();
                        }
                    })
                    .unwrap();
            }
            let mut got: Vec<Frame> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut received = [0usize; 2];
            while received[0] + received[1] < 20 && Instant::now() < deadline {
                bond.complete(&mut pool);
                bond.refill(&umem, &mut pool).unwrap();
                if bond.receive(&umem, &mut pool, &mut got, 64).unwrap() == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                for f in got.drain(..) {
                    let data = umem.data(&f);
                    if data.len() >= 36 && data[36..38] == 4242u16.to_be_bytes() {
                        let s = u16::from_be_bytes([data[34], data[35]]);
                        if (1..=2).contains(&s) {
                            received[usize::from(s - 1)] += 1;
                        }
                    }
                    pool.free_one(f);
                }
            }
            (bond.stats(), received)
        })
        .unwrap();
    // The hosts have received all 64 (or never will: the count below then says how many).
    xskit_testbed::wait_for(Duration::from_secs(10), || {
        (seen.load(Ordering::Relaxed) >= 64).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    let captured: Vec<Vec<Vec<u8>>> = captures
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    assert_eq!(
        captured[0].len() + captured[1].len(),
        64,
        "every packet left once"
    );
    assert!(
        !captured[0].is_empty() && !captured[1].is_empty(),
        "both members carried flows"
    );
    for (member, frames) in captured.iter().enumerate() {
        for f in frames {
            assert_eq!(xmit_hash(policy, f) as usize % 2, member, "{f:02x?}");
        }
    }
    assert_eq!(stats.members.iter().map(|m| m.tx_packets).sum::<u64>(), 64);
    assert_eq!(
        received,
        [10, 10],
        "what both hosts sent came up through the bond"
    );
    assert!(stats.members.iter().map(|m| m.rx_packets).sum::<u64>() >= 20);
}

/// Sends `count` frames with source port `sport` from `host` to the forwarding namespace.
fn send_from(host: &Host, sport: u16, count: usize) {
    let ifname = host.ifname.clone();
    host.ns
        .run(move || {
            let index = Interface::by_name(&ifname).unwrap().index();
            let tx = PacketTx::open(index).unwrap();
            for _ in 0..count {
                tx.send_copies(&udp(sport), 1).unwrap();
            }
        })
        .unwrap();
}

#[test]
fn an_inactive_af_xdp_member_refuses_in_the_kernel_and_the_active_one_delivers() {
    if !xskit_testbed::privileged_or_skip() {
        return;
    }
    let chain = Chain::new().unwrap();
    let members = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (a, c) = (chain.a.clone(), chain.c.clone());
    chain
        .m_a
        .ns
        .run(move || {
            let umem = Umem::new(UmemConfig::default().frame_count(2048)).unwrap();
            let config = SocketConfig::default()
                .rx_size(256)
                .tx_size(256)
                .fill_size(256)
                .completion_size(256);
            let programs: Vec<Arc<XdpProgram>> = members
                .iter()
                .map(|name| {
                    let iface = Interface::by_name(name).unwrap();
                    Arc::new(XdpProgram::attach(&iface, Mode::Skb, false).unwrap())
                })
                .collect();
            let ports: Vec<XskPort> = programs
                .iter()
                .map(|p| XskPort::open(&umem, Arc::clone(p), 0, &config).unwrap())
                .collect();
            let mut bond = BondPort::new(ports, BondMode::ActiveBackup).unwrap();
            let shared = SharedFrames::new(umem.take_frames().unwrap());
            let mut pool = shared.pool(256);
            // Stocks the fill rings, has both hosts send 10 frames, and receives until `want`
            // frames of ours came up (or 5 s); returns them by source.
            let mut receive = |bond: &mut BondPort<XskPort>, want: usize| {
                bond.refill(&umem, &mut pool).unwrap();
                send_from(&a, 1, 10);
                send_from(&c, 2, 10);
                let mut got: Vec<Frame> = Vec::new();
                let mut by_source = [0usize; 2];
                let deadline = Instant::now() + Duration::from_secs(5);
                while by_source[0] + by_source[1] < want && Instant::now() < deadline {
                    bond.refill(&umem, &mut pool).unwrap();
                    if bond.receive(&umem, &mut pool, &mut got, 64).unwrap() == 0 {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    for f in got.drain(..) {
                        let data = umem.data(&f);
                        if data.len() >= 38 && data[36..38] == 4242u16.to_be_bytes() {
                            let s = u16::from_be_bytes([data[34], data[35]]);
                            if (1..=2).contains(&s) {
                                by_source[usize::from(s - 1)] += 1;
                            }
                        }
                        pool.free_one(f);
                    }
                }
                by_source
            };
            // Member 0 is active: what reaches member 1 is refused by its program.
            assert_eq!(receive(&mut bond, 10), [10, 0]);
            // Refused frames leave no trace in user space: wait on the kernel's counter.
            let refused = |p: &XdpProgram, want: u64| {
                let deadline = Instant::now() + Duration::from_secs(5);
                while p.refused().unwrap() < want && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                p.refused().unwrap()
            };
            assert_eq!(refused(&programs[1], 10), 10, "refused in the kernel");
            assert_eq!(programs[0].refused().unwrap(), 0);
            assert_eq!(
                bond.stats().members[1].rx_inactive,
                0,
                "nothing reached user space to drop"
            );
            // Member 1 takes over: now member 0 refuses.
            bond.set_active(1).unwrap();
            assert_eq!(receive(&mut bond, 10), [0, 10]);
            assert_eq!(refused(&programs[0], 10), 10);
            assert_eq!(
                programs[1].refused().unwrap(),
                10,
                "member 1 no longer refuses"
            );
        })
        .unwrap();
}
