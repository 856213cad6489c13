//! What every worker of a forwarder shares and how one is built: its pipeline (respond,
//! rules, the split), its ports, its pool and what it publishes. Workers are built from it
//! over any port type, so the same logic runs on AF_XDP sockets and on in-memory devices.

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use xskit::{SocketHandle, Umem};
use xskit_pipeline::{FramePool, Outputs, Pipeline, PoolStats, SharedFrames};

use crate::bonded::{QueueSides, Side, SidePort, SocketPort};
use crate::chains;
use crate::config::ForwardConfig;
use crate::counter::PortCells;
use crate::error::Result;
use crate::live_rules::LiveRules;
use crate::rule_state::ByRule;
use crate::rules::{Limiter, RuleSet};
use crate::stages::{PortMacs, Respond, RuleCells, Rules};
use crate::worker::{TapPath, Worker, HOST_EVERY};

/// Counters of the respond stage, shared by every worker.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplyCounters {
    pub(crate) arp: Arc<AtomicU64>,
    pub(crate) echo: Arc<AtomicU64>,
    pub(crate) refused: Arc<AtomicU64>,
}

/// What each worker publishes, kept here to read while it runs.
pub(crate) struct WorkerCells {
    pub(crate) ports: Arc<Vec<PortCells>>,
    pub(crate) rules: Arc<ByRule<RuleCells>>,
    pub(crate) pool: Arc<Mutex<PoolStats>>,
    /// Where the worker's frames were when it last published.
    pub(crate) frames: Arc<Mutex<crate::worker::FramesSeen>>,
    /// Every socket, a side's members in order, sides in order.
    pub(crate) sockets: Vec<SocketHandle>,
    /// Per side: where a bond publishes its members' counters.
    pub(crate) bonds: Vec<Option<Arc<Mutex<xskit_bond::BondStats>>>>,
}

/// What every worker of a forwarder shares: how to build its pipeline and what it does
/// around it. Workers are built from it over any port type, so the same logic runs on
/// AF_XDP sockets and on in-memory devices.
pub(crate) struct WorkerPlan {
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) limiters: Arc<ByRule<Option<Limiter>>>,
    /// Where changed rules are published for the workers to take up.
    pub(crate) live: Arc<LiveRules>,
    /// The kernel filter polices the rate-limit rules: user space polices only the packets
    /// the filter sent up undecided.
    pub(crate) kernel_polices: bool,
    pub(crate) respond: Option<Ipv4Addr>,
    pub(crate) reflect: bool,
    /// The ports' MAC addresses as the respond stage uses them (a bond's may change).
    pub(crate) port_macs: Arc<PortMacs>,
    pub(crate) mtus: Vec<usize>,
    /// Each port's interface (a bond's first member's), by port.
    pub(crate) ifindexes: Arc<[u32]>,
    pub(crate) tap: Option<Arc<TapPath>>,
    pub(crate) vector: usize,
    pub(crate) check: bool,
    pub(crate) csum_offload: bool,
    pub(crate) cpus: Vec<usize>,
    pub(crate) replies: ReplyCounters,
    /// Where a handover asks the workers to pause.
    pub(crate) pause: Arc<crate::handover::HandoverPause>,
}

impl WorkerPlan {
    pub(crate) fn new(config: &ForwardConfig, rules: Arc<RuleSet>, macs: &[[u8; 6]]) -> Self {
        let limiters = Arc::new(crate::rule_state::limiters(&rules, None));
        let live = Arc::new(LiveRules::new(limiters.iter().any(Option::is_some)));
        WorkerPlan {
            rules,
            limiters,
            live,
            kernel_polices: false,
            respond: config.respond,
            reflect: config.reflect,
            mtus: vec![1500; macs.len()],
            ifindexes: vec![0; macs.len()].into(),
            port_macs: Arc::new(PortMacs::new(macs)),
            tap: None,
            vector: config.vector,
            check: config.check,
            csum_offload: false,
            cpus: config.cpus.clone(),
            replies: ReplyCounters::default(),
            pause: Arc::default(),
        }
    }

    /// The pipeline: respond (when asked), then the rules.
    /// Queue `q`'s worker over its `sides` (and where their bonds publish), its fill rings
    /// stocked, with a pool of its own from `shared`.
    pub(crate) fn primed_worker<P: SocketPort>(
        &self,
        q: u32,
        umem: &Umem,
        sides: QueueSides<P>,
        shared: &SharedFrames,
    ) -> Result<(Worker<Side<P>>, WorkerCells)> {
        let (mut ports, bond_stats) = sides;
        let sockets = ports.iter_mut().flat_map(Side::sockets).collect();
        let mut pool = shared.pool(2 * xskit_pipeline::MAX_VECTOR);
        // Ports taken over hold frames in the kernel already: they are this pool's.
        pool.hold_in_kernel(
            ports
                .iter()
                .map(xskit_pipeline::PipelinePort::in_flight)
                .sum(),
        );
        let (mut worker, mut cell) = self.worker(q as usize, q, umem, ports, pool)?;
        worker.prime()?;
        cell.sockets = sockets;
        cell.bonds = bond_stats;
        Ok((worker, cell))
    }

