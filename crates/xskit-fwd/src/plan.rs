//! Decisions the forwarder takes from what its links offer, as plain data: computed without
//! I/O and tested without root.

use xskit::netlink::DeviceFeatures;
use xskit::{AttachedMode, Mode, RxQueues};

use crate::config::ChecksumMode;
use crate::error::{Error, Result};

/// What set-up needs to know of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinkFacts {
    pub(crate) name: String,
    pub(crate) mtu: u32,
    /// None: not an Ethernet device.
    pub(crate) mac: Option<[u8; 6]>,
    pub(crate) ifindex: u32,
    /// A veth's peer, where it is in this namespace.
    pub(crate) veth_peer: Option<u32>,
}

/// What one link offers the forwarder's sockets, once its program is attached.
#[derive(Clone, Debug)]
pub(crate) struct LinkOffer {
    /// The interface.
    pub(crate) name: String,
    /// Where its program runs.
    pub(crate) attached: AttachedMode,
    /// Its XDP and AF_XDP features (`None`: the kernel has no netdev netlink family).
    pub(crate) features: Option<DeviceFeatures>,
    /// Its receive queues before and since the program was attached.
    pub(crate) rx_queues: RxQueues,
    /// Why its program runs in another mode than asked (auto's fallback to SKB).
    pub(crate) fallback: Option<String>,
    /// What transmitting in zero-copy through its driver costs
    /// ([`xskit::Driver::zero_copy_transmit_caveat`]).
    pub(crate) zero_copy_caveat: Option<&'static str>,
}

/// What the configuration asks of the sockets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SocketAsk {
    /// The mode asked for.
    pub(crate) mode: Mode,
    /// Packets larger than a frame come (frame chains).
    pub(crate) multi_buffer: bool,
    /// How partial checksums are to be finished.
    pub(crate) checksum: ChecksumMode,
    /// The kernel takes AF_XDP transmit metadata.
    pub(crate) kernel_tx_metadata: bool,
    /// Forwarding in XDP was asked for.
    pub(crate) xdp_forward: bool,
}

/// How the sockets bind and transmit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SocketPlan {
    /// Zero-copy: one UMEM in zero-copy across every link, a frame leaving as it arrived.
    pub(crate) zero_copy: bool,
    /// Partial checksums are finished by the kernel or device (transmit metadata).
    pub(crate) csum_offload: bool,
    /// Forward verdicts are carried out in XDP (a redirect to the other side's device).
    pub(crate) xdp_forward: bool,
    /// What the user should know about the choice.
    pub(crate) notes: Vec<String>,
}

/// Whether a link can take part in a zero-copy UMEM, and if not why.
fn zero_copy_refusal(link: &LinkOffer, multi_buffer: bool) -> Option<xskit::Error> {
    let features = link.features.as_ref()?;
    if !features.zero_copy() {
        return Some(xskit::Error::ZeroCopyUnsupported {
            iface: link.name.clone(),
            reason: format!(
                "its driver does not offer it; xdp-features: {}",
                features.xdp_feature_names().join(" ")
            ),
        });
    }
    if multi_buffer && features.zc_max_segs <= 1 {
        return Some(xskit::Error::ZeroCopyMultiBuffer {
            iface: link.name.clone(),
            segments: features.zc_max_segs,
        });
    }
    None
}

