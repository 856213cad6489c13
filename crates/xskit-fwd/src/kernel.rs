//! The forwarder's set-up over a narrow seam: what it asks of the kernel (the interfaces'
//! facts, filters attached, the kernel's share of the rules installed) is the [`Kernel`]
//! trait, and every decision between those calls (the refusals, the sides, multi-buffer,
//! the queues, zero-copy, the kernel/user rule split, the UMEM's size, the warnings) is
//! [`set_up`], which the tests run on a fake kernel that records what it was asked.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use xskit::{AttachedMode, Interface, Mode, Socket, SocketConfig, Umem, UmemConfig};
use xskit_os::tap::TapFd;
use xskit_pipeline::{SharedFrames, XskPort};

use crate::abi::Slot;
use crate::bond_runtime::{BondIo, RealBondIo};
use crate::bonded::{BondConfig, SocketPort};
use crate::config::{ChecksumMode, ForwardConfig};
use crate::config_check::CpuFacts;
use crate::error::{Error, Result};
use crate::filter::SetRoom;
use crate::filter::{Action, BlockedSource, KernelRule, PoliceCount, RuleCounter, XdpFilter};
use crate::filter_plan::FilterControl;
use crate::plan::{LinkFacts, LinkOffer, SocketAsk, SocketPlan};
use crate::rules::RuleSet;
use crate::sets::{Element, PortSet, PrefixSet};
use crate::worker::TapPath;

/// The kernel's share of the rules, as every filter gets it.
#[derive(Clone, Debug)]
pub(crate) struct KernelRules {
    pub(crate) rules: Vec<KernelRule>,
    pub(crate) default: Action,
    pub(crate) unclassifiable: Action,
    /// The sets the rules name.
    pub(crate) sets: Vec<Arc<PrefixSet>>,
    /// The port sets they name.
    pub(crate) port_sets: Vec<Arc<PortSet>>,
    /// The rate-limit rules' limits, by rule.
    pub(crate) limits: Vec<Option<crate::bucket::Limit>>,
    /// Their bit vectors, past LINEAR_RULES rules.
    pub(crate) vectors: Option<Arc<crate::rules::RuleVectors>>,
    /// The rules whose decisions the filter tells user space (without rules, the default's,
    /// whose notes spare the workers reading the packet).
    pub(crate) told: Option<crate::told::RulesId>,
}

impl KernelRules {
    /// The kernel's share of the rules as `share` splits them, rule `i`'s state in
    /// `slots[i]` (each in the slot of its index without).
    pub(crate) fn of(share: &crate::rules::KernelShare<'_>, slots: Option<&[u16]>) -> Result<Self> {
        let (mut rules, default) = share.kernel_rules()?;
        for (rule, &slot) in rules.iter_mut().zip(slots.unwrap_or_default()) {
            rule.slot = slot;
        }
        let set = share.rule_set();
        Ok(KernelRules {
            rules,
            default,
            unclassifiable: share.kernel_unclassifiable(),
            sets: set.sets().to_vec(),
            port_sets: set.port_sets().to_vec(),
            limits: share.kernel_limits(),
            vectors: set.vectors().cloned(),
            told: Some(set.told_id()),
        })
    }
}

/// A device's link as the running forwarder watches it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkNow {
    /// Administratively up, with carrier.
    pub(crate) up: bool,
    /// Frames the device has transmitted since it was created.
    pub(crate) tx_packets: u64,
}

