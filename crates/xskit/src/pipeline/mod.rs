//! Vector packet processing (VPP's graph): a vector of frames enters a stage, the
//! stage gives every frame a [`Next`], and the runtime splits the vector once into per-next
//! vectors: drops, transmits per port, the kernel, or a later stage. Drop, transmit and
//! pass-to-kernel never interleave per packet.
//!
//! ```
//! use xskit::pipeline::{Next, Outputs, Pipeline, Stage};
//! use xskit::{Frame, Umem};
//!
//! /// Sends packets with an even first byte to port 1 and drops the rest.
//! struct EvenToOne;
//! impl Stage for EvenToOne {
//!     fn name(&self) -> &'static str { "even-to-one" }
//!     fn process(&mut self, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
//!         for (frame, next) in frames.iter().zip(nexts.iter_mut()) {
//!             *next = match umem.data(frame).first() {
//!                 Some(b) if b % 2 == 0 => Next::Tx(1),
//!                 _ => Next::Drop,
//!             };
//!         }
//!     }
//! }
//!
//! let mut pipeline = Pipeline::new(2);
//! pipeline.add_stage(Box::new(EvenToOne));
//! # let umem = Umem::new(xskit::UmemConfig { frame_count: 4, ..Default::default() })?;
//! # let mut input = umem.take_frames().unwrap();
//! # for (i, f) in input.iter_mut().enumerate() { umem.write(f, &[i as u8])?; }
//! let mut out = Outputs::new(2);
//! pipeline.process(&umem, &mut input, &mut out);
//! assert_eq!((out.tx[1].len(), out.drop.len()), (2, 2));
//! # Ok::<(), xskit::Error>(())
//! ```

mod mem_port;
mod pcap;
mod pool;
mod xsk_port;

pub use mem_port::{mem_port_pair, MemPort};
pub use pcap::{PcapSink, PcapSource};
pub use pool::{FramePool, PoolStats, SharedFrames};
pub use xsk_port::{RingOccupancy, XskPort};

use crate::sys::umem::{Frame, Umem};

/// The most frames one vector holds.
pub const MAX_VECTOR: usize = 256;
/// The default vector size.
pub const DEFAULT_VECTOR: usize = 64;

/// Checks a vector size: 1 to [`MAX_VECTOR`].
pub(crate) fn check_vector_size(n: usize) -> crate::Result<()> {
    if n == 0 || n > MAX_VECTOR {
        return Err(crate::Error::InvalidConfig(format!(
            "vector size {n} must be 1 to {MAX_VECTOR}"
        )));
    }
    Ok(())
}

/// Where a frame goes after a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// To a later stage (by index; a stage may only send forward, so vectors never loop).
    Stage(u16),
    /// Back to the pool.
    Drop,
    /// Out of port N.
    Tx(u16),
    /// Out of the port the vector came in on (see [`Pipeline::process_from`]).
    Back,
    /// To the kernel stack (through a TAP device, where one is set up).
    Kernel,
}

/// One processing step.
pub trait Stage: Send {
    /// A name for counters and traces.
    fn name(&self) -> &'static str;
    /// Gives every frame a next; frames may be rewritten in place through `umem`.
    /// `nexts.len() == frames.len()`, and every entry starts as [`Next::Drop`].
    fn process(&mut self, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]);
}

/// Per-stage counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCounters {
    /// Vectors processed.
    pub vectors: u64,
    /// Frames processed.
    pub frames: u64,
    /// Frames the stage dropped.
    pub dropped: u64,
    /// Frames sent to a port, a stage or the kernel that does not exist (dropped instead).
    pub bad_next: u64,
}

/// The split result of one pass: per-port transmit vectors, drops and kernel-bound frames.
#[derive(Debug, Default)]
pub struct Outputs {
    /// Frames to transmit, per port.
    pub tx: Vec<Vec<Frame>>,
    /// Frames to recycle.
    pub drop: Vec<Frame>,
    /// Frames for the kernel stack.
    pub kernel: Vec<Frame>,
}

impl Outputs {
    /// Empty outputs for `ports` ports, with room for a full vector each.
    pub fn new(ports: usize) -> Self {
        Outputs {
            tx: (0..ports).map(|_| Vec::with_capacity(MAX_VECTOR)).collect(),
            drop: Vec::with_capacity(MAX_VECTOR),
            kernel: Vec::new(),
        }
    }

