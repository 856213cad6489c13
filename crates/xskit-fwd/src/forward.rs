//! The forwarder: set-up, the workers' threads, the supervisor and the report.
//!
//! [`Forwarding`] is the forwarder over any [`Kernel`]: production hands it the real one
//! ([`Forwarder`]), the tests a fake of in-memory devices, through the same constructor and
//! the same supervisor.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xskit::{Mode, SocketConfig, Umem};
use xskit_os::sync::LockUnpoisoned;
use xskit_pipeline::{PoolStats, SharedFrames};

use crate::abi::Slot;
use crate::bond_runtime::BondRuntime;
use crate::bonded::{gather_sides, BondConfig, BondCount, QueueSides, Side};
use crate::config::ForwardConfig;
use crate::config_check::CpuFacts;
use crate::counter::PortCells;
use crate::counts::{Counters, FrameReport, LiveFrames, PortCount, Report, RuleCount};
use crate::error::{Error, Result};
use crate::kernel::{Kernel, RealKernel, RunningFilter, SetUp};
use crate::report::{FilterSnapshot, WorkerSnapshot};
use crate::rules::RuleSet;
use crate::stages::{PortMacs, RuleCells};
use crate::worker::{Worker, WorkerEnd};
use crate::worker_plan::{ReplyCounters, WorkerCells, WorkerPlan};

/// The most elements of sets with timeouts or counters whose counts are read every interval
/// (a system call each): more are read for the summary only.
const LIVE_ELEMENTS: usize = 65_536;

/// A kernel counter read; without `strict` a failed read counts nothing (a device that
/// vanished while the forwarder stops).
fn lenient<T: Default, E: Into<Error>>(strict: bool, r: std::result::Result<T, E>) -> Result<T> {
    match r {
        Err(_) if !strict => Ok(T::default()),
        other => other.map_err(Into::into),
    }
}

/// What a worker had published, and its sockets' kernel counters.
fn worker_snapshot(w: &WorkerCells, strict: bool) -> Result<WorkerSnapshot> {
    Ok(WorkerSnapshot {
        ports: w.ports.iter().map(PortCells::load).collect(),
        sockets: w
            .sockets
            .iter()
            .map(|s| lenient(strict, s.statistics()))
            .collect::<Result<_>>()?,
        bonds: w
            .bonds
            .iter()
            .map(|b| b.as_ref().map(|b| b.lock_unpoisoned().clone()))
            .collect(),
        rules: w.rules.iter().map(RuleCells::load).collect(),
        pool: *w.pool.lock_unpoisoned(),
        frames: *w.frames.lock_unpoisoned(),
    })
}

/// A side's bond and its controller.
type BondSide<K> = (BondConfig, BondRuntime<<K as Kernel>::BondIo>);

/// Each side's bond and its controller; ARP monitoring's targets are set in the members'
/// filters first, since they count the targets' answers from the first probe on.
fn bond_runtimes<K: Kernel>(
    kernel: &K,
    setup: &SetUp<K::Filter>,
    respond: Option<std::net::Ipv4Addr>,
) -> Result<Vec<Option<BondSide<K>>>> {
    for (bond, range) in setup.bonds.iter().zip(&setup.sides) {
        if let Some(arp) = bond.as_ref().and_then(|b| b.arp.as_ref()) {
            for filter in &setup.filters[range.clone()] {
                filter.set_arp_targets(&arp.targets)?;
            }
        }
    }
    setup
        .bonds
        .iter()
        .zip(&setup.sides)
        .map(|(bond, range)| {
            bond.as_ref()
                .map(|b| {
                    let io = kernel.open_bond(b, range.clone())?;
                    Ok((b.clone(), BondRuntime::new(b, io, respond)?))
                })
                .transpose()
        })
        .collect()
}

/// Queue `q`'s sockets, one per interface, gathered into sides.
fn queue_sides<K: Kernel>(
    kernel: &K,
    q: u32,
    setup: &SetUp<K::Filter>,
    bonds: &[Option<BondSide<K>>],
    (umem, socket_config): (&Umem, &SocketConfig),
) -> Result<QueueSides<K::Port>> {
    let bonds: Vec<_> = bonds
        .iter()
        .map(|b| {
            b.as_ref()
                .map(|(config, runtime)| (config, &runtime.control))
        })
        .collect();
    gather_sides(&setup.sides, &bonds, |i| {
        kernel.open_port(&setup.filters[i], q, umem, socket_config)
    })
}

