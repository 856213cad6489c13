//! `xskit ctl`: asks a running `xskit fwd` through its control socket.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::Value;
use xskit_fwd::control::{parse_socket_name, Client, Command, SetOp};

use crate::opts::thousands;

#[derive(Args, Debug)]
pub(crate) struct CtlArgs {
    /// What to ask: status (the counters as of the forwarder's last interval), rules (each
    /// rule with its counters), apply FILE (put the rules in FILE in force, whole, or
    /// refuse them with the running rules untouched; rules that keep their name keep their
    /// counters and rate-limit state; sets that read a file are kept as they run), or set
    /// add|del NAME PREFIX..., set list NAME, set load NAME FILE (a set's elements, changed
    /// in place while it forwards).
    #[arg(value_enum)]
    verb: Verb,
    /// apply's FILE (read here and sent: the forwarder opens no path for it); set's
    /// add|del|list|load, the set's name, then its prefixes or FILE.
    #[arg(value_name = "ARGS")]
    args: Vec<String>,
    /// For set add and load: how long the elements without a timeout of their own stay (a
    /// set with timeouts), e.g. 10m.
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
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
    /// How long to wait for the answer, in seconds [default: 5; for apply and set, as long
    /// as the forwarder may take, 35]
    #[arg(long, value_name = "SECONDS")]
    wait: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Verb {
    Status,
    Rules,
    Apply,
    Set,
}

/// What the command line asks, checked before the socket is looked for.
enum Asked {
    Status,
    Rules,
    Apply(PathBuf, String),
    Set(SetOp, String, Vec<String>),
}

/// The request the verb and its arguments make, files read here.
fn asked(args: &CtlArgs) -> Result<Asked> {
    let rest = &args.args;
    let none = |verb: &str| match rest.first() {
        Some(extra) => bail!("{verb} takes no argument ({extra:?} given)"),
        None => Ok(()),
    };
    Ok(match args.verb {
        Verb::Status => none("status").map(|()| Asked::Status)?,
        Verb::Rules => none("rules").map(|()| Asked::Rules)?,
        Verb::Apply => match rest.as_slice() {
            [file] => Asked::Apply(file.into(), read_rules(file.as_ref())?),
            _ => bail!("apply takes the rules file: xskit ctl apply FILE"),
        },
        Verb::Set => set_asked(rest)?,
    })
}

/// `set add|del NAME PREFIX...`, `set list NAME`, `set load NAME FILE`.
fn set_asked(rest: &[String]) -> Result<Asked> {
    let usage = "xskit ctl set add|del NAME PREFIX..., set list NAME, set load NAME FILE";
    let (Some(op), Some(name)) = (rest.first(), rest.get(1)) else {
        bail!("set takes what to do and the set's name: {usage}");
    };
    let elements = rest[2..].to_vec();
    let (op, elements) = match (op.as_str(), elements.len()) {
        ("add", 1..) => (SetOp::Add, elements),
        ("del", 1..) => (SetOp::Del, elements),
        ("list", 0) => (SetOp::List, elements),
        ("load", 1) => (SetOp::Add, load_set_file(&elements[0])?),
        _ => bail!("{:?}: {usage}", rest.join(" ")),
    };
    Ok(Asked::Set(op, name.clone(), elements))
}

/// The elements of a set file (a prefix a line, `#` and `;` comments), read here.
fn load_set_file(file: &str) -> Result<Vec<String>> {
    let text = xskit_fwd::text_file::read_bounded(
        file.as_ref(),
        xskit_fwd::control::MAX_LONG_REQUEST as u64 / 2,
    )
    .with_context(|| format!("reading the set's elements, {file}"))?;
    Ok(text
        .lines()
        .map(|l| l.split(['#', ';']).next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

pub(crate) fn run(args: &CtlArgs) -> Result<i32> {
    let wait = args.wait.unwrap_or(match args.verb {
        Verb::Apply | Verb::Set => xskit_fwd::control::APPLY_TIMEOUT.as_secs_f64() + 5.0,
        _ => 5.0,
    });
    if !(wait > 0.0 && wait < 1e6) {
        bail!("--wait {wait} must be a positive number of seconds");
    }
    let asked = asked(args)?;
    if args.timeout.is_some() && !matches!(asked, Asked::Set(SetOp::Add, ..)) {
        bail!("--timeout is for set add and set load");
    }
    let path = match &args.socket {
        Some(p) => p.clone(),
        None => find_socket(&args.interfaces)?,
    };
    let mut client = Client::connect(&path, Duration::from_secs_f64(wait))?;
    let result = match &asked {
        Asked::Status => client.call(Command::Status)?,
        Asked::Rules => client.call(Command::Rules)?,
        Asked::Apply(file, text) => client
            .apply(text.clone())
            .with_context(|| format!("applying {}", file.display()))?,
        Asked::Set(op, name, elements) => client
            .set(*op, name, elements.clone(), args.timeout.clone())
            .with_context(|| format!("set {name}"))?,
    };
    if args.json {
        out!("{}", serde_json::to_string(&result)?);
        return Ok(0);
    }
    match asked {
        Asked::Status => print_status(&result),
        Asked::Rules => print_rules(&result["rules"]),
        Asked::Set(SetOp::List, ..) => {
            for e in result["elements"].as_array().into_iter().flatten() {
                out!("{}", e.as_str().unwrap_or("?"));
            }
        }
        Asked::Set(op, name, elements) => out!(
            "set {name}: {} elements {}; generation {} in force",
            thousands(elements.len() as u64),
            if op == SetOp::Add {
                "added"
            } else {
                "taken out"
            },
            result["generation"]
        ),
        Asked::Apply(..) => out!(
            "generation {} in force: {} rules ({} kept with their counters, {} new, {} gone)",
            result["generation"],
            result["rules"],
            result["kept"],
            result["added"],
            result["removed"]
        ),
    }
    Ok(0)
}

/// The rules file's text, as the forwarder would read it: a regular file of UTF-8, bounded.
fn read_rules(file: &std::path::Path) -> Result<String> {
    xskit_fwd::text_file::read_bounded(file, xskit_fwd::text_file::MAX_RULES_FILE_BYTES)
        .with_context(|| format!("reading the rules to apply, {}", file.display()))
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
    out!(
        "{rules} rules, generation {} (xskit ctl rules lists them)",
        counters["rules_generation"]
    );
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
