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

pub(crate) fn run(args: &InfoArgs) -> Result<i32> {
    let iface = Interface::by_name(&args.interface)?;
    let link = iface
        .link_info()
        .with_context(|| format!("reading link attributes of {}", args.interface))?;
    let features = iface
        .features()
        .with_context(|| format!("reading XDP features of {}", args.interface))?;
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!("{} (ifindex {})", link.name, link.ifindex);
    println!("  mtu               {}", link.mtu);
    println!("  rx queues         {}", link.rx_queues);
    println!("  tx queues         {}", link.tx_queues);
    println!("  native XDP        {}", yes(features.native_xdp()));
    println!("  AF_XDP zero-copy  {}", yes(features.zero_copy()));
    println!("  multi-buffer rx   {}", yes(features.rx_sg()));
    println!("  zc max segments   {}", features.zc_max_segs);
    println!(
        "  xdp-features      {}",
        features.xdp_feature_names().join(" ")
    );
    let xsk = features.xsk_feature_names();
    println!(
        "  xsk-features      {}",
        if xsk.is_empty() {
            "none".into()
        } else {
            xsk.join(" ")
        }
    );
    match link.xdp.any() {
        Some(id) => println!(
            "  xdp program       id {id} ({} mode)",
            link.xdp.mode_name()
        ),
        None => println!("  xdp program       none"),
    }
    Ok(0)
}