mod apply;
mod handing;

pub use apply::{Applied, Generation, RuleChanger, SetChange};

/// A forwarder, set up and ready to run.
pub struct Forwarder(Forwarding<RealKernel>);

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("interfaces", &self.0.names)
            .field("queues", &self.0.queues)
            .field("frames", &self.0.total)
            .finish()
    }
}

impl Forwarder {
    /// Attaches the programs, installs the kernel's share of the rules, opens every socket and
    /// builds the workers. Nothing runs until [`Forwarder::run`]; dropping the forwarder
    /// detaches everything.
    pub fn new(config: ForwardConfig) -> Result<Self> {
        let cpus = CpuFacts::here()?;
        let tx_metadata = xskit::kernel_supports_tx_metadata();
        let pins = pins_ready(&config)?;
        let mut kernel = RealKernel::default();
        kernel.pins = pins.clone();
        let keep = config.keep_in_kernel;
        let forwarding = Forwarding::new(kernel, config, &cpus, tx_metadata)?;
        Forwarder(forwarding).on_links(pins.as_deref(), keep)
    }

    /// Puts the programs loaded for links taken over (a predecessor's, or kept ones) on
    /// them, and pins or unpins every link as `keep` says.
    fn on_links(self, pins: Option<&std::path::Path>, keep: bool) -> Result<Self> {
        for filter in &self.0.filters {
            let program = filter.program();
            program.put_on_link()?;
            let Some(dir) = pins else {
                continue;
            };
            let pin = dir.join(program.interface().name());
            match (keep, pin.exists()) {
                (true, false) => program.pin_link(&pin)?,
                (false, true) => xskit::unpin_link(&pin)?,
                _ => {}
            }
        }
        Ok(self)
    }

    /// The interfaces whose programs an earlier forwarder left in the kernel (pinned,
    /// [`ForwardConfig::keep_in_kernel`]) and this one took over.
    pub fn kept_programs_taken_over(&self) -> &[String] {
        &self.0._kernel.kept
    }

    /// [`Forwarder::new`] over what a running forwarder handed over (its sockets, UMEM and
    /// links: [`crate::control::HandoverClient`], the `predecessor`). Its programs are
    /// loaded and filled while it forwards; then it pauses and commits, this forwarder takes
    /// its sockets with the frames where they are and replaces its programs on their links
    /// in one step each. Run it at once: packets wait in the sockets' rings meanwhile.
    pub fn take_over(
        config: ForwardConfig,
        inherited: crate::handover::Inherited,
        predecessor: impl crate::handover::Predecessor + 'static,
    ) -> Result<Self> {
        inherited.check(&config)?;
        let cpus = CpuFacts::here()?;
        let tx_metadata = xskit::kernel_supports_tx_metadata();
        let queues = inherited.state.queues;
        let pins = pins_ready(&config)?;
        let keep = config.keep_in_kernel;
        let mut kernel = RealKernel::default();
        kernel.takeover = Some(crate::handover::Takeover::new(
            inherited,
            Box::new(predecessor),
        ));
        let forwarding = Forwarding::new(kernel, config, &cpus, tx_metadata)?;
        if forwarding.queues != queues {
            return Err(Error::TakeOver {
                reason: format!(
                    "the forwarder handed over {queues} queues, this one would serve {}",
                    forwarding.queues
                ),
            });
        }
        let mut forwarder = Forwarder(forwarding);
        forwarder.0.carry_over()?;
        forwarder.on_links(pins.as_deref(), keep)
    }

    /// How many rules kept their counters and rate-limit state from the forwarder this one
    /// took over from (by name); `None` when it carried nothing (not a takeover, or another
    /// filter program: then [`Forwarder::warnings`] says so).
    pub fn carried_rules(&self) -> Option<usize> {
        self.0.carried_rules
    }

