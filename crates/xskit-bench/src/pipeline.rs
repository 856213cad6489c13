//! `xskit bench pipeline`: what vectors and a frame pool save, measured in memory (no root, no interface).
//!
//! - Verdicts: per-packet cost of a vector through one stage when every packet is dropped,
//!   every packet is forwarded, or the two alternate packet by packet. With one split per
//!   vector, the alternating mix should cost about the mean of the two pure cases. The same
//!   mix handled packet by packet (a transmit call per forwarded packet, a free per drop) is
//!   the design the vectors replace.
//! - Buffers: a frame allocated and freed through the pool (per-worker cache, bulk moves)
//!   against the same through the shared ring one frame at a time (a lock each), and against a
//!   heap buffer allocated and freed per packet.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use xskit::{Frame, Umem, UmemConfig};
use xskit_pipeline::{
    mem_port_pair, FramePool, MemPort, Next, Outputs, Pipeline, SharedFrames, Stage, StageContext,
};

/// Drops frames whose first byte is even and forwards the rest to port 1: the verdict comes
/// from the packet, as a real stage's does.
struct ByFirstByte;

impl Stage for ByFirstByte {
    fn name(&self) -> &'static str {
        "by-first-byte"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (f, n) in frames.iter().zip(nexts.iter_mut()) {
            *n = match umem.data(f).first() {
                Some(b) if b % 2 == 1 => Next::Tx(1),
                _ => Next::Drop,
            };
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    Drop,
    Forward,
    Alternate,
}

impl Mix {
    fn first_byte(self, i: u64) -> u8 {
        match self {
            Mix::Drop => 0,
            Mix::Forward => 1,
            Mix::Alternate => (i % 2) as u8,
        }
    }
}

struct Bed {
    umem: Umem,
    pool: FramePool,
    port: MemPort,
    wire: MemPort,
    packet: [u8; 64],
    _shared: SharedFrames,
}

impl Bed {
    fn new(cache: usize) -> Result<Self> {
        let umem = Umem::new(UmemConfig::default().frame_count(4096))?;
        let shared = SharedFrames::new(umem.take_frames().expect("a new UMEM has its frames"));
        let (port, wire) = mem_port_pair(4096);
        Ok(Bed {
            pool: shared.pool(cache),
            umem,
            port,
            wire,
            packet: [0; 64],
            _shared: shared,
        })
    }

    /// "Receives" a vector: frames from the pool, a 64-byte packet written into each.
    fn receive(&mut self, input: &mut Vec<Frame>, n: usize, mix: Mix, seq: &mut u64) {
        self.pool.alloc(input, n);
        for f in input.iter_mut() {
            self.packet[0] = mix.first_byte(*seq);
            *seq += 1;
            let _ = self.umem.write(f, &self.packet);
        }
    }

