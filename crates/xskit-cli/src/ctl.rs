//! `xskit ctl`: asks a running `xskit fwd` through its control socket.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::Value;
use xskit_fwd::control::{parse_socket_name, Client, Command};

use crate::opts::thousands;

#[derive(Args, Debug)]
pub(crate) struct CtlArgs {
    /// What to ask: status (the counters as of the forwarder's last interval) or rules (each
    /// rule with its counters).
    #[arg(value_enum)]
    verb: Verb,
    /// The forwarder's control socket [default: the one in /run/xskit of the forwarder in
    /// this network namespace, on the interfaces given with -i]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Of the forwarders in this network namespace, the one on this interface.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    interfaces: Vec<String>,
    /// Print the answer as JSON (the protocol's `result`).
    #[arg(long)]
    json: bool,
    /// How long to wait for the answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Verb {
    Status,
    Rules,
}

pub(crate) fn run(args: &CtlArgs) -> Result<i32> {
    if !(args.timeout > 0.0 && args.timeout < 1e6) {
        bail!(
            "--timeout {} must be a positive number of seconds",
            args.timeout
        );
    }
    let path = match &args.socket {
        Some(p) => p.clone(),
        None => find_socket(&args.interfaces)?,
    };
    let mut client = Client::connect(&path, Duration::from_secs_f64(args.timeout))?;
    let command = match args.verb {
        Verb::Status => Command::Status,
        Verb::Rules => Command::Rules,
    };
    let result = client.call(command)?;
    if args.json {
        out!("{}", serde_json::to_string(&result)?);
        return Ok(0);
    }
    match args.verb {
        Verb::Status => print_status(&result),
        Verb::Rules => print_rules(&result["rules"]),
    }
    Ok(0)
}

/// The control socket of the one forwarder in this network namespace (on `interfaces`, when
/// given); every candidate named when there are several.
fn find_socket(interfaces: &[String]) -> Result<PathBuf> {
    let dir = crate::state::dir();
    let netns = crate::state::netns();
    let entries = std::fs::read_dir(&dir).with_context(|| {
        format!(
            "no forwarder's control socket: cannot read {} (is `xskit fwd` running?)",
            dir.display()
        )
    })?;
    let mut found: Vec<(PathBuf, Vec<String>)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let on = parse_socket_name(&name, netns)?;
            let wanted = interfaces.iter().all(|i| on.contains(i));
            (wanted && !stale(&e.path())).then(|| (e.path(), on))
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0).0),
        0 => bail!(
            "no forwarder's control socket in {}{} (is `xskit fwd` running, in this network \
             namespace?); --socket PATH names one",
            dir.display(),
            if interfaces.is_empty() {
                String::new()
            } else {
                format!(" on {}", interfaces.join(" and "))
            }
        ),
        _ => bail!(
            "{} forwarders run here: choose one with -i IFACE or --socket PATH:\n{}",
            found.len(),
            found
                .iter()
                .map(|(p, on)| format!("  {} ({})", p.display(), on.join(", ")))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Whether `path` is a socket nobody answers on any more (its forwarder was killed): then
/// it is removed, as the forwarder would have.
fn stale(path: &std::path::Path) -> bool {
    let refused = matches!(
        std::os::unix::net::UnixStream::connect(path),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    );
    if refused {
        let _ = std::fs::remove_file(path);
    }
    refused
}

fn number(v: &Value) -> String {
    thousands(v.as_u64().unwrap_or(0))
}

fn print_status(status: &Value) {
    let counters = &status["counters"];
    out!(
        "forwarding for {:.1} s (as of its last interval)",
        status["elapsed_s"].as_f64().unwrap_or(0.0)
    );
    for p in counters["ports"].as_array().into_iter().flatten() {
        out!(
            "{}: rx {} packets, tx {} packets, dropped in XDP {}, link {}",
            p["interface"].as_str().unwrap_or("?"),
            number(&p["rx_packets"]),
            number(&p["tx_packets"]),
            number(&p["xdp_dropped"]),
            if p["link_up"] == true { "up" } else { "down" }
        );
    }
    let rules = counters["rules"].as_array().map_or(0, Vec::len);
    out!("{rules} rules (xskit ctl rules lists them)");
}

fn print_rules(rules: &Value) {
    for r in rules.as_array().into_iter().flatten() {
        out!(
            "{:<24} {:<10} {:>14} packets {:>16} bytes",
            r["name"].as_str().unwrap_or("?"),
            r["action"].as_str().unwrap_or("?"),
            number(&r["packets"]),
            number(&r["bytes"])
        );
    }
}
