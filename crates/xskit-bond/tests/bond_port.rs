//! The bond port without root: members are in-memory devices (`xskit_pipeline::wire`), so
//! every frame a mode sends is checked, frame for frame, and the frame ledger after it.

use xskit::{Frame, Umem, UmemConfig};
use xskit_bond::{xmit_hash, BondMode, BondPort, Error, XmitHashPolicy};
use xskit_pipeline::{wire, FramePool, PipelinePort, SharedFrames, WireEnd, WirePort};

struct Bed {
    umem: Umem,
    pool: FramePool,
    bond: BondPort<WirePort>,
    ends: Vec<WireEnd>,
}

fn bed(members: usize, mode: BondMode) -> Bed {
    let umem = Umem::new(UmemConfig::default().frame_count(512).frame_size(2048)).unwrap();
    let shared = SharedFrames::new(umem.take_frames().unwrap());
    let pool = shared.pool(64);
    let (ports, ends): (Vec<WirePort>, Vec<WireEnd>) = (0..members).map(|_| wire()).unzip();
    Bed {
        umem,
        pool,
        bond: BondPort::new(ports, mode).unwrap(),
        ends,
    }
}

/// UDP from 198.51.100.1:`sport` to 203.0.113.9:53, its sequence number in the payload.
fn udp(sport: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 51, 100, 1]);
    f[30..34].copy_from_slice(&[203, 0, 113, 9]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

fn sport(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[34], f[35]])
}

fn seq(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[42], f[43], f[44], f[45]])
}

impl Bed {
    /// Sends `packets` through the bond; returns how many frames it queued.
    fn send(&mut self, packets: &[Vec<u8>]) -> usize {
        let mut frames: Vec<Frame> = Vec::new();
        for p in packets {
            assert_eq!(self.pool.alloc(&mut frames, 1), 1);
            let f = frames.last_mut().unwrap();
            self.umem.reset(f);
            self.umem.write(f, p).unwrap();
        }
        let n = self
            .bond
            .send(&self.umem, &mut frames, &mut self.pool)
            .unwrap();
        assert!(frames.is_empty(), "send takes every frame");
        self.bond.complete(&mut self.pool);
        n
    }

    /// Every frame is in the pool's cache or in flight in a member: none lost.
    fn ledger(&self) {
        assert_eq!(
            self.pool.held(),
            self.pool.cached() + self.bond.in_flight(),
            "frames missing from the ledger"
        );
    }
}

fn flows(n: u16, per_flow: u32) -> Vec<Vec<u8>> {
    (0..per_flow)
        .flat_map(|s| (0..n).map(move |f| udp(40000 + f * 7, s)))
        .collect()
}

#[test]
fn xor_sends_each_flow_out_of_the_member_its_hash_names_in_order() {
    let policy = XmitHashPolicy::Layer34;
    let mut b = bed(3, BondMode::BalanceXor { policy });
    let packets = flows(32, 3);
    assert_eq!(b.send(&packets), 96);
    let mut total = 0;
    for (member, end) in b.ends.iter().enumerate() {
        let got = end.take();
        total += got.len();
        assert!(!got.is_empty(), "member {member} carries some flows");
        let mut last = std::collections::HashMap::new();
        for f in &got {
            assert_eq!(xmit_hash(policy, f) as usize % 3, member);
            // Per flow, in order.
            let prev = last.insert(sport(f), seq(f));
            assert!(
                prev.is_none_or(|p| p < seq(f)),
                "flow {} out of order",
                sport(f)
            );
        }
    }
    assert_eq!(total, 96);
    let stats = b.bond.stats();
    assert_eq!(stats.members.iter().map(|m| m.tx_packets).sum::<u64>(), 96);
    b.ledger();
}

#[test]
fn a_member_down_leaves_the_hash_over_the_usable_ones() {
    let policy = XmitHashPolicy::Layer34;
    let mut b = bed(3, BondMode::BalanceXor { policy });
    b.bond.set_up(1, false).unwrap();
    assert_eq!(b.bond.usable(), &[0, 2]);
    b.send(&flows(32, 1));
    assert!(
        b.ends[1].take().is_empty(),
        "nothing on the member that is down"
    );
    for member in [0, 2] {
        for f in b.ends[member].take() {
            assert_eq!([0, 2][xmit_hash(policy, &f) as usize % 2], member);
        }
    }
    b.bond.set_distributing(2, false).unwrap();
    assert_eq!(b.bond.usable(), &[0]);
    b.send(&flows(8, 1));
    assert_eq!(b.ends[0].take().len(), 8);
    b.ledger();
}