    /// The far end of the wire takes what was sent and gives the frames back.
    fn drain_wire(&mut self, sink: &mut Vec<Frame>) {
        while self.wire.receive(sink, 256) > 0 {
            self.pool.free(sink);
        }
    }
}

const VECTOR: usize = 64;

/// Nanoseconds per packet through the pipeline, vector by vector.
fn vectors(mix: Mix, packets: u64) -> Result<f64> {
    let mut bed = Bed::new(2 * 256)?;
    let mut pipeline = Pipeline::new(2);
    pipeline.add_stage(Box::new(ByFirstByte));
    let (mut input, mut out, mut sink, mut overflow) = (
        Vec::with_capacity(VECTOR),
        Outputs::new(2),
        Vec::with_capacity(256),
        Vec::new(),
    );
    let mut seq = 0;
    let start = Instant::now();
    while seq < packets {
        bed.receive(&mut input, VECTOR, mix, &mut seq);
        pipeline.process(&bed.umem, StageContext::default(), &mut input, &mut out);
        bed.pool.free(&mut out.drop);
        bed.port.send(&mut out.tx[1], &mut overflow);
        bed.pool.free(&mut overflow);
        bed.drain_wire(&mut sink);
    }
    Ok(start.elapsed().as_nanos() as f64 / seq as f64)
}

/// The same work without vectors: each packet is decided and sent or freed on its own.
fn per_packet(mix: Mix, packets: u64) -> Result<f64> {
    let mut bed = Bed::new(2 * 256)?;
    let (mut one, mut sink, mut overflow) = (Vec::with_capacity(1), Vec::new(), Vec::new());
    let mut seq = 0;
    let start = Instant::now();
    while seq < packets {
        for _ in 0..VECTOR {
            bed.receive(&mut one, 1, mix, &mut seq);
            let Some(f) = one.pop() else { continue };
            if bed.umem.data(&f).first().is_some_and(|b| b % 2 == 1) {
                one.push(f);
                bed.port.send(&mut one, &mut overflow);
                bed.pool.free(&mut overflow);
            } else {
                bed.pool.free_one(f);
            }
        }
        bed.drain_wire(&mut sink);
    }
    Ok(start.elapsed().as_nanos() as f64 / seq as f64)
}

/// Nanoseconds to allocate a frame, write a packet into it and free it: through a pool with a
/// cache, in vectors; or through the shared ring (no cache), one at a time.
fn pool_cycle(cache: usize, packets: u64) -> Result<f64> {
    let mut bed = Bed::new(cache)?;
    let mut v = Vec::with_capacity(VECTOR);
    let mut done = 0;
    let start = Instant::now();
    while done < packets {
        // Each case writes a 64-byte packet into every buffer, as the heap case does.
        if cache > 0 {
            bed.pool.alloc(&mut v, VECTOR);
            for f in v.iter_mut() {
                let _ = bed.umem.write(f, &bed.packet);
            }
            bed.pool.free(&mut v);
        } else {
            for _ in 0..VECTOR {
                bed.pool.alloc(&mut v, 1);
                if let Some(mut f) = v.pop() {
                    let _ = bed.umem.write(&mut f, &bed.packet);
                    bed.pool.free_one(black_box(f));
                }
            }
        }
        done += VECTOR as u64;
    }
    Ok(start.elapsed().as_nanos() as f64 / done as f64)
}

/// Nanoseconds to allocate a 2 KiB heap buffer per packet, write a 64-byte packet into it,
/// and free it.
fn heap_cycle(packets: u64) -> f64 {
    let packet = [0u8; 64];
    let start = Instant::now();
    for i in 0..packets {
        let mut b: Vec<u8> = Vec::with_capacity(2048);
        b.extend_from_slice(&packet);
        b[0] = i as u8;
        black_box(&b);
    }
    start.elapsed().as_nanos() as f64 / packets as f64
}

#[derive(Serialize)]
/// Nanoseconds per packet of each case, as `--json` prints it.
pub struct PipelineReport {
    packets_per_case: u64,
    runs: usize,
    /// Median ns per packet.
    vector_drop_ns: f64,
    vector_forward_ns: f64,
    vector_alternate_ns: f64,
    per_packet_alternate_ns: f64,
    /// Alternating cost over the mean of the pure costs (1.0: the split makes mixing free).
    alternate_over_mean_of_pure: f64,
    /// Per-packet handling over vectors, for the alternating mix.
    per_packet_over_vector: f64,
    pool_ns: f64,
    shared_ring_per_frame_ns: f64,
    heap_per_packet_ns: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Each case's nanoseconds per packet, median of `runs` (3 to 20) runs of `packets`.
pub fn run(runs: usize, packets: u64) -> Result<PipelineReport> {
    if !(1000..=1_000_000_000).contains(&packets) {
        anyhow::bail!("--packets {packets} is out of range: use 1000 to 1000000000");
    }
    let runs = runs.clamp(3, 20);
    let mut cases: [Vec<f64>; 7] = Default::default();
    // Interleaved, so drift hits every case alike.
    for _ in 0..runs {
        cases[0].push(vectors(Mix::Drop, packets)?);
        cases[1].push(vectors(Mix::Forward, packets)?);
        cases[2].push(vectors(Mix::Alternate, packets)?);
        cases[3].push(per_packet(Mix::Alternate, packets)?);
        cases[4].push(pool_cycle(2 * 256, packets)?);
        cases[5].push(pool_cycle(0, packets)?);
        cases[6].push(heap_cycle(packets));
    }
    let [d, f, a, p, pool, ring, heap] = cases.map(median);
    Ok(PipelineReport {
        packets_per_case: packets,
        runs,
        vector_drop_ns: d,
        vector_forward_ns: f,
        vector_alternate_ns: a,
        per_packet_alternate_ns: p,
        alternate_over_mean_of_pure: a / ((d + f) / 2.0),
        per_packet_over_vector: p / a,
        pool_ns: pool,
        shared_ring_per_frame_ns: ring,
        heap_per_packet_ns: heap,
    })
}

impl PipelineReport {
    /// The report as text.
    pub fn lines(&self) -> Vec<String> {
        let report = self;
        let (runs, packets) = (self.runs, self.packets_per_case);
        let (d, f, a, p) = (
            self.vector_drop_ns,
            self.vector_forward_ns,
            self.vector_alternate_ns,
            self.per_packet_alternate_ns,
        );
        let (pool, ring, heap) = (
            self.pool_ns,
            self.shared_ring_per_frame_ns,
            self.heap_per_packet_ns,
        );
        let mut lines = Vec::new();
        lines.push(format!(
        "pipeline, in memory: vectors of {VECTOR}, 64-byte packets, median of {runs} runs of {} packets",
        packets
    ));
        lines.push("  verdicts (ns/packet)".into());
        lines.push(format!("    all drop                 {d:>7.1}"));
        lines.push(format!("    all forward              {f:>7.1}"));
        lines.push(format!(
            "    alternating, vectors     {a:>7.1}   {:.2}x the mean of the two",
            report.alternate_over_mean_of_pure
        ));
        lines.push(format!(
            "    alternating, per packet  {p:>7.1}   {:.2}x the vectors",
            report.per_packet_over_vector
        ));
        lines.push("  buffers (ns per alloc, 64-byte write, free)".into());
        lines.push(format!("    frame pool (cache, bulk) {pool:>7.1}"));
        lines.push(format!(
            "    shared ring, per frame   {ring:>7.1}   {:.1}x the pool",
            ring / pool
        ));
        lines.push(format!(
            "    heap buffer, per packet  {heap:>7.1}   {:.1}x the pool",
            heap / pool
        ));
        lines
    }
}