    /// What the filter's verdict and reason numbers mean for the rules as this forwarder
    /// runs them (forwarding in XDP only where it does), for a capture's comments.
    pub fn capture_reasons(&self) -> crate::reasons::LiveReasons {
        self.0.reasons.clone()
    }

    /// Things the user should know about the set-up (unserved queues, a mode fallback, pass
    /// rules without a TAP device).
    pub fn warnings(&self) -> &[String] {
        &self.0.warnings
    }

    /// Whether the sockets are zero-copy: a received frame leaves the other interface as the
    /// same UMEM frame, by descriptor.
    pub fn zero_copy(&self) -> bool {
        self.0.zero_copy
    }

    /// The interfaces (a bond's members) held in promiscuous mode while the forwarder lives,
    /// so that unicast frames for the hosts on the other side reach it through a NIC's MAC
    /// filter ([`ForwardConfig::promiscuous`]).
    pub fn promiscuous(&self) -> Vec<String> {
        self.0.promiscuous.clone()
    }

    /// Every interface a program of the forwarder runs on: each side's, a bond's members in
    /// its place, in order.
    pub fn devices(&self) -> Vec<String> {
        self.0.devices()
    }

    /// The attach mode of each side's program (a bond's first member's).
    pub fn modes(&self) -> Vec<String> {
        self.0.modes()
    }

    /// The counters now (the kernel's rule counters and socket statistics are read by system
    /// calls: call this about once a second, not per packet).
    pub fn counters(&self) -> Result<Counters> {
        self.0.counters()
    }

    /// What changes the rules while [`Forwarder::run`] runs: each apply is answered between
    /// the supervisor's looks (within about 10 ms, plus the writing).
    pub fn rule_changer(&self) -> RuleChanger {
        RuleChanger::new(self.0.apply_sender.clone())
    }

    /// Puts `rules` in force now, before [`Forwarder::run`], as a [`RuleChanger`] does while
    /// it runs.
    pub fn apply(&mut self, rules: RuleSet) -> Result<Applied> {
        self.0.apply(rules)
    }

    /// Forwards until `stop` is set, calling `on_tick` with the counters every `interval`;
    /// then stops redirecting, drains the rings, and reports. Everything is detached when it
    /// returns, whether it succeeds or not.
    pub fn run(
        self,
        stop: &AtomicBool,
        interval: Duration,
        on_tick: impl FnMut(&Counters),
    ) -> Result<Report> {
        self.0.run(stop, interval, on_tick)
    }
}

/// The directory of `config`'s pins, made when programs are to be kept there; refused when
/// it is not on a BPF file system then.
fn pins_ready(config: &ForwardConfig) -> Result<Option<std::path::PathBuf>> {
    let Some(dir) = &config.pins else {
        return Ok(None);
    };
    if !config.keep_in_kernel {
        return Ok(Some(dir.clone()));
    }
    let made = std::fs::create_dir_all(dir);
    if made.is_err() || !xskit::is_bpf_fs(dir) {
        return Err(Error::NotBpfFs {
            dir: dir.display().to_string(),
        });
    }
    Ok(Some(dir.clone()))
}

