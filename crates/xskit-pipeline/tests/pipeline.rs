//! The vector pipeline without root: stages, the split, the frame pool and in-memory ports,
//! with exact frame accounting.

use proptest::prelude::*;
use xskit::{Frame, Umem, UmemConfig};
use xskit_pipeline::{
    mem_port_pair, FramePool, MemPort, Next, Outputs, Pipeline, SharedFrames, Stage, StageContext,
    StageId,
};
use xskit_traffic::probe::{self, ProbeAddrs, SequenceCheck};
use xskit_wire::ethernet;

const ADDRS: ProbeAddrs = ProbeAddrs {
    src_mac: [2, 0, 0, 0, 0, 1],
    dst_mac: [2, 0, 0, 0, 0, 2],
    src_ip: [198, 51, 100, 1],
    dst_ip: [198, 51, 100, 2],
};

fn umem(frames: u32) -> Umem {
    Umem::new(UmemConfig::default().frame_count(frames).frame_size(2048)).unwrap()
}

/// Alternates drop and forward: verdicts intermixed packet by packet.
struct Alternate;
impl Stage for Alternate {
    fn name(&self) -> &'static str {
        "alternate"
    }
    fn process(&mut self, _: &StageContext, _: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (i, next) in nexts.iter_mut().enumerate().take(frames.len()) {
            *next = if i % 2 == 0 { Next::Tx(1) } else { Next::Drop };
        }
    }
}

/// Every frame of a vector to `.0`.
struct AllTo(Next);
impl Stage for AllTo {
    fn name(&self) -> &'static str {
        "all-to"
    }
    fn process(&mut self, _: &StageContext, _: &Umem, _: &mut [Frame], nexts: &mut [Next]) {
        nexts.fill(self.0);
    }
}

/// Probes to stage `next`, everything else to the kernel.
struct Classify {
    next: StageId,
}
impl Stage for Classify {
    fn name(&self) -> &'static str {
        "classify"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (f, n) in frames.iter().zip(nexts.iter_mut()) {
            *n = match probe::check(umem.data(f)) {
                probe::Probe::Valid { .. } => Next::Stage(self.next),
                _ => Next::Kernel,
            };
        }
    }
}

/// Swaps MACs in place and sends back out of port 0 (l2fwd).
struct Reflect;
impl Stage for Reflect {
    fn name(&self) -> &'static str {
        "reflect"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (f, n) in frames.iter_mut().zip(nexts.iter_mut()) {
            if let Ok(mut eth) = ethernet::Frame::new_checked(umem.data_mut(f)) {
                eth.swap_addrs();
                *n = Next::Back;
            }
        }
    }
}

/// Sends to a port and a stage that do not exist (`missing`), and backwards to itself (`own`).
struct Wrong {
    missing: StageId,
    own: StageId,
}
impl Stage for Wrong {
    fn name(&self) -> &'static str {
        "wrong"
    }
    fn process(&mut self, _: &StageContext, _: &Umem, _: &mut [Frame], nexts: &mut [Next]) {
        for (i, n) in nexts.iter_mut().enumerate() {
            *n = [
                Next::Tx(9),
                Next::Stage(self.missing),
                Next::Stage(self.own),
            ][i % 3];
        }
    }
}

fn probes(umem: &Umem, n: usize) -> Vec<Frame> {
    let t = ADDRS.template(64).unwrap();
    let mut frames = umem.take_frames().unwrap();
    frames.truncate(n);
    for (seq, f) in frames.iter_mut().enumerate() {
        let len = t.write(umem.buffer_mut(f), seq as u64, 0).unwrap();
        umem.set_len(f, len).unwrap();
    }
    frames
}