/// What the running forwarder asks of one interface's filter and its device.
pub(crate) trait RunningFilter: FilterControl {
    /// The interface's name.
    fn name(&self) -> &str;
    /// The interface's index.
    fn ifindex(&self) -> u32;
    /// The mode the program is attached in.
    fn mode(&self) -> AttachedMode;
    /// The interface deleted or moved, or the program detached from outside, in words.
    fn lost(&self) -> Option<String>;
    /// The interface's link now.
    fn link(&self) -> Result<LinkNow>;
    /// The ARP monitor's targets, whose answers the filter counts.
    fn set_arp_targets(&self, targets: &[Ipv4Addr]) -> Result<()>;
    /// ARP packets from the monitored targets so far (a sign of life).
    fn arp_alive(&self) -> Result<u64>;
    /// Packets and bytes per kernel rule, then the default action's.
    fn rule_counters(&self) -> Result<Vec<RuleCounter>>;
    /// What each rule's rate limit did, by rule.
    fn police_counts(&self) -> Result<Vec<PoliceCount>>;
    /// The sources blocked now (CLOCK_MONOTONIC `now_ns`), most dropped first; blocks that
    /// ran out are cleared.
    fn blocked_sources(&self, now_ns: u64) -> Result<Vec<BlockedSource>>;
    /// For each of `sets`, its elements with the packets counted on each; none for a set
    /// without timeouts or counters.
    fn element_counts(&self, sets: &[Arc<PrefixSet>]) -> Result<Vec<Vec<(Element, u64)>>>;
    /// Whether the filter polices the rate-limit rules (then user space forwards what it
    /// sends up within the rate without policing it again).
    fn polices(&self) -> bool;
    /// The counter of `slot`.
    fn slot_counter(&self, slot: Slot) -> Result<RuleCounter>;
    /// Queues `0..queues` are no longer redirected to sockets.
    fn stop_redirecting(&self, queues: u32);
    /// A new descriptor of the link that attaches the filter, to hand to a successor.
    fn link_fd(&self) -> Result<std::os::fd::OwnedFd>;
    /// What the filter carries to a successor's ([`XdpFilter::carried`]); `None` where it
    /// has nothing to carry.
    fn carried(&self) -> Result<Option<(crate::carry::CarriedFilter, Vec<std::os::fd::OwnedFd>)>>;
    /// Clears the state `slots` kept for earlier rules ([`XdpFilter::reset_slots`]).
    fn reset_slots(&self, slots: &[u16]) -> Result<()>;
    /// Writes the sets in place ([`XdpFilter::set_sets`]).
    fn set_sets(&self, sets: &[Arc<PrefixSet>]) -> Result<()>;
}

/// What the forwarder asks of the kernel, to set up and while it runs.
pub(crate) trait Kernel {
    /// A filter attached to one interface.
    type Filter: RunningFilter;
    /// A socket on one interface's queue, as a worker's port.
    type Port: SocketPort + Send;
    /// What a bond's controller watches and sends through.
    type BondIo: BondIo;
    /// The facts of the interfaces `names`, in order.
    fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>>;
    /// A filter on every interface (looked up by [`Kernel::links`]), in the same order, with
    /// room for `sets`.
    fn attach(
        &mut self,
        mode: Mode,
        multi_buffer: bool,
        sets: SetRoom,
    ) -> Result<Vec<Self::Filter>>;
    /// What each filter's link offers the sockets.
    fn offers(&self, filters: &[Self::Filter]) -> Vec<LinkOffer>;
    /// The UMEM of `frames` frames (with transmit metadata room for `csum_offload`) and its
    /// free frames, in a pool with room for every frame.
    fn umem(&self, frames: u32, csum_offload: bool) -> Result<(Umem, SharedFrames)> {
        let umem = Umem::new(umem_layout(frames, csum_offload))?;
        let free = umem.take_frames().ok_or(Error::FramesTaken)?;
        Ok((umem, SharedFrames::new(free)))
    }
    /// Installs the kernel's share of the rules in `filter`.
    fn install(&self, filter: &Self::Filter, rules: &KernelRules) -> Result<()>;
    /// Opens `filter`'s interface's socket on `queue`, on `umem`.
    fn open_port(
        &self,
        filter: &Self::Filter,
        queue: u32,
        umem: &Umem,
        config: &SocketConfig,
    ) -> Result<Self::Port>;
    /// What the controller of `config`'s bond needs, over its members: the interfaces
    /// `members` of those [`Kernel::links`] looked up.
    fn open_bond(&self, config: &BondConfig, members: Range<usize>) -> Result<Self::BondIo>;
    /// Puts every interface in promiscuous mode for as long as the kernel value lives;
    /// returns their names.
    fn hold_promiscuous(&mut self) -> Result<Vec<String>>;
    /// The TAP device `name`, created if need be, as the host's path.
    fn open_tap(&self, name: &str) -> Result<Arc<TapPath>>;
}

