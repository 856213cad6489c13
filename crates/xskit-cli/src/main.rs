//! The `xskit` command: `demo` proves AF_XDP works end to end on a testbed it builds itself;
//! `info` shows what a device can do; `fwd` forwards and filters.

/// Prints a line to stdout, ignoring a closed stdout (`xskit ... | head`): the command keeps
/// running to its normal end, so it still cleans up what it created.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Prints a line to stderr, ignoring a closed stderr (a parent that read the header and went
/// away): the command still runs to its end and cleans up.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod bench;
mod bond;
mod demo;
mod dump;
mod fwd;
mod fwd_capture;
mod gen;
mod info;
mod metrics;
mod opts;
mod recv;
mod state;
mod zcsend;

use clap::{Parser, Subcommand};

/// The frame-size convention, under every packet command's --help.
const FRAME_SIZES: &str = "Frame sizes (-s, --packet-size) and lengths count the Ethernet \
    frame WITHOUT its 4-byte FCS, as the UMEM, pcap and tcpdump hold it: RFC 2544's (and \
    xdpsock's and xdp-trafficgen's) 64-byte frame is -s 60 here, as in testpmd's --txpkts.";

#[derive(Parser)]
#[command(
    name = "xskit",
    version,
    about = "Zero-copy packet I/O on AF_XDP",
    after_help = FRAME_SIZES
)]
struct Cli {
    /// Diagnostics on stderr: -v what changes (bond members, LACP), -vv each step of it.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a two-namespace testbed, send probes across it through xskit sockets in SKB and
    /// DRV mode, check every one arrived in order and intact, and remove the testbed.
    #[command(after_help = FRAME_SIZES)]
    Demo(demo::DemoArgs),
    /// Show an interface's XDP and AF_XDP capabilities and attached program.
    Info(info::InfoArgs),
    /// Transmit UDP probe traffic (IPv4/IPv6, flow ranges, rate limit) on an xskit socket.
    #[command(after_help = FRAME_SIZES)]
    Gen(gen::GenArgs),
    /// Receive probe traffic and report loss, reordering, damage and latency.
    #[command(after_help = FRAME_SIZES)]
    Recv(recv::RecvArgs),
    /// Show what an interface receives at its XDP hook, as xdpdump does: through xskit's
    /// program where it runs (tcpdump sees nothing it redirects), else through a capture
    /// program of its own; a line per packet like tcpdump, or -w FILE (pcap); a tcpdump
    /// filter.
    #[command(after_help = FRAME_SIZES)]
    Dump(dump::DumpArgs),
    /// Benchmarks: rxdrop, txpush, l2fwd (and AF_PACKET / XDP_DROP baselines) on -i IFACE;
    /// without -i, all of them on a testbed, as a table.
    #[command(after_help = FRAME_SIZES)]
    Bench(bench::BenchArgs),
    /// Zero-copy sends on TCP/UDP sockets (MSG_ZEROCOPY or io_uring SEND_ZC); --table for
    /// a comparison of the sender's CPU per GB, copying against zero-copy.
    Zcsend(zcsend::ZcArgs),
    /// Filtering forwarder: a bump in the wire between two interfaces (or --reflect on one)
    /// with a TOML rules file, rate limits, --respond for ARP/ping, live counters.
    #[command(after_help = FRAME_SIZES)]
    Fwd(fwd::FwdArgs),
    /// Link bonding: `bond hash` prints, per packet of a capture, the Linux bond's transmit
    /// hash and the member it leaves on.
    Bond(bond::BondArgs),
    /// Print a completion script for SHELL on stdout (scripts/setup.sh installs bash's).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (xskit.1, and xskit-COMMAND.1 for each command) into DIR.
    Man {
        /// Where to write them (created if missing).
        #[arg(value_name = "DIR")]
        dir: std::path::PathBuf,
    },
}

/// Writes every command's man page into `dir`.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<i32> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    Ok(0)
}

fn main() {
    let cli = Cli::parse();
    if cli.verbose > 0 {
        let level = if cli.verbose == 1 {
            tracing::Level::INFO
        } else {
            tracing::Level::DEBUG
        };
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Info(args) => info::run(&args),
        Command::Gen(args) => gen::run(&args),
        Command::Recv(args) => recv::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Zcsend(args) => zcsend::run(&args),
        Command::Fwd(args) => fwd::run(&args),
        Command::Bond(args) => bond::run(&args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "xskit", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man { dir } => man_pages(&dir),
    };
    match result {
        Ok(0) => {}
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("xskit: {e:#}");
            std::process::exit(1);
        }
    }
}
