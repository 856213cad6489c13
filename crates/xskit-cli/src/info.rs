//! `xskit info`: a device's XDP features, queues and attached program, read over netlink.

use anyhow::{Context, Result};
use clap::Args;
use xskit::Interface;

#[derive(Args)]
pub(crate) struct InfoArgs {
    /// The interface to describe.
    #[arg(short, long, value_name = "IFACE")]
    interface: String,
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
                    print_xskit_bond(fwd.pid, bond, "");
                    return Ok(0);
                }
            }
            return Err(e.into());
        }
    };
    let link = iface
        .link_info()
        .with_context(|| format!("reading link attributes of {}", args.interface))?;
    print_device(args, &iface, &link)?;
    print_bonding(&link)?;
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
fn print_device(args: &InfoArgs, iface: &Interface, link: &xskit::netlink::LinkInfo) -> Result<()> {
    let features = iface
        .features()
        .with_context(|| format!("reading XDP features of {}", args.interface))?;
    let yes = |b: bool| if b { "yes" } else { "no" };
    out!("{} (ifindex {})", link.name, link.ifindex);
    out!("  mtu               {}", link.mtu);
    let (rx, tx) = iface
        .active_queues()
        .with_context(|| format!("reading the channels of {}", args.interface))?;
    out!("  rx queues         {rx} (of {} allocated)", link.rx_queues);
    out!("  tx queues         {tx} (of {} allocated)", link.tx_queues);
    out!("  native XDP        {}", yes(features.native_xdp()));
    out!("  AF_XDP zero-copy  {}", yes(features.zero_copy()));
    out!("  multi-buffer rx   {}", yes(features.rx_sg()));
    out!("  zc max segments   {}", features.zc_max_segs);
    out!(
        "  xdp-features      {}",
        features.xdp_feature_names().join(" ")
    );
    let xsk = features.xsk_feature_names();
    out!(
        "  xsk-features      {}",
        if xsk.is_empty() {
            "none".into()
        } else {
            xsk.join(" ")
        }
    );
    match link.xdp.any() {
        Some(id) => out!(
            "  xdp program       id {id} ({} mode)",
            link.xdp.mode_name()
        ),
        None => out!("  xdp program       none"),
    }
    if let Some(kind) = &link.kind {
        out!("  kind              {kind}");
    }
    Ok(())
}

/// A kernel bond's mode, members and active member; a member's master.
fn print_bonding(link: &xskit::netlink::LinkInfo) -> Result<()> {
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
    if let Some(bond) = &link.bond {
        out!(
            "  bond              {}, xmit_hash_policy {}",
            bond.mode_name(),
            bond.policy_name()
        );
        let members: Vec<String> = all
            .iter()
            .filter(|l| l.master == Some(link.ifindex))
            .map(|l| {
                let state = if l.admin_up && l.carrier {
                    "up"
                } else {
                    "down"
                };
                format!("{} ({state})", l.name)
            })
            .collect();
        out!(
            "  members           {}",
            if members.is_empty() {
                "none".to_string()
            } else {
                members.join(", ")
            }
        );
        if let Some(active) = bond.active_slave {
            out!("  active member     {}", name_of(active));
        }
    }
    if let Some(master) = link.master {
        out!("  master            {}", name_of(master));
    }
    Ok(())
}
