#![doc = include_str!("../README.md")]

mod error;
mod mem_port;
mod pcap;
mod pool;
mod port;
mod wire;
mod xsk_port;

pub use error::{Error, Result};

pub use mem_port::{mem_port_pair, MemPort};
pub use pcap::{PcapSink, PcapSource, CAPTURE_FLUSH_EVERY};
pub use pool::{FramePool, PoolStats, SharedFrames};
pub use port::{PipelinePort, RingOccupancy};
pub use wire::{wire, WireEnd, WirePort};
pub use xsk_port::XskPort;

use xskit::{Frame, Umem};

/// The most frames one vector holds.
pub const MAX_VECTOR: usize = 256;
/// The default vector size.
pub const DEFAULT_VECTOR: usize = 64;

/// Checks a vector size: 1 to [`MAX_VECTOR`].
pub fn check_vector_size(n: usize) -> Result<()> {
    if n == 0 || n > MAX_VECTOR {
        return Err(Error::VectorSize { size: n });
    }
    Ok(())
}

/// A stage of a pipeline, as [`Pipeline::add_stage`] returns it: the edge to it in a
/// [`Next::Stage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StageId(u16);

impl StageId {
    /// The stage added right after this one.
    pub fn next(self) -> StageId {
        StageId(self.0 + 1)
    }
}

/// What a stage knows of the vector it is given besides the frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageContext {
    /// The port the vector was received on ([`Next::Back`] sends there).
    pub input_port: u16,
    /// The time, in nanoseconds of the caller's clock (CLOCK_MONOTONIC in a worker, virtual
    /// time in tests), read once per vector so stages never read the clock themselves.
    pub now_ns: u64,
}

impl StageContext {
    /// The context of a vector from `input_port` at `now_ns`.
    pub fn new(input_port: u16, now_ns: u64) -> Self {
        StageContext { input_port, now_ns }
    }
}

/// Where a frame goes after a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// To a later stage (a stage may only send forward, so vectors never loop).
    Stage(StageId),
    /// Back to the pool.
    Drop,
    /// Out of port N.
    Tx(u16),
    /// Out of the port the vector came in on ([`StageContext::input_port`]).
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
    fn process(
        &mut self,
        context: &StageContext,
        umem: &Umem,
        frames: &mut [Frame],
        nexts: &mut [Next],
    );
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
    pub fn set_vector_size(&mut self, n: usize) -> Result<()> {
        check_vector_size(n)?;
        self.vector = n;
        Ok(())
    }

    /// Appends a stage; returns its id, the edge to it for [`Next::Stage`]. The first stage
    /// added is where vectors enter.
    pub fn add_stage(&mut self, stage: Box<dyn Stage>) -> StageId {
        let id = self.next_stage_id();
        self.stages.push(stage);
        self.queues.push(Vec::with_capacity(MAX_VECTOR));
        self.counters.push(StageCounters::default());
        id
    }

    /// The id the next [`Pipeline::add_stage`] will return, for a stage that sends to a stage
    /// added after it.
    pub fn next_stage_id(&self) -> StageId {
        StageId(self.stages.len() as u16)
    }

    /// Counters per stage, with the stage names.
    pub fn counters(&self) -> Vec<(&'static str, StageCounters)> {
        self.stages
            .iter()
            .map(|s| s.name())
            .zip(self.counters.iter().copied())
            .collect()
    }

    /// Runs `input` (emptied), received as `context` says, through the stages from the
    /// first, and splits the results into `out`. With no stage, everything is dropped.
    pub fn process(
        &mut self,
        umem: &Umem,
        context: StageContext,
        input: &mut Vec<Frame>,
        out: &mut Outputs,
    ) {
        if self.stages.is_empty() {
            out.drop.append(input);
            return;
        }
        while !input.is_empty() {
            let n = input.len().min(self.vector);
            if n == input.len() && self.queues[0].is_empty() {
                // The whole input is one vector: it becomes the first stage's queue as it is.
                std::mem::swap(&mut self.queues[0], input);
            } else {
                self.queues[0].extend(input.drain(..n));
            }
            for s in 0..self.stages.len() {
                self.run_stage(s, umem, &context, out);
            }
        }
    }

    fn run_stage(&mut self, s: usize, umem: &Umem, context: &StageContext, out: &mut Outputs) {
        let mut frames = std::mem::take(&mut self.queues[s]);
        while !frames.is_empty() {
            let n = frames.len().min(self.vector);
            self.nexts.clear();
            self.nexts.resize(n, Next::Drop);
            self.stages[s].process(context, umem, &mut frames[..n], &mut self.nexts);
            let c = &mut self.counters[s];
            c.vectors += 1;
            c.frames += n as u64;
            // The one split: every frame moves once, to the vector of its next; a vector that
            // goes one way (the usual case) moves in one append.
            let first = self.nexts[0];
            if self.nexts.iter().all(|&next| next == first) {
                let to = self.destination(s, first, context.input_port, out, n as u64);
                to.extend(frames.drain(..n));
                continue;
            }
            for (i, frame) in frames.drain(..n).enumerate() {
                let next = self.nexts[i];
                self.destination(s, next, context.input_port, out, 1)
                    .push(frame);
            }
        }
        // Give the (now empty) vector back so its capacity is reused.
        self.queues[s] = frames;
    }

    /// The vector `frames` frames leaving stage `s` for `next` go to, counting drops (and
    /// nexts no stage may give, which drop).
    #[inline]
    fn destination<'a>(
        &'a mut self,
        s: usize,
        next: Next,
        input_port: u16,
        out: &'a mut Outputs,
        frames: u64,
    ) -> &'a mut Vec<Frame> {
        let next = match next {
            Next::Back => Next::Tx(input_port),
            other => other,
        };
        let c = &mut self.counters[s];
        match next {
            Next::Drop => {
                c.dropped += frames;
                &mut out.drop
            }
            Next::Tx(p) if usize::from(p) < out.tx.len() && usize::from(p) < self.ports => {
                &mut out.tx[usize::from(p)]
            }
            Next::Stage(StageId(t)) if usize::from(t) > s && usize::from(t) < self.queues.len() => {
                &mut self.queues[usize::from(t)]
            }
            Next::Kernel => &mut out.kernel,
            Next::Tx(_) | Next::Stage(_) | Next::Back => {
                c.bad_next += frames;
                &mut out.drop
            }
        }
    }
}
