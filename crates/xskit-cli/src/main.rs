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
mod control;
mod ctl;
mod demo;
mod dump;
mod fwd;
mod fwd_capture;
mod gen;
mod help;
mod info;
mod metrics;
mod opts;
mod recv;
mod rule_lines;
mod serve;
mod service;
mod state;
mod zcsend;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xskit", version, about = "Zero-copy packet I/O on AF_XDP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a two-namespace testbed, send probes across it through xskit sockets in SKB and
    /// DRV mode, check every one arrived in order and intact, and remove the testbed.
    Demo(demo::DemoArgs),
    /// Show an interface's XDP and AF_XDP capabilities and attached program.
    Info(info::InfoArgs),
    /// Transmit UDP probe traffic (IPv4/IPv6, flow ranges, rate limit) on an xskit socket.
    Gen(gen::GenArgs),
    /// Receive probe traffic and report loss, reordering, damage and latency.
    Recv(recv::RecvArgs),
    /// Show what an interface receives at its XDP hook, as xdpdump does: through xskit's
    /// program where it runs (tcpdump sees nothing it redirects), else through a capture
    /// program of its own; a line per packet like tcpdump, or -w FILE (pcap); a tcpdump
    /// filter.
    Dump(dump::DumpArgs),
    /// Benchmarks: rxdrop, txpush, l2fwd (and AF_PACKET / XDP_DROP baselines) on -i IFACE;
    /// without -i, all of them on a testbed, as a table.
    Bench(bench::BenchArgs),
    /// Zero-copy sends on TCP/UDP sockets (MSG_ZEROCOPY or io_uring SEND_ZC); --table for
    /// a comparison of the sender's CPU per GB, copying against zero-copy.
    Zcsend(zcsend::ZcArgs),
    /// Filtering forwarder: a bump in the wire between two interfaces (or --reflect on one)
    /// with a TOML rules file, rate limits, --respond for ARP/ping, live counters.
    Fwd(fwd::FwdArgs),
    /// Ask a running `xskit fwd` through its control socket: its status, its rules with
    /// their counters.
    Ctl(ctl::CtlArgs),
    /// Link bonding: `bond hash` prints, per packet of a capture, the Linux bond's transmit
    /// hash and the member it leaves on.
    Bond(bond::BondArgs),
    /// Print a completion script for SHELL on stdout (scripts/setup.sh installs bash's).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (xskit.1, xskit-COMMAND.1 for each command, and xskit-rules.5 for
    /// the rules file) into DIR.
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
    clap_mangen::generate_to(command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    let rules = dir.join("xskit-rules.5");
    std::fs::write(&rules, help::rules_man_page())
        .with_context(|| format!("writing {}", rules.display()))?;
    Ok(0)
}

/// The command line's definition, with each command's examples.
fn command() -> clap::Command {
    help::with_examples(<Cli as clap::CommandFactory>::command())
}

/// Diagnostics on stderr through `tracing`, for the commands that give them.
fn init_diagnostics(verbose: u8) {
    if verbose == 0 {
        return;
    }
    let level = if verbose == 1 {
        tracing::Level::INFO
    } else {
        tracing::Level::DEBUG
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();
}

fn main() {
    let matches = command().get_matches();
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Fwd(args) = &cli.command {
        init_diagnostics(args.verbose());
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
        Command::Ctl(args) => ctl::run(&args),
        Command::Bond(args) => bond::run(&args),
        Command::Completions { shell } => {
            let mut command = command();
            clap_complete::generate(shell, &mut command, "xskit", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man { dir } => man_pages(&dir),
    };
    match result {
        Ok(0) => {}
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Not eprintln!, which panics when nobody reads stderr any more.
            note!("xskit: {e:#}");
            std::process::exit(1);
        }
    }
}
