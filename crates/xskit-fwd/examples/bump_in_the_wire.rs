//! A filter in the wire, with the forwarder as a library: everything that arrives on one
//! interface leaves by the other, unchanged, except what the rules drop; at the end, each
//! rule's count.
//!
//! `cargo run --release -p xskit-fwd --example bump_in_the_wire -- IF_A IF_B SECONDS` (as
//! root).
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use xskit_fwd::rules::RuleSet;
use xskit_fwd::{Counters, ForwardConfig, Forwarder, Report};

/// What the filter drops: ping, in both directions.
pub(crate) const RULES: &str = r#"
[[rule]]
name = "no-ping"
protocol = "icmp"
action = "drop"
"#;

/// Forwards between `a` and `b` under [`RULES`] until `stop` is set, calling `on_tick` with
/// the counters every half second, then reports.
pub(crate) fn bump(
    a: &str,
    b: &str,
    stop: &AtomicBool,
    on_tick: impl FnMut(&Counters),
) -> Result<Report, Box<dyn std::error::Error>> {
    let rules = RuleSet::from_toml(RULES)?;
    let forwarder = Forwarder::new(ForwardConfig::new([a, b]).rules(rules))?;
    Ok(forwarder.run(stop, Duration::from_millis(500), on_tick)?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b, secs] = args.as_slice() else {
        return Err("usage: bump_in_the_wire IF_A IF_B SECONDS".into());
    };
    let secs: f64 = secs.parse()?;
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
        });
        bump(a, b, &stop, |_| {})
    })?;
    for rule in &report.counters.rules {
        println!(
            "{}: {} packets ({} decided in the kernel)",
            rule.name, rule.packets, rule.in_kernel
        );
    }
    Ok(())
}