/// Decides copy or zero-copy, where partial checksums are finished, and whether forward
/// verdicts are carried out in XDP. One UMEM serves every link and its first socket's mode is
/// every socket's, so zero-copy needs it of all of them: `ZeroCopy` refuses a link that
/// cannot, `Auto` copies then (saying why when some could). Links whose features are unknown
/// are tried (the bind says no if they cannot). In zero-copy a checksum request in transmit
/// metadata reaches the driver, which must honour it (`xsk-features tx-checksum`); elsewhere
/// partial checksums are finished here. In zero-copy a redirect to another device in XDP
/// copies the packet into a page of the kernel's with no headroom, which virtio_net cannot
/// send (Linux 7.3): forward verdicts go to the sockets instead, which move the frame itself.
pub(crate) fn socket_plan(ask: &SocketAsk, links: &[LinkOffer]) -> Result<SocketPlan> {
    let SocketAsk {
        mode,
        multi_buffer,
        checksum,
        kernel_tx_metadata,
        xdp_forward,
    } = *ask;
    let mut plan = SocketPlan::default();
    let refusals: Vec<xskit::Error> = links
        .iter()
        .filter_map(|l| zero_copy_refusal(l, multi_buffer))
        .collect();
    let native = links.iter().all(|l| l.attached == AttachedMode::Drv);
    plan.zero_copy = match mode {
        Mode::Skb | Mode::Drv => false,
        Mode::ZeroCopy => match refusals.into_iter().next() {
            Some(e) => return Err(e.into()),
            None => true,
        },
        Mode::Auto => {
            let offered = links
                .iter()
                .any(|l| l.features.as_ref().is_some_and(DeviceFeatures::zero_copy));
            let all = native && refusals.is_empty() && links.iter().all(|l| l.features.is_some());
            if offered && !all {
                let why = match refusals.first() {
                    Some(e) => e.to_string(),
                    None => "not every program runs in the driver".into(),
                };
                plan.notes.push(format!(
                    "copy mode: one UMEM serves every interface, and zero-copy needs it of \
                     all of them: {why}"
                ));
            }
            all
        }
    };
    if plan.zero_copy {
        let caveats = links
            .iter()
            .filter_map(|l| Some((&l.name, l.zero_copy_caveat?)));
        plan.notes
            .extend(caveats.map(|(name, caveat)| format!("{name}: {caveat}")));
    }
    plan.csum_offload = checksum == ChecksumMode::Offload
        && kernel_tx_metadata
        && (!plan.zero_copy
            || links
                .iter()
                .all(|l| l.features.as_ref().is_some_and(DeviceFeatures::tx_checksum)));
    if checksum == ChecksumMode::Offload && !kernel_tx_metadata {
        plan.notes.push(
            "this kernel has no AF_XDP transmit metadata (Linux 6.11 or later): partial \
             checksums are finished in user space"
                .into(),
        );
    }
    plan.xdp_forward = xdp_forward && !plan.zero_copy;
    if xdp_forward && plan.zero_copy {
        plan.notes.push(
            "zero-copy: the XDP programs still drop and pass by rule, but forwarded packets go \
             through the sockets, which move each frame without a copy (a redirect in XDP from \
             a zero-copy queue copies the packet into a page without headroom, which \
             virtio_net cannot send)"
                .into(),
        );
    }
    Ok(plan)
}

/// How many queues to serve, given the queues asked for (`None`: as many as every device
/// uses) and each link's receive queues; warns about queues left unserved. A link whose
/// driver added queues for XDP is refused: what arrives there reaches no socket, so it would
/// pass the forwarder by.
pub(crate) fn queues_to_serve(
    asked: Option<u32>,
    links: &[LinkOffer],
    warnings: &mut Vec<String>,
) -> Result<u32> {
    if let Some(l) = links.iter().find(|l| !l.rx_queues.added().is_empty()) {
        let q = l.rx_queues;
        return Err(Error::XdpQueues {
            iface: l.name.clone(),
            own: q.own,
            total: q.total,
            advice: q.advice(&l.name),
        });
    }
    let fewest = links.iter().map(|l| l.rx_queues.total).min().unwrap_or(1);
    let queues = asked.unwrap_or(fewest);
    if queues == 0 {
        return Err(Error::NoQueues);
    }
    for LinkOffer {
        name, rx_queues, ..
    } in links
    {
        let active = rx_queues.total;
        if queues > active {
            return Err(xskit::Error::QueueOutOfRange {
                iface: name.clone(),
                queue: queues - 1,
                queues: active,
            }
            .into());
        }
        if queues < active {
            warnings.push(format!(
                "{name} uses {active} receive queues and {queues} are served: packets on the \
                 others go to the kernel stack"
            ));
        }
    }
    Ok(queues)
}