/// The forwarder over the kernel `K`.
pub(crate) struct Forwarding<K: Kernel> {
    rules: Arc<RuleSet>,
    /// One per interface: every side's, a bond's members in order.
    filters: Vec<K::Filter>,
    /// The sides' names (a bond's is its own).
    names: Vec<String>,
    /// Which filters (and sockets) belong to each side.
    sides: Vec<Range<usize>>,
    /// Each side's bond and its controller, if it is one.
    bonds: Vec<Option<BondSide<K>>>,
    /// Whether the filters forward in XDP (out of the other side's usable members).
    xdp_forward: bool,
    /// Whether `pass` verdicts go to the TAP device (through user space).
    pass_to_tap: bool,
    /// The sides' MAC addresses as the respond stage uses them.
    port_macs: Arc<PortMacs>,
    shared: SharedFrames,
    total: usize,
    queues: u32,
    workers: Vec<Worker<Side<K::Port>>>,
    cells: Vec<WorkerCells>,
    replies: ReplyCounters,
    warnings: Vec<String>,
    /// How many rules' state came from the forwarder taken over from.
    carried_rules: Option<usize>,
    /// Each device's transmit counter when the forwarder was set up.
    device_tx_base: Vec<u64>,
    /// Whether the sockets are zero-copy.
    zero_copy: bool,
    /// Per interface (a bond's members too): whether its link was up at the last look, and
    /// how often that changed.
    links: Vec<(bool, u64)>,
    /// The interfaces (a bond's members) the kernel holds in promiscuous mode.
    promiscuous: Vec<String>,
    /// Set when the workers have stopped and the summary's counters are read.
    summary: bool,
    /// The rules' rate limiters as the workers share them, to carry over by name.
    limiters: Arc<crate::rule_state::ByRule<Option<crate::rules::Limiter>>>,
    /// Where changed rules are published for the workers.
    live: Arc<crate::live_rules::LiveRules>,
    /// The kernel slot of each rule's state, by name.
    slots: crate::rule_slots::RuleSlots,
    /// The room the filters were attached with.
    room: crate::set_tables::SetRoom,
    /// The rules' generation in force.
    generation: Generation,
    /// What the kernel's reason numbers mean for the rules in force, for captures.
    reasons: crate::reasons::LiveReasons,
    /// Applies asked by [`RuleChanger`]s, and where they ask.
    apply_requests: std::sync::mpsc::Receiver<apply::ApplyRequest>,
    apply_sender: std::sync::mpsc::SyncSender<apply::ApplyRequest>,
    /// The UMEM, and the sockets' ring sizes, for a handover.
    umem: Umem,
    socket_config: SocketConfig,
    /// Where a handover asks the workers to pause; when the pause began; the successor's
    /// process once handed over.
    pause: Arc<crate::handover::HandoverPause>,
    paused_since: Option<Instant>,
    handed_to: Option<u32>,
    /// Last, so that what it holds (promiscuous mode) outlives everything set up through it.
    _kernel: K,
}

/// The workers, one per queue, each primed with its sockets' frames.
struct Workers<P: crate::bonded::SocketPort> {
    workers: Vec<Worker<Side<P>>>,
    cells: Vec<WorkerCells>,
    umem: Umem,
    socket_config: SocketConfig,
    shared: SharedFrames,
    total: usize,
}

impl<K: Kernel> Forwarding<K> {
    /// Sets up on `kernel`: attaches the filters, installs the kernel's share of the rules,
    /// opens every socket and builds the workers. Nothing runs until [`Forwarding::run`].
    pub(crate) fn new(
        mut kernel: K,
        config: ForwardConfig,
        cpus: &CpuFacts,
        kernel_tx_metadata: bool,
    ) -> Result<Self> {
        let setup = crate::kernel::set_up(&mut kernel, &config, cpus, kernel_tx_metadata)?;
        let promiscuous = if config.promiscuous {
            kernel.hold_promiscuous()?
        } else {
            Vec::new()
        };
        let mut plan = WorkerPlan::new(&config, Arc::clone(&setup.rules), &setup.macs);
        plan.mtus = setup.mtus.clone();
        plan.ifindexes = setup.ifindexes.clone().into();
        plan.kernel_polices = setup.filters.iter().all(RunningFilter::polices);
        plan.csum_offload = setup.sockets.csum_offload;
        plan.tap = config
            .tap
            .as_deref()
            .map(|n| kernel.open_tap(n))
            .transpose()?;
        let bonds = bond_runtimes(&kernel, &setup, config.respond)?;
        let built = Self::workers(&kernel, &config, &setup, &plan, &bonds)?;
        let links = setup
            .filters
            .iter()
            .map(RunningFilter::link)
            .collect::<Result<Vec<_>>>()?;
        let (apply_sender, apply_requests) = std::sync::mpsc::sync_channel(apply::WAITING_APPLIES);
        let forwarding = Forwarding {
            slots: crate::rule_slots::RuleSlots::first(
                plan.rules.rules().iter().map(|r| r.name.as_str()),
            ),
            limiters: Arc::clone(&plan.limiters),
            live: Arc::clone(&plan.live),
            room: setup.room,
            generation: Generation::now(1),
            reasons: crate::reasons::LiveReasons::new(crate::reasons::Reasons::new(
                plan.rules
                    .kernel_share(setup.sockets.xdp_forward)
                    .passing_to_tap(config.tap.is_some()),
            )),
            apply_requests,
            apply_sender,
            umem: built.umem,
            socket_config: built.socket_config,
            pause: Arc::clone(&plan.pause),
            paused_since: None,
            handed_to: None,
            rules: plan.rules,
            filters: setup.filters,
            names: config.interfaces.clone(),
            sides: setup.sides,
            bonds,
            xdp_forward: setup.sockets.xdp_forward,
            pass_to_tap: config.tap.is_some(),
            port_macs: Arc::clone(&plan.port_macs),
            shared: built.shared,
            total: built.total,
            queues: setup.queues,
            workers: built.workers,
            cells: built.cells,
            replies: plan.replies,
            warnings: setup.warnings,
            carried_rules: None,
            device_tx_base: links.iter().map(|l| l.tx_packets).collect(),
            zero_copy: setup.sockets.zero_copy,
            links: links.iter().map(|l| (l.up, 0)).collect(),
            promiscuous,
            summary: false,
            _kernel: kernel,
        };
        forwarding.program_filters()?;
        forwarding.publish_bond_macs();
        Ok(forwarding)
    }