/// The UMEM layout of `frames` frames, with transmit metadata room when checksums are
/// offloaded.
pub(crate) fn umem_layout(frames: u32, csum_offload: bool) -> UmemConfig {
    let tx_metadata_len = if csum_offload {
        xskit::TX_METADATA_LEN
    } else {
        0
    };
    UmemConfig::default()
        .frame_count(frames)
        .tx_metadata_len(tx_metadata_len)
}

/// Everything set-up decided, and the filters it attached.
pub(crate) struct SetUp<F> {
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) filters: Vec<F>,
    /// Which filters (and sockets) belong to each side, and each side's bond.
    pub(crate) sides: Vec<Range<usize>>,
    pub(crate) bonds: Vec<Option<BondConfig>>,
    /// Per side: its MAC address (a bond's first member's) and MTU.
    pub(crate) macs: Vec<[u8; 6]>,
    pub(crate) mtus: Vec<usize>,
    /// Per side: its interface's index (a bond's first member's).
    pub(crate) ifindexes: Vec<u32>,
    pub(crate) multi_buffer: bool,
    pub(crate) queues: u32,
    pub(crate) sockets: SocketPlan,
    pub(crate) umem_frames: u32,
    pub(crate) warnings: Vec<String>,
    /// The room the filters were attached with: changed rules must fit it.
    pub(crate) room: SetRoom,
}

