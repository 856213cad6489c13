//! The forwarder's set-up over a narrow seam: what it asks of the kernel (the interfaces'
//! facts, filters attached, the kernel's share of the rules installed) is the [`Kernel`]
//! trait, and every decision between those calls (the refusals, the sides, multi-buffer,
//! the queues, zero-copy, the kernel/user rule split, the UMEM's size, the warnings) is
//! [`set_up`], which the tests run on a fake kernel that records what it was asked.

use std::ops::Range;
use std::sync::Arc;

use xskit::{AttachedMode, Interface, Mode, SocketConfig, Umem};
use xskit_pipeline::{PipelinePort, XskPort};

use crate::bonded::BondConfig;
use crate::config::{ChecksumMode, ForwardConfig};
use crate::config_check::CpuFacts;
use crate::error::{Error, Result};
use crate::filter::{Action, KernelRule, XdpFilter};
use crate::filter_plan::FilterControl;
use crate::plan::{LinkFacts, LinkOffer, SocketAsk, SocketPlan};
use crate::rules::{KernelShare, RuleSet, Verdict};

/// The kernel's share of the rules, as every filter gets it.
#[derive(Clone, Debug)]
pub(crate) struct KernelRules {
    pub(crate) rules: Vec<KernelRule>,
    pub(crate) default: Action,
    pub(crate) unclassifiable: Action,
}

/// What set-up asks of the kernel.
pub(crate) trait Kernel {
    /// A filter attached to one interface.
    type Filter: FilterControl;
    /// A socket on one interface's queue, as a worker's port.
    type Port: PipelinePort;
    /// The facts of the interfaces `names`, in order.
    fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>>;
    /// A filter on every interface (looked up by [`Kernel::links`]), in the same order.
    fn attach(&mut self, mode: Mode, multi_buffer: bool) -> Result<Vec<Self::Filter>>;
    /// What each filter's link offers the sockets.
    fn offers(&self, filters: &[Self::Filter]) -> Vec<LinkOffer>;
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
}

/// Everything set-up decided, and the filters it attached.
pub(crate) struct SetUp<F> {
    pub(crate) rules: RuleSet,
    pub(crate) filters: Vec<F>,
    /// Which filters (and sockets) belong to each side, and each side's bond.
    pub(crate) sides: Vec<Range<usize>>,
    pub(crate) bonds: Vec<Option<BondConfig>>,
    /// Per side: its MAC address (a bond's first member's) and MTU.
    pub(crate) macs: Vec<[u8; 6]>,
    pub(crate) mtus: Vec<usize>,
    pub(crate) multi_buffer: bool,
    pub(crate) queues: u32,
    pub(crate) sockets: SocketPlan,
    pub(crate) umem_frames: u32,
    pub(crate) warnings: Vec<String>,
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
    let (filters, multi_buffer, offers) = attach(kernel, config.mode, &mtus)?;
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
    warn_about_user_pass(
        rules.kernel_share(sockets.xdp_forward),
        config.tap.is_some(),
        &mut warnings,
    );
    let in_kernel = rules.kernel_share(sockets.xdp_forward);
    let (kernel_rules, default) = in_kernel.kernel_rules()?;
    let share = KernelRules {
        rules: kernel_rules,
        default,
        unclassifiable: in_kernel.kernel_unclassifiable(),
    };
    for (filter, offer) in filters.iter().zip(&offers) {
        kernel.install(filter, &share)?;
        if let Some(why) = &offer.fallback {
            warnings.push(format!("{}: {why}", offer.name));
        }
    }
    let umem_frames = crate::plan::umem_frames(config, names.len() as u32, queues)?;
    Ok(SetUp {
        rules,
        filters,
        sides,
        bonds,
        macs,
        mtus,
        multi_buffer,
        queues,
        sockets,
        umem_frames,
        warnings,
    })
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
) -> Result<(Vec<K::Filter>, bool, Vec<LinkOffer>)> {
    let multi_buffer = crate::plan::multi_buffer(mtus, mode);
    let attached = kernel.attach(mode, multi_buffer)?;
    let offers = kernel.offers(&attached);
    if !multi_buffer && offers.iter().any(|o| o.attached == AttachedMode::Skb) {
        drop(attached);
        let again = kernel.attach(mode, true)?;
        let offers = kernel.offers(&again);
        return Ok((again, true, offers));
    }
    Ok((attached, multi_buffer, offers))
}

/// Pass verdicts that user space decides reach the host only through a TAP device.
fn warn_about_user_pass(share: KernelShare<'_>, tap: bool, warnings: &mut Vec<String>) {
    let rules = share.rule_set();
    let user_pass = rules
        .rules()
        .iter()
        .enumerate()
        .any(|(i, r)| r.verdict() == Verdict::Pass && !share.decided_in_kernel(i))
        || (rules.default_verdict() == Verdict::Pass
            && rules.rules().iter().any(|r| !r.matcher.kernel_exact()));
    if user_pass && !tap {
        warnings.push(
            "some packets are passed to the kernel from user space (a pass rule on a source \
             address or port); without a TAP device they are dropped and counted: add a TAP \
             device"
                .into(),
        );
    }
}

/// The kernel itself: interfaces looked up by name, the forwarder's XDP filter on each.
#[derive(Default)]
pub(crate) struct RealKernel {
    pub(crate) ifaces: Vec<Interface>,
    pub(crate) infos: Vec<xskit::netlink::LinkInfo>,
}

impl Kernel for RealKernel {
    type Filter = XdpFilter;
    type Port = XskPort;

    fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>> {
        self.ifaces = names
            .iter()
            .map(|name| Interface::by_name(name))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        self.infos = self
            .ifaces
            .iter()
            .map(Interface::link_info)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(self
            .infos
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
    fn attach(&mut self, mode: Mode, multi_buffer: bool) -> Result<Vec<XdpFilter>> {
        let n = self.ifaces.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| self.ifaces[i].index());
        let mut attached: Vec<Option<XdpFilter>> = (0..n).map(|_| None).collect();
        for &i in &order {
            attached[i] = Some(XdpFilter::attach(&self.ifaces[i], mode, multi_buffer)?);
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
                }
            })
            .collect()
    }

    fn install(&self, filter: &XdpFilter, rules: &KernelRules) -> Result<()> {
        filter.set_rules(&rules.rules, rules.default)?;
        filter.set_unclassifiable(rules.unclassifiable)
    }

    fn open_port(
        &self,
        filter: &XdpFilter,
        queue: u32,
        umem: &Umem,
        config: &SocketConfig,
    ) -> Result<XskPort> {
        Ok(XskPort::open(
            umem,
            Arc::clone(filter.program()),
            queue,
            config,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use xskit::netlink::{xdp_act, DeviceFeatures};
    use xskit::{RxQueues, UmemConfig};
    use xskit_pipeline::{wire, WirePort};

    use super::*;
    use crate::bonded::Side;
    use crate::filter_plan::FilterSettings;

    /// A filter that records what it was told.
    struct Recorded {
        index: usize,
        calls: Rc<RefCell<Vec<String>>>,
    }

    impl FilterControl for Recorded {
        fn apply(&self, _settings: &FilterSettings) -> Result<()> {
            Ok(())
        }
    }

    /// A kernel of interfaces given by the test: their facts, the mode auto lands in, their
    /// features; it records every call.
    struct Fake {
        links: Vec<LinkFacts>,
        auto_lands_in: AttachedMode,
        features: DeviceFeatures,
        /// An interface's queue already held by another socket.
        busy: Option<(&'static str, u32)>,
        calls: Rc<RefCell<Vec<String>>>,
    }

    impl Fake {
        fn new(names: &[(&str, u32)]) -> Fake {
            Fake {
                links: names
                    .iter()
                    .enumerate()
                    .map(|(i, (name, mtu))| LinkFacts {
                        name: name.to_string(),
                        mtu: *mtu,
                        mac: Some([2, 0, 0, 0, 0, i as u8]),
                        ifindex: 10 + i as u32,
                        veth_peer: None,
                    })
                    .collect(),
                auto_lands_in: AttachedMode::Drv,
                features: DeviceFeatures {
                    xdp_features: xdp_act::BASIC | xdp_act::REDIRECT,
                    ..DeviceFeatures::default()
                },
                busy: None,
                calls: Rc::default(),
            }
        }

        fn calls(&self) -> Vec<String> {
            self.calls.borrow().clone()
        }
    }

    impl Kernel for Fake {
        type Filter = Recorded;
        type Port = WirePort;

        fn links(&mut self, names: &[String]) -> Result<Vec<LinkFacts>> {
            self.calls
                .borrow_mut()
                .push(format!("links {}", names.join(",")));
            names
                .iter()
                .map(|n| {
                    self.links
                        .iter()
                        .find(|l| &l.name == n)
                        .cloned()
                        .ok_or_else(|| xskit::Error::NoSuchInterface { name: n.clone() }.into())
                })
                .collect()
        }

        fn attach(&mut self, mode: Mode, multi_buffer: bool) -> Result<Vec<Recorded>> {
            self.calls
                .borrow_mut()
                .push(format!("attach {mode:?} multi-buffer {multi_buffer}"));
            let n = self
                .calls
                .borrow()
                .iter()
                .filter(|c| c.starts_with("links"))
                .count();
            assert_eq!(n, 1, "links are looked up once, before attaching");
            Ok((0..self.links.len())
                .map(|index| Recorded {
                    index,
                    calls: Rc::clone(&self.calls),
                })
                .collect())
        }

        fn offers(&self, filters: &[Recorded]) -> Vec<LinkOffer> {
            let multi = self
                .calls
                .borrow()
                .last()
                .is_some_and(|c| c.ends_with("true"));
            filters
                .iter()
                .map(|f| LinkOffer {
                    name: self.links[f.index].name.clone(),
                    attached: if multi {
                        AttachedMode::Skb
                    } else {
                        self.auto_lands_in
                    },
                    features: Some(self.features),
                    rx_queues: RxQueues {
                        own: 1,
                        total: 1,
                        max_combined: Some(1),
                    },
                    fallback: (self.auto_lands_in == AttachedMode::Skb)
                        .then(|| "native XDP refused".to_string()),
                })
                .collect()
        }

        fn install(&self, filter: &Recorded, rules: &KernelRules) -> Result<()> {
            filter.calls.borrow_mut().push(format!(
                "install {} rules in {}, default {:?}",
                rules.rules.len(),
                self.links[filter.index].name,
                rules.default
            ));
            Ok(())
        }

        fn open_port(
            &self,
            filter: &Recorded,
            queue: u32,
            _umem: &Umem,
            _config: &SocketConfig,
        ) -> Result<WirePort> {
            let name = &self.links[filter.index].name;
            self.calls
                .borrow_mut()
                .push(format!("open {name} queue {queue}"));
            if self.busy == Some((name.as_str(), queue)) {
                let iface = name.clone();
                return Err(xskit::Error::QueueBusy { iface, queue }.into());
            }
            Ok(wire().0)
        }
    }

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