/// The largest frame a single-buffer packet can be: a page less the XDP headroom and the
/// kernel's skb_shared_info (what veth and page-based drivers allow a single-buffer program).
const SINGLE_BUFFER_MAX: usize = 4096 - 256 - 320;

/// Which interfaces make up each side, in order: a bond's members, or the side itself;
/// the interfaces' names, each side's range of them, and its bond.
pub(crate) fn sides(
    config: &crate::ForwardConfig,
) -> (
    Vec<String>,
    Vec<std::ops::Range<usize>>,
    Vec<Option<crate::BondConfig>>,
) {
    let (mut names, mut sides, mut bonds) = (Vec::new(), Vec::new(), Vec::new());
    for side in &config.interfaces {
        let bond = config.bonds.iter().find(|b| &b.name == side);
        let start = names.len();
        match bond {
            Some(b) => names.extend(b.members.iter().cloned()),
            None => names.push(side.clone()),
        }
        sides.push(start..names.len());
        bonds.push(bond.cloned());
    }
    (names, sides, bonds)
}

/// A bond's members must share an MTU: `links` are the interfaces' (name, MTU) in order.
pub(crate) fn check_member_mtus(
    sides: &[std::ops::Range<usize>],
    bonds: &[Option<crate::BondConfig>],
    links: &[(String, u32)],
) -> Result<()> {
    for (range, bond) in sides.iter().zip(bonds) {
        let (Some(bond), first) = (bond, &links[range.start]) else {
            continue;
        };
        if let Some(other) = links[range.clone()].iter().find(|l| l.1 != first.1) {
            return Err(Error::MemberMtu {
                bond: bond.name.clone(),
                first: first.0.clone(),
                first_mtu: first.1,
                member: other.0.clone(),
                mtu: other.1,
            });
        }
    }
    Ok(())
}