#[test]
fn round_robin_takes_turns_of_packets_per_slave() {
    let mut b = bed(
        2,
        BondMode::BalanceRr {
            packets_per_slave: 2,
        },
    );
    let packets: Vec<Vec<u8>> = (0..8).map(|s| udp(1000, s)).collect();
    b.send(&packets);
    let seqs = |end: &WireEnd| end.take().iter().map(|f| seq(f)).collect::<Vec<_>>();
    assert_eq!(seqs(&b.ends[0]), [0, 1, 4, 5]);
    assert_eq!(seqs(&b.ends[1]), [2, 3, 6, 7]);
    b.ledger();
}

#[test]
fn active_backup_uses_the_active_member_drops_what_the_others_receive_and_fails_over() {
    let mut b = bed(2, BondMode::ActiveBackup);
    assert_eq!(b.bond.active(), Some(0));
    b.send(&flows(4, 2));
    assert_eq!(b.ends[0].take().len(), 8);
    assert!(b.ends[1].take().is_empty());
    // What arrives on the backup is dropped and counted; the active member's passes.
    b.ends[0].inject(&udp(1, 0));
    b.ends[1].inject(&udp(2, 0));
    let mut out = Vec::new();
    let n = b.bond.receive(&b.umem, &mut b.pool, &mut out, 64).unwrap();
    assert_eq!(n, 1);
    assert_eq!(sport(b.umem.data(&out[0])), 1);
    b.pool.free(&mut out);
    let stats = b.bond.stats();
    assert_eq!(
        (stats.members[0].rx_packets, stats.members[1].rx_inactive),
        (1, 1)
    );
    // The active member loses its carrier: the backup takes over both ways.
    b.bond.set_up(0, false).unwrap();
    assert_eq!(b.bond.active(), Some(1));
    b.send(&flows(4, 1));
    assert_eq!(b.ends[1].take().len(), 4);
    b.ends[1].inject(&udp(3, 0));
    assert_eq!(
        b.bond.receive(&b.umem, &mut b.pool, &mut out, 64).unwrap(),
        1
    );
    b.pool.free(&mut out);
    // It comes back as the backup: the active member stays until told otherwise.
    b.bond.set_up(0, true).unwrap();
    assert_eq!(b.bond.active(), Some(1));
    b.bond.set_active(0).unwrap();
    assert_eq!(b.bond.active(), Some(0));
    b.ledger();
}

#[test]
fn broadcast_sends_a_copy_out_of_every_member() {
    let mut b = bed(3, BondMode::Broadcast);
    let packets = flows(5, 1);
    assert_eq!(
        b.send(&packets),
        5,
        "the caller's frames; the copies are the bond's"
    );
    for end in &b.ends {
        assert_eq!(end.take(), packets);
    }
    assert_eq!(
        b.bond
            .stats()
            .members
            .iter()
            .map(|m| m.tx_packets)
            .collect::<Vec<_>>(),
        [5, 5, 5]
    );
    assert_eq!(
        b.bond.stats().copies,
        10,
        "a copy for each member after the first"
    );
    b.ledger();
}

#[test]
fn with_no_usable_member_packets_are_dropped_and_counted_and_no_frame_is_lost() {
    let mut b = bed(
        2,
        BondMode::BalanceXor {
            policy: XmitHashPolicy::Layer2,
        },
    );
    b.bond.set_up(0, false).unwrap();
    b.bond.set_up(1, false).unwrap();
    assert_eq!(b.send(&flows(10, 1)), 0);
    assert!(b.ends.iter().all(|e| e.take().is_empty()));
    assert_eq!(b.bond.stats().tx_no_member, 10);
    b.ledger();
}

#[test]
fn receive_merges_the_members() {
    let mut b = bed(
        3,
        BondMode::BalanceXor {
            policy: XmitHashPolicy::Layer34,
        },
    );
    for (i, end) in b.ends.iter().enumerate() {
        for s in 0..4 {
            end.inject(&udp(100 + i as u16, s));
        }
    }
    let mut out = Vec::new();
    let mut got = 0;
    while got < 12 {
        let n = b.bond.receive(&b.umem, &mut b.pool, &mut out, 5).unwrap();
        assert!(n > 0 && n <= 5);
        got += n;
    }
    let mut ports: Vec<u16> = out.iter().map(|f| sport(b.umem.data(f))).collect();
    ports.sort();
    assert_eq!(
        ports,
        [100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102]
    );
    b.pool.free(&mut out);
    assert_eq!(
        b.bond
            .stats()
            .members
            .iter()
            .map(|m| m.rx_packets)
            .collect::<Vec<_>>(),
        [4, 4, 4]
    );
    b.ledger();
}

