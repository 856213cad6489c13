//! The forwarder's logic without root, on virtual time: a worker built exactly as
//! `Forwarder::new` builds one, over in-memory devices (`xskit_pipeline::wire`) and an
//! in-memory host link, driven round by round. Each test is deterministic and takes
//! milliseconds; the testbed tests (crates/xskit-cli/tests/fwd*.rs) keep what needs the kernel.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use xskit_os::sync::LockUnpoisoned;
use xskit_os::SyscallError;
use xskit_pipeline::{SharedFrames, WireEnd, WirePort};
use xskit_traffic::probe::{self, ProbeAddrs};
use xskit_wire::{arp, ethernet, EtherType};

use crate::bonded::Side;
use crate::config::ForwardConfig;
use crate::config_check::CpuFacts;
use crate::forward::Forwarding;
use crate::kernel::fake::Fake;
use crate::rules::RuleSet;
use crate::worker::host_path::HostLink;
use crate::worker::{Clock, Worker};
use crate::worker_plan::{ReplyCounters, WorkerCells};

const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];

/// A kernel drop rule on UDP 53, a user-space pass rule on a source address, the default
/// forward and unclassifiable packets dropped.
pub(crate) fn dns_and_source_rules() -> RuleSet {
    RuleSet::from_toml(
        r#"
default = "forward"
unclassifiable = "drop"
[[rule]]
name = "no-dns"
action = "drop"
protocol = "udp"
dst_port = 53
[[rule]]
name = "from-a"
action = "pass"
src = "198.51.100.1/32"
"#,
    )
    .unwrap()
}

/// Time that moves only when a test says so; it counts how often it is read.
struct VirtualClock {
    now_ns: Cell<u64>,
    reads: Cell<u64>,
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.reads.set(self.reads.get() + 1);
        self.now_ns.get()
    }
}

impl VirtualClock {
    fn advance_ms(&self, ms: u64) {
        self.now_ns.set(self.now_ns.get() + ms * 1_000_000);
    }
}

/// The host's kernel, in memory.
#[derive(Debug, Default)]
struct MemHost {
    received: Mutex<Vec<Vec<u8>>>,
    to_send: Mutex<VecDeque<Vec<u8>>>,
    /// Its queue is full: every frame written is refused.
    full: bool,
}

