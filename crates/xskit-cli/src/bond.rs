//! `xskit bond`: link bonding tools. `bond hash` answers "which link will this flow take?":
//! for each packet of a capture, the Linux bond's transmit hash and the member it picks.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use xskit_bond::{xmit_hash, XmitHashPolicy};

use crate::opts::PolicyArg;
use xskit_pipeline::PcapSource;

#[derive(Args, Debug)]
pub(crate) struct BondArgs {
    #[command(subcommand)]
    command: BondCommand,
}

#[derive(Subcommand, Debug)]
enum BondCommand {
    /// For each packet of a capture: the transmit hash a Linux bond computes for it, and the
    /// member it leaves on (hash % members), as balance-xor and 802.3ad bonds choose.
    Hash(HashArgs),
}

#[derive(Args, Debug)]
struct HashArgs {
    /// The transmit hash policy.
    #[arg(long, value_enum, default_value = "layer2")]
    policy: PolicyArg,
    /// Members of the bond (1 to 255).
    #[arg(long, default_value_t = 2)]
    members: u32,
    /// The capture to read (pcap or pcapng, Ethernet frames), as `bench plot` and `gen --pcap`
    /// take theirs: given as FILE or with --pcap.
    #[arg(
        value_name = "FILE",
        required_unless_present = "pcap",
        conflicts_with = "pcap"
    )]
    file: Option<std::path::PathBuf>,
    /// The capture to read, as FILE above.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// Print one JSON object instead of a line per packet.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct PacketHash {
    index: u64,
    len: usize,
    hash: u32,
    member: u32,
}

#[derive(Serialize)]
struct HashReport<'a> {
    policy: &'a str,
    members: u32,
    /// One per packet, under `rows` as every command's list.
    #[serde(rename = "rows")]
    packets: Vec<PacketHash>,
    per_member: Vec<u64>,
}

pub(crate) fn run(args: &BondArgs) -> Result<i32> {
    match &args.command {
        BondCommand::Hash(a) => hash(a),
    }
}

fn hash(args: &HashArgs) -> Result<i32> {
    if args.members == 0 || args.members > 255 {
        bail!(
            "--members {} is out of range: a bond has 1 to 255 members",
            args.members
        );
    }
    let policy = XmitHashPolicy::from(args.policy);
    let path = args
        .file
        .as_ref()
        .or(args.pcap.as_ref())
        .context("name the capture: FILE")?;
    // Its errors, opening and reading, name the file.
    let mut source = PcapSource::open(path)?;
    let mut packets = Vec::new();
    let mut per_member = vec![0u64; args.members as usize];
    let mut index = 0;
    while let Some((len, hash)) =
        source.next_packet_with(|data| (data.len(), xmit_hash(policy, data)))?
    {
        let member = hash % args.members;
        per_member[member as usize] += 1;
        if !args.json {
            out!("{index:>6} {len:>5} B  hash 0x{hash:08x}  member {member}");
        }
        packets.push(PacketHash {
            index,
            len,
            hash,
            member,
        });
        index += 1;
    }
    if args.json {
        let report = HashReport {
            policy: policy.name(),
            members: args.members,
            packets,
            per_member,
        };
        crate::opts::print_json("bond", &report)?;
    } else {
        let shares: Vec<String> = per_member
            .iter()
            .enumerate()
            .map(|(m, n)| format!("member {m}: {n}"))
            .collect();
        out!(
            "{} packets, {}; {}",
            index,
            policy.name(),
            shares.join(", ")
        );
    }
    Ok(0)
}