#[test]
fn bad_bonds_are_refused() {
    let none: Vec<WirePort> = Vec::new();
    assert!(matches!(
        BondPort::new(none, BondMode::ActiveBackup),
        Err(Error::MemberCount { count: 0 })
    ));
    let nine: Vec<WirePort> = (0..9).map(|_| wire().0).collect();
    assert!(matches!(
        BondPort::new(nine, BondMode::ActiveBackup),
        Err(Error::MemberCount { count: 9 })
    ));
    let mut b = bed(2, BondMode::ActiveBackup);
    let e = b.bond.set_up(2, false).unwrap_err();
    assert!(
        matches!(e, Error::NoSuchMember { index: 2, count: 2 }),
        "{e}"
    );
    assert!(e.to_string().contains("no member 2"), "{e}");
}

/// A member whose transmit ring holds `room` frames per send: whole packets from the front
/// are queued, the rest go back to the pool, as a full AF_XDP tx ring drops.
struct Narrow {
    inner: WirePort,
    room: usize,
}

impl PipelinePort for Narrow {
    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> xskit_pipeline::Result<usize> {
        self.inner.receive(umem, pool, out, max)
    }

    fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> xskit_pipeline::Result<usize> {
        let fits = frames.len().min(self.room);
        let mut rest = frames.split_off(fits);
        let queued = self.inner.send(umem, frames, pool)?;
        pool.free(&mut rest);
        Ok(queued)
    }

    fn complete(&mut self, pool: &mut FramePool) -> usize {
        self.inner.complete(pool)
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

#[test]
fn a_full_member_ring_drops_whole_packets_counted_on_that_member_and_no_frame_is_lost() {
    let umem = Umem::new(UmemConfig::default().frame_count(256).frame_size(2048)).unwrap();
    let shared = SharedFrames::new(umem.take_frames().unwrap());
    let mut pool = shared.pool(64);
    let (wide, wide_end) = wire();
    let (narrow, narrow_end) = wire();
    let members = vec![
        Narrow {
            inner: wide,
            room: usize::MAX,
        },
        Narrow {
            inner: narrow,
            room: 2,
        },
    ];
    let mut bond = BondPort::new(
        members,
        BondMode::BalanceRr {
            packets_per_slave: 1,
        },
    )
    .unwrap();
    let packets = flows(10, 1);
    let mut frames: Vec<Frame> = Vec::new();
    for p in &packets {
        assert_eq!(pool.alloc(&mut frames, 1), 1);
        let f = frames.last_mut().unwrap();
        umem.reset(f);
        umem.write(f, p).unwrap();
    }
    // Turns: 5 packets each; member 1 has room for 2 of its 5.
    assert_eq!(bond.send(&umem, &mut frames, &mut pool).unwrap(), 7);
    bond.complete(&mut pool);
    assert_eq!(wide_end.take().len(), 5);
    assert_eq!(narrow_end.take().len(), 2);
    let stats = bond.stats();
    assert_eq!(stats.members[0].tx_dropped, 0);
    assert_eq!(stats.members[1].tx_dropped, 3);
    assert_eq!(
        stats.members[1].tx_packets, 5,
        "handed to the member, 3 of them dropped"
    );
    assert_eq!(
        pool.held(),
        pool.cached() + bond.in_flight(),
        "no frame lost"
    );
}

#[test]
fn xor_spreads_many_flows_evenly_over_the_members() {
    // 3,000 flows of random source addresses and ports (a fixed LCG), one packet each,
    // over 3 members: each member's share is within 10% of a third.
    let policy = XmitHashPolicy::Layer34;
    let mut b = bed(3, BondMode::BalanceXor { policy });
    let mut state = 0x2545_f491_u32;
    let mut next = || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        state
    };
    let mut counts = [0usize; 3];
    for _ in 0..30 {
        let packets: Vec<Vec<u8>> = (0..100)
            .map(|_| {
                let r = next();
                let mut f = udp((r >> 16) as u16, 0);
                f[28..30].copy_from_slice(&r.to_be_bytes()[2..]);
                f
            })
            .collect();
        assert_eq!(b.send(&packets), 100);
        for (member, end) in b.ends.iter().enumerate() {
            counts[member] += end.take().len();
        }
    }
    for (member, &n) in counts.iter().enumerate() {
        assert!(
            (900..=1100).contains(&n),
            "member {member} carries {n} of 3,000 flows: {counts:?}"
        );
    }
    b.ledger();
}