impl HostLink for Arc<MemHost> {
    fn write(&self, frame: &[u8]) -> Result<bool, SyscallError> {
        if self.full {
            return Ok(false);
        }
        self.received.lock_unpoisoned().push(frame.to_vec());
        Ok(true)
    }
    fn read(&self, buf: &mut [u8]) -> Result<Option<usize>, SyscallError> {
        Ok(self.to_send.lock_unpoisoned().pop_front().map(|f| {
            buf[..f.len()].copy_from_slice(&f);
            f.len()
        }))
    }
    fn readiness(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// A worker between two in-memory devices (or one, reflecting), with its far ends: set up
/// by the forwarder's own constructor on a fake kernel, then driven round by round.
struct Bench {
    worker: Worker<Side<WirePort>>,
    cells: WorkerCells,
    ends: Vec<WireEnd>,
    /// The devices' MAC addresses, as the fake kernel gives them.
    macs: Vec<[u8; 6]>,
    clock: VirtualClock,
    shared: SharedFrames,
    total: usize,
    replies: ReplyCounters,
}

impl Bench {
    fn new(rules: &str, ports: usize, edit: impl FnOnce(&mut ForwardConfig)) -> Self {
        Self::with_host(rules, ports, edit, None)
    }

    fn with_host(
        rules: &str,
        ports: usize,
        edit: impl FnOnce(&mut ForwardConfig),
        host: Option<Arc<MemHost>>,
    ) -> Self {
        Self::build(rules, ports, edit, host, false)
    }

    /// `tx_metadata`: the kernel takes AF_XDP transmit metadata (partial checksums are then
    /// left to it).
    fn build(
        rules: &str,
        ports: usize,
        edit: impl FnOnce(&mut ForwardConfig),
        host: Option<Arc<MemHost>>,
        tx_metadata: bool,
    ) -> Self {
        let names = &["a0", "b0"][..ports];
        let kernel = Fake::new(&[("a0", 1500), ("b0", 1500)][..ports]);
        let mut config = ForwardConfig::new(names.iter().copied())
            .rules(RuleSet::from_toml(rules).expect("rules"))
            .check(true)
            .frames(Some(256));
        if let Some(host) = host {
            *kernel.host.borrow_mut() = Some(Box::new(host));
            config = config.tap(Some("xsk-tap0".into()));
        }
        edit(&mut config);
        let macs = kernel.links.iter().filter_map(|l| l.mac).collect();
        let devices = Rc::clone(&kernel.devices);
        let cpus = CpuFacts {
            online: 1,
            allowed: vec![0],
        };
        let forwarding = Forwarding::new(kernel, config, &cpus, tx_metadata).expect("set up");
        let mut parts = forwarding.into_parts();
        let ends = (0..ports)
            .map(|i| devices.borrow().ends[&(i, 0)].clone())
            .collect();
        let mut worker = parts.workers.pop().expect("one queue");
        worker.host_every = 1;
        Bench {
            worker,
            cells: parts.cells.pop().expect("its cells"),
            ends,
            macs,
            clock: VirtualClock {
                now_ns: Cell::new(1_000_000_000),
                reads: Cell::new(0),
            },
            shared: parts.shared,
            total: parts.total,
            replies: parts.replies,
        }
    }

    /// Runs rounds until nothing moves (checking the frame accounting after each vector).
    fn settle(&mut self) {
        for _ in 0..64 {
            let got = self.worker.round(&self.clock).expect("round");
            if got == 0 && self.ends.iter().all(|e| e.pending() == 0) {
                break;
            }
        }
        self.worker
            .round(&self.clock)
            .expect("a last round reaps completions");
    }

    fn port(
        &self,
        p: usize,
        f: fn(&crate::counter::PortCells) -> &std::sync::atomic::AtomicU64,
    ) -> u64 {
        f(&self.cells.ports[p]).load(std::sync::atomic::Ordering::Relaxed)
    }

    fn rule(&self, r: usize) -> (u64, u64) {
        let c = self.cells.rules.get(r).expect("a rule");
        (
            c.packets.load(std::sync::atomic::Ordering::Relaxed),
            c.over_rate.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Every frame is back in the pool once the devices are idle.
    fn assert_all_frames_home(&mut self) {
        self.worker.check_accounting().expect("accounting");
        assert_eq!(
            self.worker.pool.held(),
            self.worker.pool.cached(),
            "frames held outside the pool"
        );
        assert_eq!(self.shared.len() + self.worker.pool.cached(), self.total);
    }
}

pub(crate) fn udp(dst_port: u16, seq: u64) -> Vec<u8> {
    let addrs = ProbeAddrs {
        src_mac: A_MAC,
        dst_mac: B_MAC,
        src_ip: [198, 51, 100, 1],
        dst_ip: [198, 51, 100, 2],
    };
    let mut t = addrs.template(64).expect("template");
    if dst_port != probe::PORT {
        t = xskit_traffic::probe::Template::new(
            xskit_traffic::probe::Endpoints {
                src_mac: A_MAC,
                dst_mac: B_MAC,
                src_ip: addrs.src_ip.into(),
                dst_ip: addrs.dst_ip.into(),
                src_port: 1234,
                dst_port,
            },
            xskit_traffic::probe::Flows::default(),
            None,
            64,
        )
        .expect("template");
    }
    let mut buf = vec![0u8; 64];
    let len = t.write(&mut buf, seq, 0).expect("fits");
    buf.truncate(len);
    buf
}

#[test]
fn rules_forward_and_drop_each_packet_and_count_it() {
    let mut bench = Bench::new(
        "default = \"forward\"\n[[rule]]\nprotocol = \"udp\"\ndst_port = 9\naction = \"drop\"\n",
        2,
        |_| {},
    );
    for seq in 0..10 {
        bench.ends[0].inject(&udp(9, seq));
        bench.ends[0].inject(&udp(5000, seq));
    }
    bench.settle();
    let out = bench.ends[1].take();
    let expected: Vec<Vec<u8>> = (0..10).map(|seq| udp(5000, seq)).collect();
    assert_eq!(
        out, expected,
        "the port-5000 packets cross intact, the port-9 ones do not"
    );
    assert!(bench.ends[0].take().is_empty(), "nothing goes back");
    assert_eq!(bench.rule(0), (10, 0), "the drop rule counts its packets");
    assert_eq!(bench.rule(1), (10, 0), "the default counts the rest");
    assert_eq!(bench.port(0, |c| &c.rx_packets), 20);
    assert_eq!(bench.port(1, |c| &c.tx_packets), 10);
    assert_eq!(
        (bench.port(0, |c| &c.copies), bench.port(1, |c| &c.copies)),
        (0, 0),
        "forwarding moves descriptors: no copy"
    );
    assert_eq!(
        bench.clock.reads.get(),
        0,
        "no rule needs the time: no clock read"
    );
    bench.assert_all_frames_home();
}

#[test]
fn without_rules_each_packet_is_forwarded_and_counted_as_with_them() {
    let host = Arc::new(MemHost::default());
    let mut bench = Bench::with_host(
        "default = \"forward\"\nunclassifiable = \"drop\"\n",
        2,
        |_| {},
        Some(Arc::clone(&host)),
    );
    // More than one vector; a frame too short to classify and one to the host's own MAC
    // among them.
    let mut to_host = udp(9, 0);
    to_host[..6].copy_from_slice(&HOST_MAC);
    let sent: Vec<Vec<u8>> = (0..100).map(|seq| udp(5000, seq)).collect();
    for (i, frame) in sent.iter().enumerate() {
        bench.ends[0].inject(frame);
        match i {
            40 => bench.ends[0].inject(&frame[..20]),
            70 => bench.ends[0].inject(&to_host),
            _ => {}
        }
    }
    bench.settle();
    assert_eq!(bench.ends[1].take(), sent, "every packet crosses, in order");
    assert_eq!(*host.received.lock_unpoisoned(), vec![to_host.clone()]);
    let bytes = |r: usize| {
        bench
            .cells
            .rules
            .get(r)
            .expect("a rule")
            .bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let len = |f: &Vec<u8>| f.len() as u64;
    assert_eq!(
        bench.rule(0),
        (101, 0),
        "the default counts the forwarded and the host's"
    );
    assert_eq!(bytes(0), sent.iter().map(len).sum::<u64>() + len(&to_host));
    assert_eq!(
        (bench.rule(1), bytes(1)),
        ((1, 0), 20),
        "the unclassifiable one"
    );
    assert_eq!(bench.port(0, |c| &c.unclassifiable), 1);
    assert_eq!(bench.port(1, |c| &c.tx_packets), 100);
    bench.assert_all_frames_home();
}

#[test]
fn a_rate_limit_follows_the_clock_it_is_given() {
    let mut bench = Bench::new(
        "default = \"drop\"\n[[rule]]\nprotocol = \"udp\"\naction = \"rate-limit\"\nrate = \"100pps\"\nburst = 5\n",
        2,
        |_| {},
    );
    let send = |bench: &mut Bench, n: u64| {
        for seq in 0..n {
            bench.ends[0].inject(&udp(9, seq));
        }
        bench.settle();
        bench.ends[1].take().len()
    };
    assert_eq!(
        send(&mut bench, 20),
        5,
        "a full bucket lets the burst through"
    );
    assert_eq!(send(&mut bench, 20), 0, "no time passed: nothing more");
    bench.clock.advance_ms(30);
    assert_eq!(send(&mut bench, 20), 3, "30 ms at 100 pps refill three");
    bench.clock.advance_ms(10_000);
    assert_eq!(
        send(&mut bench, 20),
        5,
        "a long pause refills only the burst"
    );
    assert_eq!(
        bench.rule(0),
        (80, 67),
        "every packet counted, those over the rate too"
    );
    assert!(
        bench.clock.reads.get() > 0,
        "the limit reads the clock it is given"
    );
    bench.assert_all_frames_home();
}

#[test]
fn reflect_swaps_addresses_and_sends_back_out_of_the_same_device() {
    let mut bench = Bench::new("default = \"forward\"\n", 1, |c| c.reflect = true);
    let sent = udp(9, 7);
    bench.ends[0].inject(&sent);
    bench.settle();
    let back = bench.ends[0].take();
    assert_eq!(back.len(), 1);
    let eth = ethernet::Frame::new_checked(&back[0][..]).unwrap();
    assert_eq!((eth.src_addr(), eth.dst_addr()), (B_MAC, A_MAC));
    assert_eq!(back[0][14..], sent[14..], "only the addresses change");
    bench.assert_all_frames_home();
}

#[test]
fn respond_answers_arp_from_the_mac_of_the_port_asked() {
    let mut bench = Bench::new("default = \"forward\"\n", 2, |c| {
        c.respond = Some([198, 51, 100, 254].into())
    });
    let mut request = vec![0u8; 60];
    {
        let mut eth = ethernet::Frame::new_unchecked(&mut request[..]);
        eth.set_dst_addr([0xff; 6]);
        eth.set_src_addr(A_MAC);
        eth.set_ethertype(EtherType::Arp);
        arp::Packet::new_unchecked(eth.payload_mut()).emit(
            arp::operation::REQUEST,
            A_MAC,
            [198, 51, 100, 1],
            [0; 6],
            [198, 51, 100, 254],
        );
    }
    // Asked on the second device: answered there, from its MAC; not forwarded.
    bench.ends[1].inject(&request);
    bench.settle();
    assert!(bench.ends[0].take().is_empty());
    let reply = bench.ends[1].take();
    assert_eq!(reply.len(), 1);
    let eth = ethernet::Frame::new_checked(&reply[0][..]).unwrap();
    assert_eq!((eth.src_addr(), eth.dst_addr()), (bench.macs[1], A_MAC));
    let a = arp::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(a.operation(), arp::operation::REPLY);
    assert_eq!(
        bench.replies.arp.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    bench.assert_all_frames_home();
}

#[test]
fn the_host_gets_passed_and_broadcast_frames_and_its_own_go_where_learnt() {
    let host = Arc::new(MemHost::default());
    let mut bench = Bench::with_host(
        "default = \"forward\"\n[[rule]]\nprotocol = \"udp\"\ndst_port = 7\naction = \"pass\"\n",
        2,
        |_| {},
        Some(Arc::clone(&host)),
    );
    // Passed by a rule: to the host only.
    bench.ends[0].inject(&udp(7, 1));
    // A broadcast from b's side: forwarded, and a copy for the host, which learns B_MAC.
    let mut broadcast = udp(9, 2);
    broadcast[..6].copy_from_slice(&[0xff; 6]);
    broadcast[6..12].copy_from_slice(&B_MAC);
    bench.ends[1].inject(&broadcast);
    bench.settle();
    assert_eq!(bench.ends[0].take(), vec![broadcast.clone()]);
    assert!(bench.ends[1].take().is_empty());
    assert_eq!(*host.received.lock_unpoisoned(), vec![udp(7, 1), broadcast]);
    assert_eq!(bench.port(0, |c| &c.to_kernel), 1);
    // The host answers B_MAC: out of port 1 only, where B_MAC was learnt. To an unknown
    // address: out of every port.
    let mut to_b = udp(9, 3);
    to_b[..6].copy_from_slice(&B_MAC);
    to_b[6..12].copy_from_slice(&HOST_MAC);
    let mut to_unknown = to_b.clone();
    to_unknown[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x77]);
    host.to_send.lock_unpoisoned().push_back(to_b.clone());
    host.to_send.lock_unpoisoned().push_back(to_unknown.clone());
    bench.settle();
    assert_eq!(bench.ends[1].take(), vec![to_b, to_unknown.clone()]);
    assert_eq!(bench.ends[0].take(), vec![to_unknown]);
    assert_eq!(bench.port(1, |c| &c.from_kernel), 2);
    // Copied: port 0's passed packet and its flooded original; port 1's broadcast copy for
    // the host, the host's frame to B_MAC, and the flooded copy.
    assert_eq!(bench.port(0, |c| &c.copies), 2);
    assert_eq!(bench.port(1, |c| &c.copies), 3);
    bench.assert_all_frames_home();
}

#[test]
fn a_broadcast_copy_the_host_refuses_is_counted_as_dropped_not_copied() {
    let host = Arc::new(MemHost {
        full: true,
        ..MemHost::default()
    });
    let mut bench = Bench::with_host("default = \"forward\"\n", 2, |_| {}, Some(host));
    let mut broadcast = udp(9, 1);
    broadcast[..6].copy_from_slice(&[0xff; 6]);
    bench.ends[0].inject(&broadcast);
    bench.settle();
    assert_eq!(
        bench.ends[1].take(),
        vec![broadcast],
        "forwarded all the same"
    );
    assert_eq!(
        (
            bench.port(0, |c| &c.copies),
            bench.port(0, |c| &c.to_kernel_dropped)
        ),
        (0, 1)
    );
    bench.assert_all_frames_home();
}

#[test]
fn without_a_host_link_passed_frames_are_dropped_and_counted() {
    let mut bench = Bench::new("default = \"pass\"\n", 2, |_| {});
    for seq in 0..4 {
        bench.ends[0].inject(&udp(9, seq));
    }
    bench.settle();
    assert!(bench.ends[1].take().is_empty());
    assert_eq!(bench.port(0, |c| &c.to_kernel_dropped), 4);
    bench.assert_all_frames_home();
}

/// Whatever the mode asked for, zero-copy included, a missing interface is named before
/// anything is opened (how each mode is chosen and refused is kernel.rs's tests, on a fake
/// kernel).
#[test]
fn a_missing_interface_is_named_in_every_mode() {
    use xskit::Mode;
    for mode in [Mode::Auto, Mode::Skb, Mode::Drv, Mode::ZeroCopy] {
        let config = ForwardConfig::new(["xsk-none0", "xsk-none1"]).mode(mode);
        match crate::Forwarder::new(config) {
            Ok(_) => panic!("{mode}: a forwarder was built on interfaces that do not exist"),
            Err(e) => assert!(e.to_string().contains("xsk-none0"), "{mode}: {e}"),
        }
    }
}

/// A sender that left its UDP checksum for the device (the field holds the pseudo-header
/// sum) gets it finished on the way out; a finished one crosses untouched. The rules stage's
/// one read of the headers tells the two apart.
#[test]
fn partial_checksums_are_finished_and_settled_ones_cross_untouched() {
    use xskit_wire::offload::L4Checksum;
    let mut bench = Bench::new("default = \"forward\"\n", 2, |_| {});
    let whole = udp(5000, 1);
    let c = L4Checksum::locate(&whole, whole.len()).expect("a UDP checksum");
    assert!(!c.is_partial(&whole), "the probe's checksum is whole");
    let mut partial = udp(5000, 2);
    let field = c.start + c.offset;
    partial[field..field + 2].copy_from_slice(&c.pseudo.to_be_bytes());
    let mut finished = partial.clone();
    c.complete(&mut finished);
    assert_ne!(finished, partial);
    bench.ends[0].inject(&whole);
    bench.ends[0].inject(&partial);
    bench.settle();
    assert_eq!(bench.ends[1].take(), [whole, finished]);
    assert_eq!(bench.port(1, |c| &c.checksums_completed), 1);
    bench.assert_all_frames_home();
}

/// The direct path and the pipeline forward, drop, count and order a mixed stream alike, in
/// both directions, with partial checksums summed here or left to the kernel: the direct
/// path takes what the rules forward as it is, the pipeline the rest of each vector (a drop,
/// the unclassifiable, a rate limit, a partial checksum the kernel does not finish, a frame
/// past the MTU, and all after it).
#[test]
fn the_direct_path_and_the_pipeline_forward_and_count_alike() {
    use xskit_wire::offload::L4Checksum;
    let with_rules = "default = \"forward\"\nunclassifiable = \"drop\"\n\
        [[rule]]\nname = \"no-dns\"\naction = \"drop\"\nprotocol = \"udp\"\ndst_port = 53\n\
        [[rule]]\nname = \"slow\"\naction = \"rate-limit\"\nprotocol = \"udp\"\n\
        dst_port = 7\nrate = \"100pps\"\nburst = 2\n";
    // Without rules the direct path reads no key; the unclassifiable go either way.
    let cases = [
        (with_rules, 4),
        ("default = \"forward\"\nunclassifiable = \"drop\"\n", 2),
        ("default = \"forward\"\nunclassifiable = \"forward\"\n", 2),
    ];
    let whole = udp(5000, 0);
    let c = L4Checksum::locate(&whole, whole.len()).expect("a UDP checksum");
    // Batches of one vector or less, so that each kind of packet meets the direct path
    // after forwarded ones, and forwarded ones follow it.
    let batches: Vec<Vec<Vec<u8>>> = (0..60u64)
        .map(|seq| {
            let mut odd = udp(5000, seq);
            match seq % 6 {
                0 => odd = udp(53, seq),
                1 => odd.truncate(20),
                2 => odd = udp(7, seq),
                3 => {
                    let field = c.start + c.offset;
                    odd[field..field + 2].copy_from_slice(&c.pseudo.to_be_bytes());
                }
                4 => {
                    // A UDP packet past the MTU: the pipeline drops it (only TCP is cut).
                    odd.resize(1600, 0);
                    odd[16..18].copy_from_slice(&(1600u16 - 14).to_be_bytes());
                    odd[38..40].copy_from_slice(&(1600u16 - 34).to_be_bytes());
                }
                _ => {}
            }
            let mut batch: Vec<_> = (0..3).map(|i| udp(5000, seq * 8 + i)).collect();
            batch.push(odd);
            batch.extend((4..7).map(|i| udp(5000, seq * 8 + i)));
            batch
        })
        .collect();
    for (tx_metadata, (text, counted)) in [false, true]
        .into_iter()
        .flat_map(|t| cases.iter().map(move |c| (t, c)))
    {
        let run = |direct: bool| {
            let mut bench = Bench::build(text, 2, |_| {}, None, tx_metadata);
            if !direct {
                bench.worker.direct = None;
            }
            for batch in &batches {
                for f in batch {
                    bench.ends[0].inject(f);
                    bench.ends[1].inject(f);
                }
                bench.settle();
            }
            bench.assert_all_frames_home();
            let out: Vec<_> = bench.ends.iter().map(WireEnd::take).collect();
            let ports: Vec<_> = bench.cells.ports.iter().map(|p| p.load()).collect();
            let rules: Vec<_> = (0..*counted)
                .map(|r| bench.cells.rules.get(r).expect("a rule").load())
                .collect();
            (out, ports, rules)
        };
        let (direct_out, mut direct_ports, direct_rules) = run(true);
        let (out, ports, rules) = run(false);
        let case = format!("{text:?}, transmit metadata {tx_metadata}");
        assert!(
            direct_out == out,
            "{case}: the same packets leave, in order"
        );
        assert_eq!(direct_rules, rules, "{case}: every rule counts alike");
        for (p, d) in direct_ports.iter_mut().enumerate() {
            assert!(
                d.tx_direct > 0 && d.tx_direct < d.tx_packets,
                "{case}: port {p}: some go directly, not all: {d:?}"
            );
            d.tx_direct = 0;
        }
        assert_eq!(direct_ports, ports, "{case}: every port counts alike");
        let offloaded = ports[1].checksums_offloaded;
        assert_eq!(offloaded > 0, tx_metadata, "{ports:?}");
        assert!(ports[1].oversize_dropped > 0, "{ports:?}");
    }
}