/// The set-up's decisions, with the kernel asked what each one needs.
pub(crate) fn set_up<K: Kernel>(
    kernel: &mut K,
    config: &ForwardConfig,
    cpus: &CpuFacts,
    kernel_tx_metadata: bool,
) -> Result<SetUp<K::Filter>> {
    let rules = crate::config_check::check_config(config, cpus)?;
    let mut warnings = Vec::new();
    let (names, sides, bonds) = crate::plan::sides(config);
    let links = kernel.links(&names)?;
    let named: Vec<(String, u32)> = links.iter().map(|l| (l.name.clone(), l.mtu)).collect();
    crate::plan::check_member_mtus(&sides, &bonds, &named)?;
    crate::plan::check_not_one_pair(&sides, &links)?;
    let macs = sides
        .iter()
        .map(|r| {
            let first = &links[r.start];
            first.mac.ok_or_else(|| Error::NotEthernet {
                iface: first.name.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mtus: Vec<usize> = sides.iter().map(|r| links[r.start].mtu as usize).collect();
    let ifindexes: Vec<u32> = sides.iter().map(|r| links[r.start].ifindex).collect();
    let room = SetRoom {
        sources: if rules.limits_sources() {
            rules.source_table() as usize
        } else {
            0
        },
        blocked: if rules.blocks_sources() {
            rules.block_table() as usize
        } else {
            0
        },
        vectors: room_to_grow(rules.vectors().map_or(0, |v| v.len())),
        rule_prefixes: room_to_grow(rules.vectors().map_or(0, |v| v.trie_entries())),
        ..SetRoom::for_sets(rules.sets(), rules.port_sets().len()).to_grow()
    };
    let (filters, multi_buffer, offers) = attach(kernel, config.mode, &mtus, room)?;
    let queues = crate::plan::queues_to_serve(config.queues, &offers, &mut warnings)?;
    let ask = SocketAsk {
        mode: config.mode,
        multi_buffer,
        checksum: config.checksum,
        kernel_tx_metadata: config.checksum == ChecksumMode::Offload && kernel_tx_metadata,
        xdp_forward: config.xdp_forward,
    };
    let sockets = crate::plan::socket_plan(&ask, &offers)?;
    warnings.extend(sockets.notes.iter().cloned());
    let in_kernel = rules
        .kernel_share(sockets.xdp_forward)
        .passing_to_tap(config.tap.is_some());
    let share = KernelRules::of(&in_kernel, None)?;
    for (filter, offer) in filters.iter().zip(&offers) {
        kernel.install(filter, &share)?;
        if let Some(why) = &offer.fallback {
            warnings.push(format!("{}: {why}", offer.name));
        }
    }
    let umem_frames = crate::plan::umem_frames(config, names.len() as u32, queues)?;
    Ok(SetUp {
        rules: Arc::new(rules),
        filters,
        sides,
        bonds,
        macs,
        mtus,
        ifindexes,
        multi_buffer,
        queues,
        sockets,
        umem_frames,
        warnings,
        room,
    })
}

/// Rule vectors (or IPv6 rule prefixes) a filter has room for at least: rules changed while
/// the forwarder runs (an apply) must fit the room it was attached with.
const RULE_ROOM: usize = 1024;

/// Room for `need`, and for rules changed while running to need twice as much.
fn room_to_grow(need: usize) -> usize {
    (2 * need).max(RULE_ROOM)
}

/// Attaches the filters. Packets larger than a frame need multi-buffer sockets and the
/// xdp.frags program ([`crate::plan::multi_buffer`]); in native mode on a small MTU a
/// single-buffer program keeps them away (veth then segments at the sender), but where auto
/// fell back to SKB mode, super-packets arrive whole: attach again, multi-buffer.
/// Returns the filters, whether they are multi-buffer, and what their links offer.
fn attach<K: Kernel>(
    kernel: &mut K,
    mode: Mode,
    mtus: &[usize],
    room: SetRoom,
) -> Result<(Vec<K::Filter>, bool, Vec<LinkOffer>)> {
    let multi_buffer = crate::plan::multi_buffer(mtus, mode);
    let attached = kernel.attach(mode, multi_buffer, room)?;
    let offers = kernel.offers(&attached);
    if !multi_buffer && offers.iter().any(|o| o.attached == AttachedMode::Skb) {
        drop(attached);
        let again = kernel.attach(mode, true, room)?;
        let offers = kernel.offers(&again);
        return Ok((again, true, offers));
    }
    Ok((attached, multi_buffer, offers))
}

/// Another descriptor of what `fd` refers to.
fn dup(fd: &std::os::fd::OwnedFd) -> Result<std::os::fd::OwnedFd> {
    fd.try_clone().map_err(|e| Error::TakeOver {
        reason: format!("duplicating a descriptor handed over: {e}"),
    })
}

/// The kernel itself: interfaces looked up by name, the forwarder's XDP filter on each.
#[derive(Default)]
pub(crate) struct RealKernel {
    ifaces: Vec<Interface>,
    /// What a forwarder handed over, when this one takes over.
    pub(crate) takeover: Option<crate::handover::Takeover>,
    /// Where programs an earlier forwarder left are pinned ([`ForwardConfig::pins`]).
    pub(crate) pins: Option<std::path::PathBuf>,
    /// The interfaces whose kept programs were taken over.
    pub(crate) kept: Vec<String>,
    /// Every interface held in promiscuous mode while the kernel value lives.
    promiscuous: Vec<xskit::Promiscuous>,
}

impl Kernel for RealKernel {
    type Filter = XdpFilter;
    type Port = XskPort;
    type BondIo = RealBondIo;

    fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>> {
        self.ifaces = names
            .iter()
            .map(|name| Interface::by_name(name))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let infos = self
            .ifaces
            .iter()
            .map(Interface::link_info)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(infos
            .iter()
            .map(|i| LinkFacts {
                name: i.name.clone(),
                mtu: i.mtu,
                mac: i.mac,
                ifindex: i.ifindex,
                veth_peer: i
                    .link
                    .filter(|_| i.kind.as_deref() == Some("veth") && !i.link_elsewhere),
            })
            .collect())
    }

    /// In ifindex order whatever order they were given in: two forwarders started at once on
    /// the same interfaces then contend for the same first one, and exactly one of them gets
    /// both (the kernel refuses a second XDP link).
    fn attach(&mut self, mode: Mode, multi_buffer: bool, sets: SetRoom) -> Result<Vec<XdpFilter>> {
        let n = self.ifaces.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| self.ifaces[i].index());
        let mut attached: Vec<Option<XdpFilter>> = (0..n).map(|_| None).collect();
        for &i in &order {
            let iface = &self.ifaces[i];
            let kept = match (&self.takeover, &self.pins) {
                (None, Some(dir)) => xskit::kept_link(&dir.join(iface.name()), iface)?,
                _ => None,
            };
            attached[i] = Some(match (&self.takeover, kept) {
                (Some(t), _) => XdpFilter::take_over_with_sets(
                    iface,
                    dup(&t.inherited.links[i])?,
                    multi_buffer,
                    sets,
                )?,
                (None, Some(link)) => {
                    if !self.kept.contains(&iface.name().to_string()) {
                        self.kept.push(iface.name().to_string());
                    }
                    XdpFilter::take_over_with_sets(iface, link, multi_buffer, sets)?
                }
                (None, None) => XdpFilter::attach_with_sets(iface, mode, multi_buffer, sets)?,
            });
        }
        Ok(attached.into_iter().flatten().collect())
    }

    fn offers(&self, filters: &[XdpFilter]) -> Vec<LinkOffer> {
        filters
            .iter()
            .map(|f| {
                let p = f.program();
                LinkOffer {
                    name: p.interface().name().to_string(),
                    attached: p.mode(),
                    features: p.interface().features().ok(),
                    rx_queues: p.rx_queues(),
                    fallback: p.fallback_reason().map(str::to_string),
                    zero_copy_caveat: p
                        .interface()
                        .driver()
                        .and_then(|d| d.zero_copy_transmit_caveat()),
                }
            })
            .collect()
    }

    /// Shareable (a memfd), so that it can be handed to a successor; the one handed over
    /// when taking over.
    fn umem(&self, frames: u32, csum_offload: bool) -> Result<(Umem, SharedFrames)> {
        let Some(takeover) = &self.takeover else {
            let umem = Umem::new(umem_layout(frames, csum_offload).shareable(true))?;
            let free = umem.take_frames().ok_or(Error::FramesTaken)?;
            return Ok((umem, SharedFrames::new(free)));
        };
        let handed = &takeover.inherited;
        let u = handed.state.umem;
        let layout = umem_layout(frames, csum_offload);
        if (layout.frame_count, layout.tx_metadata_len) != (u.frame_count, u.tx_metadata_len) {
            return Err(Error::TakeOver {
                reason: format!(
                    "its UMEM has {} frames with {} bytes of transmit metadata, this forwarder \
                     would have {} with {}: give the same --frames, --queues and --checksum",
                    u.frame_count, u.tx_metadata_len, layout.frame_count, layout.tx_metadata_len
                ),
            });
        }
        // Everything else is made: the predecessor pauses now.
        let paused = takeover.paused()?;
        let layout = UmemConfig::default()
            .frame_size(u.frame_size)
            .frame_count(u.frame_count)
            .tx_metadata_len(u.tx_metadata_len)
            .shareable(true);
        let umem = Umem::adopt(dup(&handed.umem)?, layout)?;
        let free = umem
            .take_frames_at(&paused.free)
            .ok_or_else(|| Error::TakeOver {
                reason: "the free frames handed over are not distinct frames of the UMEM".into(),
            })?;
        Ok((
            umem,
            SharedFrames::with_capacity(free, u.frame_count as usize),
        ))
    }

    fn install(&self, filter: &XdpFilter, rules: &KernelRules) -> Result<()> {
        filter.set_sets(&rules.sets)?;
        filter.set_port_sets(&rules.port_sets)?;
        filter.set_limits_in_slots(&rules.rules, &rules.limits)?;
        filter.tell_as(rules.told);
        filter.set_rules_in_slots(&rules.rules, rules.vectors.as_deref(), rules.default)?;
        filter.set_unclassifiable(rules.unclassifiable)
    }

    fn open_port(
        &self,
        filter: &XdpFilter,
        queue: u32,
        umem: &Umem,
        config: &SocketConfig,
    ) -> Result<XskPort> {
        let program = Arc::clone(filter.program());
        let Some(takeover) = &self.takeover else {
            return Ok(XskPort::open(umem, program, queue, config)?);
        };
        let handed = &takeover.inherited;
        let iface = program.interface().clone();
        let found = handed
            .state
            .sockets
            .iter()
            .position(|s| s.iface == iface.name() && s.queue == queue);
        let Some(i) = found else {
            return Err(Error::TakeOver {
                reason: format!(
                    "no socket on queue {queue} of {} was handed over",
                    iface.name()
                ),
            });
        };
        let s = &handed.state.sockets[i];
        let [fill, completion, rx, tx] = s.rings;
        let config = config
            .fill_size(fill)
            .completion_size(completion)
            .rx_size(rx)
            .tx_size(tx);
        let socket = Socket::adopt(dup(&handed.sockets[i])?, umem, &iface, queue, &config)?;
        Ok(XskPort::adopt(
            socket,
            program,
            takeover.paused()?.held[i],
            &config,
        )?)
    }

    fn open_bond(&self, config: &BondConfig, members: Range<usize>) -> Result<RealBondIo> {
        RealBondIo::open(config, &self.ifaces[members])
    }

    fn hold_promiscuous(&mut self) -> Result<Vec<String>> {
        self.promiscuous = self
            .ifaces
            .iter()
            .map(Interface::promiscuous)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(self.ifaces.iter().map(|i| i.name().to_string()).collect())
    }

    fn open_tap(&self, name: &str) -> Result<Arc<TapPath>> {
        let fd = TapFd::open(name).map_err(|e| Error::Tap {
            name: name.to_string(),
            reason: format!(
                "{e}: the name must be a free interface name of at most 15 characters, and \
                 creating one needs CAP_NET_ADMIN"
            ),
        })?;
        let mac = Interface::by_name(fd.name())?
            .link_info()?
            .mac
            .ok_or_else(|| Error::Tap {
                name: name.to_string(),
                reason: "it has no MAC address".into(),
            })?;
        Ok(Arc::new(TapPath {
            link: Box::new(fd),
            mac,
            learnt: Mutex::new(HashMap::new()),
        }))
    }
}

impl RunningFilter for XdpFilter {
    fn name(&self) -> &str {
        self.program().interface().name()
    }

    fn reset_slots(&self, slots: &[u16]) -> Result<()> {
        XdpFilter::reset_slots(self, slots)
    }

    fn set_sets(&self, sets: &[Arc<PrefixSet>]) -> Result<()> {
        XdpFilter::set_sets(self, sets)
    }

    fn ifindex(&self) -> u32 {
        self.program().interface().index()
    }

    fn mode(&self) -> AttachedMode {
        self.program().mode()
    }

    fn lost(&self) -> Option<String> {
        self.program().lost()
    }

    fn link(&self) -> Result<LinkNow> {
        let info = self.program().interface().link_info()?;
        Ok(LinkNow {
            up: info.admin_up && info.carrier,
            tx_packets: info.stats.tx_packets,
        })
    }

    fn set_arp_targets(&self, targets: &[Ipv4Addr]) -> Result<()> {
        XdpFilter::set_arp_targets(self, targets)
    }

    fn arp_alive(&self) -> Result<u64> {
        Ok(self.arp_alive_counter()?.packets)
    }

    fn rule_counters(&self) -> Result<Vec<RuleCounter>> {
        XdpFilter::rule_counters(self)
    }

    fn police_counts(&self) -> Result<Vec<PoliceCount>> {
        self.police_counters()
    }

    fn blocked_sources(&self, now_ns: u64) -> Result<Vec<BlockedSource>> {
        XdpFilter::blocked_sources(self, now_ns)
    }
    fn element_counts(&self, sets: &[Arc<PrefixSet>]) -> Result<Vec<Vec<(Element, u64)>>> {
        XdpFilter::element_counts(self, sets)
    }

    fn polices(&self) -> bool {
        true
    }

    fn slot_counter(&self, slot: Slot) -> Result<RuleCounter> {
        XdpFilter::slot_counter(self, slot)
    }

    fn carried(&self) -> Result<Option<(crate::carry::CarriedFilter, Vec<std::os::fd::OwnedFd>)>> {
        XdpFilter::carried(self).map(Some)
    }

    fn link_fd(&self) -> Result<std::os::fd::OwnedFd> {
        XdpFilter::link_fd(self)
    }

    fn stop_redirecting(&self, queues: u32) {
        for q in 0..queues {
            // A queue never registered, or a device already gone, has nothing to stop.
            let _ = self.program().unregister(q);
        }
    }
}

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests {
    use xskit::netlink::xdp_act;
    use xskit::UmemConfig;
    use xskit_pipeline::WirePort;

    use super::fake::{Fake, Recorded};
    use super::*;
    use crate::bonded::Side;

    /// The set-up of a plain pair a0, b0 on `kernel`.
    fn set_up_pair(kernel: &mut Fake) -> SetUp<Recorded> {
        set_up(kernel, &ForwardConfig::new(["a0", "b0"]), &cpus(), true).unwrap()
    }

    fn cpus() -> CpuFacts {
        CpuFacts {
            online: 2,
            allowed: vec![0, 1],
        }
    }

    #[test]
    fn a_plain_pair_is_attached_once_and_given_the_kernels_rules() {
        let mut kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        let rules =
            RuleSet::from_toml("[[rule]]\nprotocol = \"udp\"\ndst_port = 53\naction = \"drop\"\n")
                .unwrap();
        let config = ForwardConfig::new(["a0", "b0"]).rules(rules);
        let setup = set_up(&mut kernel, &config, &cpus(), true).unwrap();
        assert_eq!(
            kernel.calls(),
            [
                "links a0,b0",
                "attach Auto multi-buffer false",
                "install 1 rules in a0, default Redirect",
                "install 1 rules in b0, default Redirect"
            ]
        );
        assert_eq!((setup.queues, setup.multi_buffer), (1, false));
        assert_eq!(setup.macs, [[2, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 1]]);
        assert!(!setup.sockets.zero_copy);
        let (fill, tx) = (config.socket.fill_size, config.socket.tx_size);
        assert_eq!(
            setup.umem_frames,
            2 * (fill + tx),
            "two sockets' fill and tx rings"
        );
    }

    #[test]
    fn auto_falling_back_to_skb_attaches_again_multi_buffer_and_says_why() {
        let mut kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        kernel.auto_lands_in = AttachedMode::Skb;
        let setup = set_up_pair(&mut kernel);
        let calls = kernel.calls();
        assert_eq!(
            calls[1..3],
            [
                "attach Auto multi-buffer false",
                "attach Auto multi-buffer true"
            ]
        );
        assert!(setup.multi_buffer);
        assert!(
            setup.warnings.iter().any(|w| w == "a0: native XDP refused"),
            "{:?}",
            setup.warnings
        );
    }

    #[test]
    fn refusals_come_before_the_kernel_is_touched_where_they_can() {
        let mut kernel = Fake::new(&[("a0", 1500)]);
        let nowhere = set_up(&mut kernel, &ForwardConfig::new(["a0"]), &cpus(), true);
        assert!(matches!(nowhere, Err(Error::NowhereToForward { .. })));
        assert!(kernel.calls().is_empty());
        let bond = BondConfig::new("bond0", ["m0", "m1"], xskit_bond::BondMode::ActiveBackup);
        let config = ForwardConfig::new(["bond0", "c0"]).bonds(vec![bond]);
        let mut kernel = Fake::new(&[("m0", 1500), ("m1", 9000), ("c0", 1500)]);
        let mtus = set_up(&mut kernel, &config, &cpus(), true);
        assert!(matches!(mtus, Err(Error::MemberMtu { .. })));
        assert_eq!(
            kernel.calls(),
            ["links m0,m1,c0"],
            "refused before attaching"
        );
    }

    #[test]
    fn zero_copy_on_links_without_it_is_refused_before_any_rule_is_installed() {
        let mut kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        let config = ForwardConfig::new(["a0", "b0"]).mode(Mode::ZeroCopy);
        let refused = set_up(&mut kernel, &config, &cpus(), true);
        assert!(refused.is_err());
        assert!(!kernel.calls().iter().any(|c| c.starts_with("install")));
        // Where every link offers it, auto chooses it and forwarding in XDP gives way.
        let mut kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        kernel.features.xdp_features |= xdp_act::XSK_ZEROCOPY;
        kernel.features.zc_max_segs = 1;
        let config = ForwardConfig::new(["a0", "b0"]).xdp_forward(true);
        let setup = set_up(&mut kernel, &config, &cpus(), true).unwrap();
        assert!(setup.sockets.zero_copy && !setup.sockets.xdp_forward);
        assert!(
            kernel
                .calls()
                .iter()
                .any(|c| c.ends_with("default Redirect")),
            "the filters send forwarded packets to user space: {:?}",
            kernel.calls()
        );
    }

    #[test]
    fn an_interface_that_is_not_there_is_named() {
        let mut kernel = Fake::new(&[("a0", 1500)]);
        let missing = set_up(
            &mut kernel,
            &ForwardConfig::new(["a0", "b9"]),
            &cpus(),
            true,
        );
        let Err(e) = missing else {
            panic!("b9 is not there");
        };
        assert!(e.to_string().contains("b9"), "{e}");
    }

    /// Queue `q`'s sides as the forwarder gathers them, on the fake's ports.
    fn sides_of_queue(
        kernel: &Fake,
        setup: &SetUp<Recorded>,
        controls: &[Option<Arc<crate::bonded::BondControl>>],
        q: u32,
    ) -> Result<crate::bonded::QueueSides<WirePort>> {
        let umem = Umem::new(UmemConfig::default().frame_count(64)).unwrap();
        let bonds: Vec<_> = setup
            .bonds
            .iter()
            .zip(controls)
            .map(|(b, c)| b.as_ref().zip(c.as_ref()))
            .collect();
        crate::bonded::gather_sides(&setup.sides, &bonds, |i| {
            kernel.open_port(&setup.filters[i], q, &umem, &SocketConfig::default())
        })
    }

    #[test]
    fn each_queue_opens_a_socket_per_interface_and_a_bonds_members_make_one_side() {
        let mut kernel = Fake::new(&[("a0", 1500), ("m0", 1500), ("m1", 1500)]);
        let bond = BondConfig::new("bond0", ["m0", "m1"], xskit_bond::BondMode::ActiveBackup);
        let config = ForwardConfig::new(["a0", "bond0"]).bonds(vec![bond]);
        let setup = set_up(&mut kernel, &config, &cpus(), true).unwrap();
        let controls = [None, Some(Arc::new(crate::bonded::BondControl::new(2)))];
        let (sides, stats) = sides_of_queue(&kernel, &setup, &controls, 0).unwrap();
        assert!(matches!(sides[..], [Side::One(_), Side::Bond(_)]));
        assert!(stats[0].is_none() && stats[1].is_some());
        let opened: Vec<_> = kernel
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("open"))
            .collect();
        assert_eq!(
            opened,
            ["open a0 queue 0", "open m0 queue 0", "open m1 queue 0"]
        );
    }

    #[test]
    fn a_queue_another_socket_holds_fails_the_set_up_with_the_kernels_words() {
        let mut kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        kernel.busy = Some(("b0", 0));
        let setup = set_up_pair(&mut kernel);
        let err = sides_of_queue(&kernel, &setup, &[None, None], 0)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("queue 0 of b0 is already in use"), "{err}");
    }
}
