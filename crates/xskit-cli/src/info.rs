//! `xskit info`: a device's XDP features, queues and attached program, read over netlink.

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use xskit::Interface;

#[derive(Args)]
pub(crate) struct InfoArgs {
    /// The interface to describe.
    #[arg(short, long, value_name = "IFACE")]
    interface: String,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

/// What `info` tells of a device, read once and then printed as lines or as JSON.
#[derive(Debug, Serialize)]
struct DeviceFacts {
    interface: String,
    ifindex: u32,
    mtu: u32,
    rx_queues: u32,
    rx_queues_allocated: u32,
    tx_queues: u32,
    tx_queues_allocated: u32,
    native_xdp: bool,
    zero_copy: bool,
    multi_buffer_rx: bool,
    zc_max_segments: u32,
    xdp_features: Vec<&'static str>,
    xsk_features: Vec<&'static str>,
    xdp_program: Option<XdpProgramFacts>,
    kind: Option<String>,
    /// The device's driver, "virtio_net (module)".
    driver: Option<String>,
    /// What transmitting in zero-copy through that driver costs.
    zero_copy_caveat: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct XdpProgramFacts {
    id: u32,
    mode: &'static str,
}

/// A bond of a running `xskit fwd`, and its state.
fn print_xskit_bond(fwd_pid: u32, bond: &crate::state::BondState, indent: &str) {
    out!(
        "{indent}xskit bond        {} (xskit fwd, pid {fwd_pid}): {}{}",
        bond.name,
        bond.mode,
        bond.xmit_hash_policy
            .as_ref()
            .map(|p| format!(", xmit_hash_policy {p}"))
            .unwrap_or_default()
    );
    let members: Vec<String> = bond
        .members
        .iter()
        .map(|m| {
            let state = match (m.up, m.carrier, &m.lacp) {
                (true, _, _) => "up",
                (false, false, _) => "no carrier",
                (false, true, Some(_)) => "not distributing",
                (false, true, None) => "ARP targets silent",
            };
            format!("{} ({state})", m.interface)
        })
        .collect();
    out!("{indent}xskit members     {}", members.join(", "));
    for m in &bond.members {
        if let Some(lacp) = &m.lacp {
            out!("{indent}xskit {:<11} {lacp}", m.interface);
        }
    }
    if let Some(active) = &bond.active {
        out!(
            "{indent}xskit active      {active} ({} failovers)",
            bond.failovers
        );
    }
}

pub(crate) fn run(args: &InfoArgs) -> Result<i32> {
    let running = crate::state::running();
    let iface = match Interface::by_name(&args.interface) {
        Ok(iface) => iface,
        Err(e) => {
            // Not a device: perhaps a bond of a running xskit fwd.
            for fwd in &running {
                if let Some(bond) = fwd.bonds.iter().find(|b| b.name == args.interface) {
                    if args.json {
                        let one = serde_json::json!({ "xskit_bond": bond, "fwd_pid": fwd.pid });
                        crate::opts::print_json("info", &one)?;
                    } else {
                        print_xskit_bond(fwd.pid, bond, "");
                    }
                    return Ok(0);
                }
            }
            return Err(e.into());
        }
    };
    let link = iface
        .link_info()
        .with_context(|| format!("reading link attributes of {}", args.interface))?;
    let facts = device_facts(args, &iface, &link)?;
    let bonding = bonding_facts(&link)?;
    if args.json {
        let xskit_bonds: Vec<_> = running
            .iter()
            .flat_map(|fwd| fwd.bonds.iter())
            .filter(|b| b.members.iter().any(|m| m.interface == link.name))
            .collect();
        let all = serde_json::json!({
            "device": facts,
            "bonding": bonding,
            "xskit_bonds": xskit_bonds,
        });
        crate::opts::print_json("info", &all)?;
        return Ok(0);
    }
    print_device(&facts);
    print_bonding(&bonding);
    for fwd in &running {
        for bond in &fwd.bonds {
            if bond.members.iter().any(|m| m.interface == link.name) {
                print_xskit_bond(fwd.pid, bond, "  ");
            }
        }
    }
    Ok(0)
}

/// The device's queues, MTU, XDP and AF_XDP features and attached program.
fn device_facts(
    args: &InfoArgs,
    iface: &Interface,
    link: &xskit::netlink::LinkInfo,
) -> Result<DeviceFacts> {
    let features = iface
        .features()
        .with_context(|| format!("reading XDP features of {}", args.interface))?;
    let (rx, tx) = iface
        .active_queues()
        .with_context(|| format!("reading the channels of {}", args.interface))?;
    let driver = iface.driver();
    Ok(DeviceFacts {
        interface: link.name.clone(),
        ifindex: link.ifindex,
        mtu: link.mtu,
        rx_queues: rx,
        rx_queues_allocated: link.rx_queues,
        tx_queues: tx,
        tx_queues_allocated: link.tx_queues,
        native_xdp: features.native_xdp(),
        zero_copy: features.zero_copy(),
        multi_buffer_rx: features.rx_sg(),
        zc_max_segments: features.zc_max_segs,
        xdp_features: features.xdp_feature_names(),
        xsk_features: features.xsk_feature_names(),
        xdp_program: link.xdp.any().map(|id| XdpProgramFacts {
            id,
            mode: link.xdp.mode_name(),
        }),
        kind: link.kind.clone(),
        zero_copy_caveat: driver
            .as_ref()
            .filter(|_| features.zero_copy())
            .and_then(xskit::Driver::zero_copy_transmit_caveat),
        driver: driver.map(|d| d.to_string()),
    })
}

fn print_device(f: &DeviceFacts) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    out!("{} (ifindex {})", f.interface, f.ifindex);
    out!("  mtu               {}", f.mtu);
    out!(
        "  rx queues         {} (of {} allocated)",
        f.rx_queues,
        f.rx_queues_allocated
    );
    out!(
        "  tx queues         {} (of {} allocated)",
        f.tx_queues,
        f.tx_queues_allocated
    );
    out!("  native XDP        {}", yes(f.native_xdp));
    out!("  AF_XDP zero-copy  {}", yes(f.zero_copy));
    out!("  multi-buffer rx   {}", yes(f.multi_buffer_rx));
    out!("  zc max segments   {}", f.zc_max_segments);
    out!("  xdp-features      {}", f.xdp_features.join(" "));
    let xsk = if f.xsk_features.is_empty() {
        "none".to_string()
    } else {
        f.xsk_features.join(" ")
    };
    out!("  xsk-features      {xsk}");
    match &f.xdp_program {
        Some(p) => out!("  xdp program       id {} ({} mode)", p.id, p.mode),
        None => out!("  xdp program       none"),
    }
    if let Some(kind) = &f.kind {
        out!("  kind              {kind}");
    }
    if let Some(driver) = &f.driver {
        out!("  driver            {driver}");
    }
    if let Some(caveat) = f.zero_copy_caveat {
        out!("  note: {caveat} (-m drv)");
    }
}

/// A kernel bond's mode, members and active member, or a member's master.
#[derive(Debug, Default, Serialize)]
struct BondingFacts {
    bond: Option<KernelBondFacts>,
    master: Option<String>,
}

#[derive(Debug, Serialize)]
struct KernelBondFacts {
    mode: &'static str,
    xmit_hash_policy: &'static str,
    members: Vec<MemberFacts>,
    active_member: Option<String>,
}

#[derive(Debug, Serialize)]
struct MemberFacts {
    interface: String,
    up: bool,
}

fn bonding_facts(link: &xskit::netlink::LinkInfo) -> Result<BondingFacts> {
    let all = if link.bond.is_some() || link.master.is_some() {
        xskit::netlink::links().with_context(|| "listing the links")?
    } else {
        Vec::new()
    };
    let name_of = |ifindex: u32| {
        all.iter()
            .find(|l| l.ifindex == ifindex)
            .map_or_else(|| format!("ifindex {ifindex}"), |l| l.name.clone())
    };
    let bond = link.bond.as_ref().map(|bond| KernelBondFacts {
        mode: bond.mode_name(),
        xmit_hash_policy: bond.policy_name(),
        members: all
            .iter()
            .filter(|l| l.master == Some(link.ifindex))
            .map(|l| MemberFacts {
                interface: l.name.clone(),
                up: l.admin_up && l.carrier,
            })
            .collect(),
        active_member: bond.active_slave.map(name_of),
    });
    Ok(BondingFacts {
        bond,
        master: link.master.map(name_of),
    })
}

fn print_bonding(f: &BondingFacts) {
    if let Some(bond) = &f.bond {
        out!(
            "  bond              {}, xmit_hash_policy {}",
            bond.mode,
            bond.xmit_hash_policy
        );
        let members: Vec<String> = bond
            .members
            .iter()
            .map(|m| format!("{} ({})", m.interface, if m.up { "up" } else { "down" }))
            .collect();
        out!(
            "  members           {}",
            if members.is_empty() {
                "none".to_string()
            } else {
                members.join(", ")
            }
        );
        if let Some(active) = &bond.active_member {
            out!("  active member     {active}");
        }
    }
    if let Some(master) = &f.master {
        out!("  master            {master}");
    }
}