    /// The UMEM and a primed worker per queue, over the sockets each opens.
    fn workers(
        kernel: &K,
        config: &ForwardConfig,
        setup: &SetUp<K::Filter>,
        plan: &WorkerPlan,
        bonds: &[Option<BondSide<K>>],
    ) -> Result<Workers<K::Port>> {
        let mut socket_config = config.socket;
        socket_config.multi_buffer = setup.multi_buffer;
        socket_config.mode = if setup.sockets.zero_copy {
            Mode::ZeroCopy
        } else {
            Mode::Drv
        };
        let (umem, shared) = kernel.umem(setup.umem_frames, setup.sockets.csum_offload)?;
        let total = umem.config().frame_count as usize;
        let mut workers = Vec::with_capacity(setup.queues as usize);
        let mut cells = Vec::with_capacity(setup.queues as usize);
        for q in 0..setup.queues {
            let sides = queue_sides(kernel, q, setup, bonds, (&umem, &socket_config))?;
            let (worker, cell) = plan.primed_worker(q, &umem, sides, &shared)?;
            workers.push(worker);
            cells.push(cell);
        }
        Ok(Workers {
            workers,
            cells,
            umem,
            socket_config,
            shared,
            total,
        })
    }

    /// The rules as the filters run them.
    fn kernel_share(&self) -> crate::rules::KernelShare<'_> {
        self.rules
            .kernel_share(self.xdp_forward)
            .passing_to_tap(self.pass_to_tap)
    }

    /// A bond's MAC as its controller says (under fail_over_mac active it follows the active
    /// member), where the respond stage reads it.
    fn publish_bond_macs(&self) {
        for (side, bond) in self.bonds.iter().enumerate() {
            if let Some((_, runtime)) = bond {
                self.port_macs.set(side, runtime.bond_mac());
            }
        }
    }

    /// Tells every filter its settings for the bonds' current states.
    fn program_filters(&self) -> Result<()> {
        crate::filter_plan::program(&self.filters, &self.side_states(), self.xdp_forward)
    }

    /// The sides as the filters' settings depend on them.
    fn side_states(&self) -> Vec<crate::filter_plan::SideState> {
        self.sides
            .iter()
            .zip(&self.bonds)
            .map(|(range, bond)| crate::filter_plan::SideState {
                ifindexes: self.filters[range.clone()]
                    .iter()
                    .map(RunningFilter::ifindex)
                    .collect(),
                bond: bond
                    .as_ref()
                    .map(|(config, runtime)| crate::filter_plan::BondState {
                        mode: config.mode,
                        up: runtime.up().to_vec(),
                        active: runtime.active(),
                    }),
            })
            .collect()
    }

    /// Every interface a program of the forwarder runs on: each side's, a bond's members in
    /// its place, in order.
    fn devices(&self) -> Vec<String> {
        self.filters.iter().map(|f| f.name().to_string()).collect()
    }

    /// The attach mode of each side's program (a bond's first member's).
    fn modes(&self) -> Vec<String> {
        self.sides
            .iter()
            .map(|r| self.filters[r.start].mode().to_string())
            .collect()
    }

    /// What vanished (an interface, or xskit's program from one), if anything did: a bond's
    /// member says which bond it belonged to.
    fn lost(&self) -> Option<String> {
        self.filters.iter().enumerate().find_map(|(i, f)| {
            let what = f.lost()?;
            Some(match &self.bonds[self.side_of(i)] {
                Some((bond, _)) => format!(
                    "{what} (a member of bond {}: a bond that loses a member stops rather than \
                     carry on without it; start it again with the members that remain)",
                    bond.name
                ),
                None => what,
            })
        })
    }

    /// Looks at each interface's link (up, with carrier) and counts the changes.
    fn watch_links(&mut self) {
        for (filter, link) in self.filters.iter().zip(self.links.iter_mut()) {
            if let Ok(now) = filter.link() {
                if now.up != link.0 {
                    *link = (now.up, link.1 + 1);
                }
            }
        }
    }

    /// The side interface `i` (an index into the filters) belongs to.
    fn side_of(&self, i: usize) -> usize {
        self.sides.iter().position(|r| r.contains(&i)).unwrap_or(0)
    }

    /// A bond side's state, with its members' counters still zero.
    fn bond_count(&self, side: usize) -> Option<BondCount> {
        let (config, runtime) = self.bonds[side].as_ref()?;
        Some(runtime.count(config))
    }

    /// The counters now (the kernel's rule counters and socket statistics are read by system
    /// calls: call this about once a second, not per packet).
    fn counters(&self) -> Result<Counters> {
        self.collect_counters(true)
    }

    /// The counters that can still be read after a device vanished: the kernel's are left
    /// out where reading them fails.
    fn counters_lenient(&self) -> Counters {
        self.collect_counters(false).unwrap_or_default()
    }

    fn collect_counters(&self, strict: bool) -> Result<Counters> {
        let workers = self
            .cells
            .iter()
            .map(|w| worker_snapshot(w, strict))
            .collect::<Result<Vec<_>>>()?;
        let filters = (0..self.filters.len())
            .map(|i| self.filter_snapshot(i, strict))
            .collect::<Result<Vec<_>>>()?;
        let shape = crate::report::Shape {
            rules: self.kernel_share(),
            sides: &self.sides,
            umem_frames: self.total,
            shared_free: self.shared.len(),
            now_ns: xskit_os::monotonic_ns(),
        };
        Ok(crate::report::counters(
            self.blank_counters(),
            &shape,
            &workers,
            &filters,
        ))
    }

    /// The elements' counts of `filter`'s sets with timeouts or counters: every interval
    /// while they are few, else only for the summary, as a stopped forwarder reads them
    /// ([`LIVE_ELEMENTS`]).
    fn element_counts(
        &self,
        filter: &K::Filter,
        strict: bool,
    ) -> Result<Vec<Vec<(crate::sets::Element, u64)>>> {
        let sets = self.rules.sets();
        let elements: usize = sets.iter().map(|s| s.kernel_elements()).sum();
        if elements == 0 || (elements > LIVE_ELEMENTS && !self.summary) {
            return Ok(Vec::new());
        }
        lenient(strict, filter.element_counts(sets))
    }

    /// What filter `i` and its device counted.
    fn filter_snapshot(&self, i: usize, strict: bool) -> Result<FilterSnapshot> {
        let filter = &self.filters[i];
        let device_tx = lenient(strict, filter.link().map(|l| l.tx_packets))?;
        Ok(FilterSnapshot {
            device_tx: device_tx.saturating_sub(self.device_tx_base[i]),
            rules: lenient(strict, filter.rule_counters())?,
            police: lenient(strict, filter.police_counts())?,
            blocked: lenient(strict, filter.blocked_sources(xskit_os::monotonic_ns()))?,
            elements: self.element_counts(filter, strict)?,
            slots: Slot::ALL
                .iter()
                .map(|&slot| lenient(strict, filter.slot_counter(slot)))
                .collect::<Result<_>>()?,
        })
    }

    /// The counters' names, bond states, links and replies, every count at zero.
    fn blank_counters(&self) -> Counters {
        let rules = self.rules.rules();
        let rule = |name: &str, action| RuleCount {
            name: name.into(),
            action,
            ..RuleCount::default()
        };
        Counters {
            rules_generation: self.generation.number,
            rules_applied_timestamp_ms: self.generation.applied_timestamp_ms,
            rules: rules
                .iter()
                .map(|r| rule(&r.name, r.verdict().name()))
                .chain(std::iter::once(rule(
                    "default",
                    self.rules.default_verdict().name(),
                )))
                .collect(),
            ports: self
                .names
                .iter()
                .zip(self.modes())
                .enumerate()
                .map(|(side, (name, mode))| PortCount {
                    interface: name.clone(),
                    mode,
                    bond: self.bond_count(side),
                    link_up: self.links[self.sides[side].clone()].iter().any(|l| l.0),
                    link_changes: self.links[self.sides[side].clone()]
                        .iter()
                        .map(|l| l.1)
                        .sum(),
                    ..PortCount::default()
                })
                .collect(),
            unclassifiable: rule("unclassifiable", self.rules.unclassifiable_verdict().name()),
            arp_replies: self.replies.arp.load(Ordering::Relaxed),
            echo_replies: self.replies.echo.load(Ordering::Relaxed),
            respond_refused: self.replies.refused.load(Ordering::Relaxed),
            pool: PoolStats::default(),
            frames: LiveFrames::default(),
            blocked_sources: Vec::new(),
            blocked_now: 0,
            sets: Vec::new(),
        }
    }

    /// Waits up to `timeout` for the bonds' link changes and hands them to the workers (a
    /// plain sleep without bonds).
    fn watch_bonds(&mut self, timeout: Duration) -> Result<()> {
        if self.paused_since.is_some() {
            // Paused for a successor, which has the controllers' state as it was: they stop
            // here so that what the partners hear goes on from that.
            std::thread::sleep(timeout);
            return Ok(());
        }
        let mut wait = timeout;
        let (mut any, mut changed) = (false, false);
        for (side, bond) in self.bonds.iter_mut().enumerate() {
            let Some((_, runtime)) = bond else {
                continue;
            };
            any = true;
            changed |= runtime.poll(wait)?;
            changed |= runtime.lacp_poll();
            wait = Duration::ZERO;
            if runtime.arp_due() {
                let alive = self.filters[self.sides[side].clone()]
                    .iter()
                    .map(RunningFilter::arp_alive)
                    .collect::<Result<Vec<u64>>>()?;
                changed |= runtime.arp_check(&alive);
            }
        }
        if !any {
            std::thread::sleep(timeout);
        }
        if changed {
            self.program_filters()?;
            self.publish_bond_macs();
        }
        Ok(())
    }

    /// Forwards until `stop` is set, calling `on_tick` with the counters every `interval`;
    /// then stops redirecting, drains the rings, and reports. Everything is detached when it
    /// returns, whether it succeeds or not.
    pub(crate) fn run(
        mut self,
        stop: &AtomicBool,
        interval: Duration,
        mut on_tick: impl FnMut(&Counters),
    ) -> Result<Report> {
        let start = Instant::now();
        let (worker_stop, drain, failed) = (
            AtomicBool::new(false),
            AtomicBool::new(false),
            AtomicBool::new(false),
        );
        let workers = std::mem::take(&mut self.workers);
        let count = workers.len();
        let mut watched = crate::supervise::Ended::default();
        let ends: Vec<std::thread::Result<Result<WorkerEnd>>> = std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .map(|w| {
                    let (worker_stop, drain, failed) = (&worker_stop, &drain, &failed);
                    s.spawn(move || w.run(worker_stop, drain, failed))
                })
                .collect();
            watched = crate::supervise::supervise(
                &mut self,
                &crate::worker::MonotonicClock,
                stop,
                &failed,
                interval,
                &mut on_tick,
            );
            worker_stop.store(true, Ordering::Relaxed);
            // Handed over, the programs are the successor's to run: they go on redirecting.
            if self.handed_to.is_none() {
                self.stop_redirecting();
                std::thread::sleep(Duration::from_millis(5));
            }
            drain.store(true, Ordering::Relaxed);
            handles.into_iter().map(|h| h.join()).collect()
        });
        let (tick_error, mut lost) = (watched.error, watched.lost);
        // A worker's error after a device vanished says less than what vanished.
        if lost.is_none() && failed.load(Ordering::Relaxed) {
            lost = self.lost();
        }
        let seconds = start.elapsed().as_secs_f64();
        let mut worker_ends = Vec::with_capacity(ends.len());
        for end in ends {
            worker_ends.push(end.unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        if let Some(e) = tick_error {
            return Err(e);
        }
        if let Some(pid) = self.handed_to {
            return self.handed_report(seconds, count, pid);
        }
        // Every worker's pool has given its cache back by now.
        let (frames, worker_error) = account_frames(self.total, self.shared.len(), worker_ends)?;
        // The counters of a vanished device can no longer be read: report what can be.
        self.summary = true;
        let counters = match self.counters() {
            Ok(c) => c,
            Err(_) if lost.is_some() || worker_error.is_some() => self.counters_lenient(),
            Err(e) => return Err(e),
        };
        let fault = lost.or_else(|| worker_error.map(|e| e.to_string()));
        Ok(Report {
            duration_s: seconds,
            workers: count,
            zero_copy: self.zero_copy,
            counters,
            frames,
            fault,
            handed_to: None,
        })
    }

    /// No more redirects: what arrives from now on for user space is dropped in XDP and
    /// counted (`xdp_no_socket_dropped`), never handed to the host's stack, so the rings
    /// settle and the workers can account for every frame.
    fn stop_redirecting(&self) {
        for filter in &self.filters {
            filter.stop_redirecting(self.queues);
        }
    }
}