/// The two sides must not be the two ends of one veth pair (a member of each, for bonds):
/// what leaves one would come straight back in on the other, and a broadcast would go round
/// forever.
pub(crate) fn check_not_one_pair(
    sides: &[std::ops::Range<usize>],
    links: &[LinkFacts],
) -> Result<()> {
    let [left, right] = sides else {
        return Ok(());
    };
    for a in &links[left.clone()] {
        for b in &links[right.clone()] {
            if a.veth_peer == Some(b.ifindex) || b.veth_peer == Some(a.ifindex) {
                return Err(Error::OnePair {
                    a: a.name.clone(),
                    b: b.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Whether the sockets must take packets larger than a frame: links with an MTU above what
/// one frame holds, and SKB mode, where the senders' GSO/GRO super-packets arrive whole.
pub(crate) fn multi_buffer(mtus: &[usize], mode: Mode) -> bool {
    mtus.iter().any(|&m| m + 18 > SINGLE_BUFFER_MAX) || mode == Mode::Skb
}

/// The UMEM's frames: as many as asked, or enough for every socket's fill and tx rings
/// (`ports` sockets on each of `queues` queues).
pub(crate) fn umem_frames(config: &crate::ForwardConfig, ports: u32, queues: u32) -> Result<u32> {
    if let Some(frames) = config.frames {
        return Ok(frames);
    }
    let (fill, tx) = (config.socket.fill_size, config.socket.tx_size);
    fill.checked_add(tx)
        .and_then(|per_port| per_port.checked_mul(queues.checked_mul(ports)?))
        .ok_or(Error::TooManyFrames {
            queues,
            ports,
            fill,
            tx,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xskit::netlink::xdp_act;

    /// virtio_net on Linux 7.x: zero-copy, one segment, no transmit checksum offload.
    fn virtio() -> DeviceFeatures {
        DeviceFeatures {
            xdp_features: xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::XSK_ZEROCOPY,
            zc_max_segs: 1,
            ..DeviceFeatures::default()
        }
    }

    /// veth: native XDP and redirects, no zero-copy.
    fn veth() -> DeviceFeatures {
        DeviceFeatures {
            xdp_features: xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::NDO_XMIT,
            ..DeviceFeatures::default()
        }
    }

    fn link(name: &str, features: Option<DeviceFeatures>) -> LinkOffer {
        LinkOffer {
            name: name.into(),
            attached: AttachedMode::Drv,
            features,
            rx_queues: RxQueues {
                own: 2,
                total: 2,
                max_combined: Some(2),
            },
            fallback: None,
            zero_copy_caveat: None,
        }
    }

    fn ask(mode: Mode, multi_buffer: bool) -> SocketAsk {
        SocketAsk {
            mode,
            multi_buffer,
            checksum: ChecksumMode::Offload,
            kernel_tx_metadata: true,
            xdp_forward: false,
        }
    }

    fn plan(mode: Mode, links: &[LinkOffer], multi_buffer: bool) -> Result<SocketPlan> {
        socket_plan(&ask(mode, multi_buffer), links)
    }

    #[test]
    fn a_drivers_zero_copy_caveat_is_noted_in_zero_copy_only() {
        let module = xskit::Driver {
            name: "virtio_net".into(),
            module: true,
        };
        let mut eth1 = link("eth1", Some(virtio()));
        eth1.zero_copy_caveat = module.zero_copy_transmit_caveat();
        let links = [link("eth0", Some(virtio())), eth1];
        let p = plan(Mode::ZeroCopy, &links, false).unwrap();
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        assert!(
            p.notes[0].starts_with("eth1: virtio_net is a module"),
            "{:?}",
            p.notes
        );
        assert!(p.notes[0].ends_with("virtio_net built in"), "{:?}", p.notes);
        let p = plan(Mode::Drv, &links, false).unwrap();
        assert!(p.notes.is_empty(), "{:?}", p.notes);
    }

    #[test]
    fn zero_copy_is_chosen_only_where_every_link_offers_it() {
        let both = [link("eth0", Some(virtio())), link("eth1", Some(virtio()))];
        for mode in [Mode::Auto, Mode::ZeroCopy] {
            let p = plan(mode, &both, false).unwrap();
            assert!(p.zero_copy, "{mode}");
            assert!(p.notes.is_empty(), "{:?}", p.notes);
            // virtio_net does not finish checksums from transmit metadata in zero-copy.
            assert!(!p.csum_offload);
        }
        for mode in [Mode::Skb, Mode::Drv] {
            let p = plan(mode, &both, false).unwrap();
            assert!(!p.zero_copy && p.csum_offload, "{mode}");
        }
        let mixed = [link("eth0", Some(virtio())), link("veth0", Some(veth()))];
        let auto = plan(Mode::Auto, &mixed, false).unwrap();
        assert!(!auto.zero_copy && auto.csum_offload);
        assert!(
            auto.notes[0].contains("copy mode") && auto.notes[0].contains("veth0"),
            "{:?}",
            auto.notes
        );
        let e = plan(Mode::ZeroCopy, &mixed, false).unwrap_err().to_string();
        assert!(
            e.contains("zero-copy is not available on veth0")
                && e.contains("xdp-features: basic redirect ndo-xmit")
                && e.contains("drv"),
            "{e}"
        );
        // Nothing offers zero-copy: auto copies without a word.
        let veths = [link("a", Some(veth())), link("b", Some(veth()))];
        assert_eq!(
            plan(Mode::Auto, &veths, false).unwrap(),
            SocketPlan {
                zero_copy: false,
                csum_offload: true,
                xdp_forward: false,
                notes: vec![]
            }
        );
    }

    #[test]
    fn zero_copy_multi_buffer_needs_more_than_one_segment() {
        let both = [link("eth0", Some(virtio())), link("eth1", Some(virtio()))];
        let e = plan(Mode::ZeroCopy, &both, true).unwrap_err().to_string();
        assert!(
            e.contains("eth0 takes 1 buffer(s) per packet in zero-copy") && e.contains("`drv`"),
            "{e}"
        );
        let auto = plan(Mode::Auto, &both, true).unwrap();
        assert!(!auto.zero_copy && auto.notes[0].contains("eth0 takes 1"));
        let mut wide = virtio();
        wide.zc_max_segs = 17;
        let p = plan(Mode::ZeroCopy, &[link("mlx0", Some(wide))], true).unwrap();
        assert!(p.zero_copy);
    }

    #[test]
    fn generic_programs_and_unknown_features_keep_auto_copying() {
        let mut skb = link("eth0", Some(virtio()));
        skb.attached = AttachedMode::Skb;
        let p = plan(Mode::Auto, &[skb, link("eth1", Some(virtio()))], false).unwrap();
        assert!(!p.zero_copy && p.notes[0].contains("in the driver"));
        // An old kernel without the netdev family: zero-copy asked for is tried.
        let unknown = [link("eth0", None)];
        assert!(!plan(Mode::Auto, &unknown, false).unwrap().zero_copy);
        assert!(plan(Mode::ZeroCopy, &unknown, false).unwrap().zero_copy);
    }

    #[test]
    fn checksums_are_offloaded_in_zero_copy_only_where_the_driver_takes_them() {
        let mut csum = virtio();
        csum.xsk_features = 1 << 1;
        let p = plan(Mode::ZeroCopy, &[link("ice0", Some(csum))], false).unwrap();
        assert!(p.zero_copy && p.csum_offload);
        let software = SocketAsk {
            checksum: ChecksumMode::Software,
            ..ask(Mode::ZeroCopy, false)
        };
        let sw = socket_plan(&software, &[link("ice0", Some(csum))]).unwrap();
        assert!(!sw.csum_offload && sw.notes.is_empty());
        let old_kernel = SocketAsk {
            kernel_tx_metadata: false,
            ..ask(Mode::Drv, false)
        };
        let old = socket_plan(&old_kernel, &[link("a", None)]).unwrap();
        assert!(!old.csum_offload && old.notes[0].contains("transmit metadata"));
    }

    #[test]
    fn forwarding_in_xdp_goes_through_the_sockets_in_zero_copy() {
        let both = [link("eth0", Some(virtio())), link("eth1", Some(virtio()))];
        let xdp = |mode| SocketAsk {
            xdp_forward: true,
            ..ask(mode, false)
        };
        let zc = socket_plan(&xdp(Mode::ZeroCopy), &both).unwrap();
        assert!(zc.zero_copy && !zc.xdp_forward);
        assert!(zc.notes[0].contains("forwarded packets go through the sockets"));
        let copy = socket_plan(&xdp(Mode::Drv), &both).unwrap();
        assert!(!copy.zero_copy && copy.xdp_forward && copy.notes.is_empty());
        let asked_not = socket_plan(&ask(Mode::Drv, false), &both).unwrap();
        assert!(!asked_not.xdp_forward);
    }

    #[test]
    fn queues_the_driver_added_for_xdp_are_refused_with_the_fix() {
        let mut virtio_spare = link("eth0", Some(virtio()));
        virtio_spare.rx_queues = RxQueues {
            own: 2,
            total: 4,
            max_combined: Some(4),
        };
        let links = [virtio_spare, link("eth1", Some(virtio()))];
        let e = queues_to_serve(None, &links, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("eth0 receives on 4 queues")
                && e.contains("2 of them are its own")
                && e.contains("ethtool -L eth0 combined 4"),
            "{e}"
        );
    }

    #[test]
    fn queues_default_to_the_fewest_and_unserved_ones_are_named() {
        let mut three = link("eth1", None);
        three.rx_queues = RxQueues {
            own: 3,
            total: 3,
            max_combined: None,
        };
        let links = [link("eth0", None), three];
        let mut warnings = Vec::new();
        assert_eq!(queues_to_serve(None, &links, &mut warnings).unwrap(), 2);
        assert!(warnings[0].contains("eth1 uses 3 receive queues and 2 are served"));
        let e = queues_to_serve(Some(3), &links, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("eth0"), "{e}");
        assert!(matches!(
            queues_to_serve(Some(0), &links, &mut Vec::new()),
            Err(Error::NoQueues)
        ));
    }
    #[test]
    fn the_umem_holds_every_sockets_rings_or_what_was_asked() {
        let config = crate::ForwardConfig::new(["a", "b"])
            .socket(xskit::SocketConfig::default().fill_size(4096).tx_size(2048));
        assert_eq!(umem_frames(&config, 2, 3).unwrap(), 6 * 6144);
        assert_eq!(
            umem_frames(&config.clone().frames(Some(1000)), 2, 3).unwrap(),
            1000
        );
        assert!(matches!(
            umem_frames(&config, 65536, 65536),
            Err(Error::TooManyFrames { .. })
        ));
    }
    #[test]
    fn a_bonds_members_make_up_its_side_in_order() {
        let bond =
            crate::BondConfig::new("bond0", ["m0", "m1"], xskit_bond::BondMode::ActiveBackup);
        let config = crate::ForwardConfig::new(["c0", "bond0"]).bonds(vec![bond]);
        let (names, sides, bonds) = sides(&config);
        assert_eq!(names, ["c0", "m0", "m1"]);
        assert_eq!(sides, [0..1, 1..3]);
        assert!(bonds[0].is_none() && bonds[1].is_some());
        let links: Vec<(String, u32)> = vec![
            ("c0".into(), 9000),
            ("m0".into(), 1500),
            ("m1".into(), 1500),
        ];
        assert!(
            check_member_mtus(&sides, &bonds, &links).is_ok(),
            "a plain side may differ"
        );
        let links: Vec<(String, u32)> = vec![
            ("c0".into(), 1500),
            ("m0".into(), 1500),
            ("m1".into(), 9000),
        ];
        assert!(matches!(
            check_member_mtus(&sides, &bonds, &links),
            Err(Error::MemberMtu { mtu: 9000, .. })
        ));
    }

    #[test]
    fn multi_buffer_for_jumbo_links_and_skb_mode() {
        assert!(!multi_buffer(&[1500, 1500], Mode::Drv));
        assert!(multi_buffer(&[1500, 9000], Mode::Drv));
        assert!(multi_buffer(&[1500], Mode::Skb));
        assert!(!multi_buffer(&[SINGLE_BUFFER_MAX - 18], Mode::Auto));
        assert!(multi_buffer(&[SINGLE_BUFFER_MAX - 17], Mode::Auto));
    }

    #[test]
    fn the_two_ends_of_one_veth_pair_are_refused_as_the_two_sides() {
        let link = |name: &str, ifindex, veth_peer| LinkFacts {
            name: name.into(),
            mtu: 1500,
            mac: Some([2, 0, 0, 0, 0, 1]),
            ifindex,
            veth_peer,
        };
        // a (3) and b (4) are one pair; c (5) leads elsewhere.
        let (a, b, c) = (
            link("a", 3, Some(4)),
            link("b", 4, Some(3)),
            link("c", 5, None),
        );
        let pair = [a.clone(), b.clone()];
        let e = check_not_one_pair(&[0..1, 1..2], &pair).unwrap_err();
        assert!(
            matches!(&e, Error::OnePair { a, b } if a == "a" && b == "b"),
            "{e}"
        );
        assert!(e.to_string().contains("one veth pair"), "{e}");
        // Seen from either end alone, and among a bond's members.
        let b_blind = link("b", 4, None);
        assert!(check_not_one_pair(&[0..1, 1..2], &[a.clone(), b_blind]).is_err());
        assert!(check_not_one_pair(&[0..2, 2..3], &[c.clone(), a.clone(), b]).is_err());
        // Two links that lead elsewhere, or one side (reflect), pass.
        assert!(check_not_one_pair(&[0..1, 1..2], &[a, c]).is_ok());
        let one_side = [std::ops::Range { start: 0, end: 2 }];
        assert!(check_not_one_pair(&one_side, &pair).is_ok());
    }
}