    /// Worker `index`'s pipeline.
    pub(crate) fn pipeline(
        &self,
        index: usize,
        rule_cells: &Arc<ByRule<RuleCells>>,
        port_cells: &Arc<Vec<PortCells>>,
    ) -> Result<Pipeline> {
        let n = self.port_macs.len();
        let mut pipeline = Pipeline::new(n);
        pipeline.set_vector_size(self.vector)?;
        if let Some(addr) = self.respond {
            // The rules come right after this stage.
            let rules_stage = pipeline.next_stage_id().next();
            pipeline.add_stage(Box::new(Respond {
                addr: addr.octets(),
                macs: Arc::clone(&self.port_macs),
                next: rules_stage,
                arp_replies: Arc::clone(&self.replies.arp),
                echo_replies: Arc::clone(&self.replies.echo),
                refused: Arc::clone(&self.replies.refused),
            }));
        }
        pipeline.add_stage(Box::new(self.rules_stage(index, rule_cells, port_cells)));
        Ok(pipeline)
    }

    /// Worker `index`'s rules stage.
    fn rules_stage(
        &self,
        index: usize,
        rule_cells: &Arc<ByRule<RuleCells>>,
        port_cells: &Arc<Vec<PortCells>>,
    ) -> Rules {
        let n = self.port_macs.len();
        Rules {
            rules: Arc::clone(&self.rules),
            limiters: Arc::clone(&self.limiters),
            kernel_polices: self.kernel_polices,
            cells: Arc::clone(rule_cells),
            ports: Arc::clone(port_cells),
            local: vec![[0; 3]; rule_cells.len()],
            touched: Vec::with_capacity(xskit_pipeline::MAX_VECTOR),
            outs: if n == 2 { vec![1, 0] } else { vec![0] },
            reflect: self.reflect,
            local_mac: self.tap.as_ref().map(|t| t.mac),
            live: Arc::clone(&self.live),
            generation: self.live.generation(),
            worker: index,
            ifindexes: Arc::clone(&self.ifindexes),
            told_tags: crate::stages::told_tags(&self.rules, &self.ifindexes),
        }
    }

    /// Worker `index`'s rules for the direct path, where it has one: two ports, and nothing
    /// but the rules between them (no reflecting, no answers of its own, no host link).
    fn direct_rules(
        &self,
        index: usize,
        rule_cells: &Arc<ByRule<RuleCells>>,
        port_cells: &Arc<Vec<PortCells>>,
    ) -> Option<Rules> {
        let plain = self.port_macs.len() == 2
            && !self.reflect
            && self.respond.is_none()
            && self.tap.is_none();
        plain.then(|| self.rules_stage(index, rule_cells, port_cells))
    }

    /// Worker `index` (queue `queue`) over `ports`, one per interface, drawing frames from
    /// `pool` on `umem`; and the cells it publishes (without socket handles).
    pub(crate) fn worker<P: SidePort>(
        &self,
        index: usize,
        queue: u32,
        umem: &Umem,
        ports: Vec<P>,
        pool: FramePool,
    ) -> Result<(Worker<P>, WorkerCells)> {
        let n = ports.len();
        let port_cells: Arc<Vec<PortCells>> =
            Arc::new((0..n).map(|_| PortCells::default()).collect());
        let rule_cells = Arc::new(ByRule::fresh(&self.rules, |_| RuleCells::default()));
        let pool_stats = Arc::new(Mutex::new(PoolStats::default()));
        let frames_seen = Arc::new(Mutex::new(crate::worker::FramesSeen::default()));
        let cells = WorkerCells {
            ports: Arc::clone(&port_cells),
            rules: Arc::clone(&rule_cells),
            pool: Arc::clone(&pool_stats),
            frames: Arc::clone(&frames_seen),
            sockets: Vec::new(),
            bonds: Vec::new(),
        };
        let direct = self.direct_rules(index, &rule_cells, &port_cells);
        let worker = Worker {
            index,
            queue,
            cpu: (!self.cpus.is_empty()).then(|| self.cpus[index % self.cpus.len()]),
            umem: umem.clone(),
            ports,
            pipeline: self.pipeline(index, &rule_cells, &port_cells)?,
            pool,
            vector: self.vector,
            check: self.check,
            tap: self.tap.clone(),
            port_cells,
            pool_stats,
            frames_seen,
            tap_frames: Vec::with_capacity(1),
            csum_offload: self.csum_offload,
            mtus: self.mtus.clone(),
            chains: chains::Chains::new(n),
            raw: Vec::with_capacity(xskit_pipeline::MAX_VECTOR),
            txq: Vec::with_capacity(2 * xskit_pipeline::MAX_VECTOR),
            gathered: Vec::new(),
            segment: Vec::new(),
            input: Vec::with_capacity(self.vector),
            out: Outputs::new(n),
            rounds: 0,
            host_every: HOST_EVERY,
            live: Arc::clone(&self.live),
            pause: Arc::clone(&self.pause),
            direct,
        };
        Ok((worker, cells))
    }
}