#[test]
fn one_split_per_stage_keeps_verdicts_apart() {
    let umem = umem(1000);
    let mut input = probes(&umem, 1000);
    let mut p = Pipeline::new(2);
    p.add_stage(Box::new(Alternate));
    let mut out = Outputs::new(2);
    p.process(&umem, StageContext::default(), &mut input, &mut out);
    assert_eq!(
        (out.tx[1].len(), out.drop.len(), out.tx[0].len()),
        (500, 500, 0)
    );
    let (_, c) = p.counters()[0];
    assert_eq!(
        (c.frames, c.vectors, c.dropped),
        (1000, 16, 500),
        "1000 frames in vectors of 64"
    );
    // Forwarded frames keep their order.
    let seqs: Vec<u64> = out.tx[1]
        .iter()
        .map(|f| match probe::check(umem.data(f)) {
            probe::Probe::Valid { seq, .. } => seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn stages_chain_and_rewrite_in_place() {
    let umem = umem(100);
    let mut input = probes(&umem, 10);
    // Two frames that are not probes go to the kernel.
    umem.write(&mut input[3], &[0u8; 60]).unwrap();
    umem.write(&mut input[7], &[1u8; 60]).unwrap();
    let mut p = Pipeline::new(2);
    let reflect = p.next_stage_id().next();
    p.add_stage(Box::new(Classify { next: reflect }));
    assert_eq!(p.add_stage(Box::new(Reflect)), reflect);
    let mut out = Outputs::new(2);
    // Received on port 1: Next::Back sends there.
    p.process(&umem, StageContext::new(1, 0), &mut input, &mut out);
    assert_eq!(
        (
            out.tx[1].len(),
            out.tx[0].len(),
            out.kernel.len(),
            out.drop.len()
        ),
        (8, 0, 2, 0)
    );
    for f in &out.tx[1] {
        let eth = ethernet::Frame::new_checked(umem.data(f)).unwrap();
        assert_eq!(
            (eth.dst_addr(), eth.src_addr()),
            (ADDRS.src_mac, ADDRS.dst_mac),
            "swapped in the UMEM"
        );
    }
}

/// A vector whose frames all go one way moves in one piece: in order, and counted as each
/// frame would be.
#[test]
fn a_vector_going_one_way_moves_whole_in_order_and_counted() {
    for (next, port) in [
        (Next::Tx(1), Some(1)),
        (Next::Back, Some(0)),
        (Next::Drop, None),
    ] {
        let umem = umem(150);
        let mut input = probes(&umem, 150);
        let sent: Vec<u64> = input.iter().map(|f| f.addr()).collect();
        let mut p = Pipeline::new(2);
        p.add_stage(Box::new(AllTo(next)));
        let mut out = Outputs::new(2);
        p.process(&umem, StageContext::new(0, 0), &mut input, &mut out);
        let (_, c) = p.counters()[0];
        let landed = match port {
            Some(i) => &out.tx[i],
            None => &out.drop,
        };
        let order: Vec<u64> = landed.iter().map(|f| f.addr()).collect();
        assert_eq!(order, sent, "{next:?}: all 150, in order");
        let dropped = if port.is_none() { 150 } else { 0 };
        assert_eq!(
            (c.frames, c.vectors, c.dropped),
            (150, 3, dropped),
            "{next:?}"
        );
    }
    let umem = umem(100);
    let mut input = probes(&umem, 100);
    let mut p = Pipeline::new(2);
    p.add_stage(Box::new(AllTo(Next::Tx(7))));
    let mut out = Outputs::new(2);
    p.process(&umem, StageContext::default(), &mut input, &mut out);
    assert_eq!((out.drop.len(), p.counters()[0].1.bad_next), (100, 100));
}

#[test]
fn impossible_nexts_are_dropped_and_counted() {
    let umem = umem(30);
    let mut input = probes(&umem, 30);
    let mut p = Pipeline::new(2);
    let own = p.next_stage_id();
    let missing = own.next().next().next();
    p.add_stage(Box::new(Wrong { missing, own }));
    let mut out = Outputs::new(2);
    p.process(&umem, StageContext::default(), &mut input, &mut out);
    assert_eq!(out.drop.len(), 30);
    assert_eq!(p.counters()[0].1.bad_next, 30);
    assert!(p.set_vector_size(0).is_err() && p.set_vector_size(257).is_err());
}

/// host_a --(a, f0)-- [forwarder: pipeline] --(f1, b)-- host_b, all on one UMEM.
struct Line {
    umem: Umem,
    shared: SharedFrames,
    pool: FramePool,
    host_a: MemPort,
    f0: MemPort,
    f1: MemPort,
    host_b: MemPort,
    total: usize,
}

impl Line {
    fn new(frames: u32) -> Line {
        let umem = umem(frames);
        let shared = SharedFrames::new(umem.take_frames().unwrap());
        let pool = shared.pool(64);
        let (host_a, f0) = mem_port_pair(256);
        let (f1, host_b) = mem_port_pair(256);
        Line {
            umem,
            shared,
            pool,
            host_a,
            f0,
            f1,
            host_b,
            total: frames as usize,
        }
    }

    /// Every frame is somewhere: pool, shared ring, a queue, or in `held`.
    fn accounted(&self, held: usize) -> usize {
        self.shared.len()
            + self.pool.cached()
            + self.f0.pending()
            + self.host_b.pending()
            + self.host_a.pending()
            + self.f1.pending()
            + held
    }
}

/// Forwards port 0 to port 1, or drops, as a per-frame verdict says.
struct Verdicts(Vec<bool>, usize);
impl Stage for Verdicts {
    fn name(&self) -> &'static str {
        "verdicts"
    }
    fn process(&mut self, _: &StageContext, _: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for n in nexts.iter_mut().take(frames.len()) {
            *n = if self.0[self.1 % self.0.len()] {
                Next::Tx(1)
            } else {
                Next::Drop
            };
            self.1 += 1;
        }
    }
}

fn run_line(verdicts: Vec<bool>, count: usize) -> (SequenceCheck, usize, Line) {
    let mut line = Line::new(512);
    let template = ADDRS.template(64).unwrap();
    let mut p = Pipeline::new(2);
    p.add_stage(Box::new(Verdicts(verdicts, 0)));
    let mut out = Outputs::new(2);
    let (mut batch, mut input, mut got, mut overflow) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut check = SequenceCheck::default();
    let (mut seq, mut forwarded) = (0u64, 0usize);
    while (seq as usize) < count || line.f0.pending() > 0 || line.host_b.pending() > 0 {
        // host a sends a batch
        let want = 32.min(count - seq as usize);
        line.pool.alloc(&mut batch, want);
        for f in batch.iter_mut() {
            line.umem.reset(f);
            let len = template.write(line.umem.buffer_mut(f), seq, 0).unwrap();
            line.umem.set_len(f, len).unwrap();
            seq += 1;
        }
        line.host_a.send(&mut batch, &mut overflow);
        line.pool.free(&mut overflow);
        assert_eq!(line.accounted(0), line.total, "after host a sent");
        // the forwarder: one vector in, split, transmit, recycle drops
        line.f0.receive(&mut input, 64);
        p.process(&line.umem, StageContext::default(), &mut input, &mut out);
        assert_eq!(line.accounted(out.len()), line.total, "after the split");
        forwarded += out.tx[1].len();
        line.f1.send(&mut out.tx[1], &mut overflow);
        line.pool.free(&mut out.drop);
        line.pool.free(&mut overflow);
        assert_eq!(line.accounted(0), line.total, "after transmit");
        // host b receives and checks
        line.host_b.receive(&mut got, 64);
        for f in &got {
            check.observe(line.umem.data(f));
        }
        line.pool.free(&mut got);
        assert_eq!(line.accounted(0), line.total, "after host b received");
    }
    (check, forwarded, line)
}

#[test]
fn forwarding_between_ports_is_exact() {
    let (check, forwarded, line) = run_line(vec![true], 5000);
    assert_eq!(forwarded, 5000);
    assert!(check.is_perfect(5000), "{check:?}");
    assert_eq!(
        line.accounted(0),
        line.total,
        "every frame back after the run"
    );
    let s = line.pool.stats();
    assert_eq!(s.recycled_full, 0);
    assert!(s.alloc_fast > 0 && s.recycled_cache > 0, "{s:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Whatever the mix of verdicts, every frame is accounted for at every step, every
    /// forwarded probe arrives intact, and forwarded + dropped = sent.
    #[test]
    fn accounting_is_exact_under_any_verdicts(verdicts in proptest::collection::vec(any::<bool>(), 1..40), count in 1usize..2000) {
        let (check, forwarded, line) = run_line(verdicts, count);
        prop_assert_eq!(check.valid as usize, forwarded);
        prop_assert_eq!(check.corrupt, 0);
        prop_assert_eq!(line.accounted(0), line.total);
    }
}