/// The supervisor's view of the forwarder: its inherent methods, over the kernel.
impl<K: Kernel> crate::supervise::Supervised for Forwarding<K> {
    fn watch_bonds(&mut self, timeout: Duration) -> Result<()> {
        Forwarding::watch_bonds(self, timeout)?;
        self.answer_applies();
        Ok(())
    }
    fn lost(&self) -> Option<String> {
        Forwarding::lost(self)
    }
    fn watch_links(&mut self) {
        Forwarding::watch_links(self);
    }
    fn counters(&self) -> Result<Counters> {
        Forwarding::counters(self)
    }
    fn handed_over(&self) -> bool {
        self.handed_to.is_some()
    }
}

/// Where the UMEM's `total` frames are once the workers have ended (`pool` of them back in
/// the shared pool), and the first error a worker stopped on; the first error a worker
/// returned instead of its frames is the result.
fn account_frames(
    total: usize,
    pool: usize,
    ends: Vec<Result<WorkerEnd>>,
) -> Result<(FrameReport, Option<Error>)> {
    let mut frames = FrameReport {
        total: total as u64,
        pool: pool as u64,
        ..FrameReport::default()
    };
    let mut worker_error = None;
    let mut ledger_disagrees = 0i64;
    for end in ends {
        let end = end?;
        if let Some(e) = end.error {
            worker_error.get_or_insert(e);
        }
        let in_rings = end.rings.fill + end.rings.rx + end.rings.tx;
        frames.fill += end.rings.fill as u64;
        frames.rx += end.rings.rx as u64;
        frames.tx += end.rings.tx as u64;
        match end.ledger_in_kernel.checked_sub(in_rings) {
            Some(held) => frames.kernel_held += held as u64,
            None => ledger_disagrees += (in_rings - end.ledger_in_kernel) as i64,
        }
    }
    frames.unaccounted = frames.total as i64
        - (frames.pool + frames.fill + frames.rx + frames.tx + frames.kernel_held) as i64
        + ledger_disagrees;
    Ok((frames, worker_error))
}

#[cfg(test)]
pub(crate) mod tests;