    /// Frames held here.
    pub fn len(&self) -> usize {
        self.tx.iter().map(Vec::len).sum::<usize>() + self.drop.len() + self.kernel.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Stages in order, with the vectors between them.
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
    queues: Vec<Vec<Frame>>,
    nexts: Vec<Next>,
    counters: Vec<StageCounters>,
    ports: usize,
    vector: usize,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.stages.iter().map(|s| s.name()).collect();
        f.debug_struct("Pipeline")
            .field("stages", &names)
            .field("ports", &self.ports)
            .finish()
    }
}

impl Pipeline {
    /// An empty pipeline for `ports` ports, with vectors of [`DEFAULT_VECTOR`].
    pub fn new(ports: usize) -> Self {
        Pipeline {
            stages: Vec::new(),
            queues: Vec::new(),
            nexts: Vec::with_capacity(MAX_VECTOR),
            counters: Vec::new(),
            ports,
            vector: DEFAULT_VECTOR,
        }
    }

    /// Sets the vector size (1 to [`MAX_VECTOR`]).
    pub fn set_vector_size(&mut self, n: usize) -> crate::Result<()> {
        check_vector_size(n)?;
        self.vector = n;
        Ok(())
    }

    /// Appends a stage; returns its index for [`Next::Stage`].
    pub fn add_stage(&mut self, stage: Box<dyn Stage>) -> u16 {
        self.stages.push(stage);
        self.queues.push(Vec::with_capacity(MAX_VECTOR));
        self.counters.push(StageCounters::default());
        (self.stages.len() - 1) as u16
    }

    /// Counters per stage, with the stage names.
    pub fn counters(&self) -> Vec<(&'static str, StageCounters)> {
        self.stages
            .iter()
            .map(|s| s.name())
            .zip(self.counters.iter().copied())
            .collect()
    }

    /// Runs `input` (emptied) through the stages, from stage 0, and splits the results into
    /// `out`. With no stage, everything is dropped. The input counts as port 0's.
    pub fn process(&mut self, umem: &Umem, input: &mut Vec<Frame>, out: &mut Outputs) {
        self.process_from(umem, 0, input, out)
    }

    /// Like [`Pipeline::process`] for a vector received on port `input_port`, which
    /// [`Next::Back`] sends to.
    pub fn process_from(
        &mut self,
        umem: &Umem,
        input_port: u16,
        input: &mut Vec<Frame>,
        out: &mut Outputs,
    ) {
        if self.stages.is_empty() {
            out.drop.append(input);
            return;
        }
        while !input.is_empty() {
            let n = input.len().min(self.vector);
            self.queues[0].extend(input.drain(..n));
            for s in 0..self.stages.len() {
                self.run_stage(s, umem, input_port, out);
            }
        }
    }

    fn run_stage(&mut self, s: usize, umem: &Umem, input_port: u16, out: &mut Outputs) {
        let mut frames = std::mem::take(&mut self.queues[s]);
        while !frames.is_empty() {
            let n = frames.len().min(self.vector);
            self.nexts.clear();
            self.nexts.resize(n, Next::Drop);
            self.stages[s].process(umem, &mut frames[..n], &mut self.nexts);
            let c = &mut self.counters[s];
            c.vectors += 1;
            c.frames += n as u64;
            // The one split: every frame moves once, to the vector of its next.
            for (frame, next) in frames.drain(..n).zip(self.nexts.iter().copied()) {
                let next = match next {
                    Next::Back => Next::Tx(input_port),
                    other => other,
                };
                match next {
                    Next::Drop => {
                        c.dropped += 1;
                        out.drop.push(frame);
                    }
                    Next::Tx(p) if usize::from(p) < out.tx.len() && usize::from(p) < self.ports => {
                        out.tx[usize::from(p)].push(frame)
                    }
                    Next::Stage(t) if usize::from(t) > s && usize::from(t) < self.queues.len() => {
                        self.queues[usize::from(t)].push(frame)
                    }
                    Next::Kernel => out.kernel.push(frame),
                    Next::Tx(_) | Next::Stage(_) | Next::Back => {
                        c.bad_next += 1;
                        out.drop.push(frame);
                    }
                }
            }
        }
        // Give the (now empty) vector back so its capacity is reused.
        self.queues[s] = frames;
    }
}
