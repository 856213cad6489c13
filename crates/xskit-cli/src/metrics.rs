//! `--metrics ADDR:PORT`: a command's live counters served as OpenMetrics text for Prometheus.
//!
//! A command publishes the same snapshot its `--json` output shows, every interval; each
//! scrape turns the latest snapshot into metric families. The mapping is uniform, so every
//! counter the JSON has is a metric without a list to keep in step:
//! - a list of ports, rules or bond members becomes one label (`interface`, `rule`, `member`)
//!   on the metrics of its elements, which take a prefix (`rule_`, `member_`);
//! - a nested object adds its key to the name (`bond_failovers`, `member_lacp_pdus_in`);
//! - whole numbers are counters (`_total`) unless they are levels or identifiers, listed in
//!   [`GAUGES`]; fractions and booleans are gauges;
//! - times are in seconds, Prometheus's base unit: `_s` fields become `_seconds`, and `_ms`,
//!   `_us` and `_ns` fields are scaled to `_seconds` (latencies as gauges);
//! - rates the command worked out from its counters (`_pps`, per packet or GB) are left out:
//!   Prometheus computes rates from the counters; a configured rate (`rate_pps`) and a
//!   benchmark cell's result (`mpps`) are gauges in packets per second;
//! - each family's HELP says what it counts (`help.rs`);
//! - an object's text fields go into an `_info` metric as labels (`xskit_rule_info{rule,
//!   action}`), not onto every sample.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{anyhow, Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

mod help;
mod http;

/// Whole-number fields that are levels or identifiers, not counts that only grow.
const GAUGES: &[&str] = &[
    "aggregator",
    "key",
    "state",
    "packet_size",
    "flows",
    "schema_version",
    "blocked_now",
    "rules_generation",
    "elements",
    "expired",
];

/// Whole-number fields that name a thing rather than measure it: labels of the `_info`
/// metric, as text fields are.
const IDENTIFIERS: &[&str] = &["queue"];

/// The time units fields carry, by suffix, and how many make a second.
const TIME_UNITS: &[(&str, f64)] = &[("_ms", 1e3), ("_us", 1e6), ("_ns", 1e9)];

/// Fields that are rates or ratios the command worked out from its counters.
fn is_computed_rate(key: &str) -> bool {
    key.ends_with("_pps") && key != "rate_pps"
        || key.contains("_per_packet")
        || key.contains("_per_gb")
}

/// Objects whose numbers are all levels (gauges): where the frames are now.
const LEVELS: &[&str] = &["frames"];

/// Lists whose elements are told apart by a label: (key, label, the element's field that
/// names it, the prefix of the element's metrics, the name of its `_info` metric).
const LISTS: &[(&str, &str, &str, &str, &str)] = &[
    ("ports", "interface", "interface", "", "port_info"),
    ("rules", "rule", "name", "rule_", "rule_info"),
    ("members", "member", "interface", "member_", "member_info"),
    ("cells", "cell", "name", "cell_", "cell_info"),
    (
        "blocked_sources",
        "source",
        "source",
        "blocked_source_",
        "blocked_source_info",
    ),
    ("sets", "set", "name", "set_", "set_info"),
    ("top", "element", "element", "element_", "element_info"),
];

/// Objects that are one more element of a list: (key, the list).
const LIST_ELEMENTS: &[(&str, &str)] = &[("unclassifiable", "rules")];

type Labels = Vec<(String, String)>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sample {
    Counter(u64),
    /// A counter of seconds (CPU time).
    Seconds(f64),
    Gauge(f64),
    Info,
}

/// One metric family: its samples, each with its labels.
#[derive(Debug, Default, PartialEq)]
struct Family {
    samples: Vec<(Labels, Sample)>,
}

fn metric_name(prefix: &str, key: &str) -> String {
    let key = key.strip_suffix("_total").unwrap_or(key);
    let key = match key.strip_suffix("_s") {
        Some(stem) => format!("{stem}_seconds"),
        None => key.to_string(),
    };
    format!("{prefix}{key}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn push(families: &mut BTreeMap<String, Family>, name: String, labels: &Labels, sample: Sample) {
    families
        .entry(name)
        .or_default()
        .samples
        .push((labels.clone(), sample));
}

/// The metric a number field becomes, in base units, or `None` for a rate worked out from
/// counters.
fn number_metric(
    prefix: &str,
    key: &str,
    n: &serde_json::Number,
    levels: bool,
) -> Option<(String, Sample)> {
    if is_computed_rate(key) {
        return None;
    }
    // A configured rate, and a benchmark cell's result: levels, in packets a second.
    let per_second = match key {
        "rate_pps" => Some(("rate_packets_per_second", 1.0)),
        "mpps" => Some(("packets_per_second", 1e6)),
        _ => None,
    };
    if let Some((stem, factor)) = per_second {
        let name = metric_name(prefix, stem);
        return Some((name, Sample::Gauge(n.as_f64().unwrap_or(0.0) * factor)));
    }
    if let Some((stem, per_second)) = TIME_UNITS
        .iter()
        .find_map(|(unit, n)| key.strip_suffix(unit).map(|stem| (stem, *n)))
    {
        let seconds = n.as_f64().unwrap_or(0.0) / per_second;
        let name = metric_name(prefix, &format!("{stem}_seconds"));
        let sample = if levels || stem.contains("latency") {
            Sample::Gauge(seconds)
        } else {
            Sample::Seconds(seconds)
        };
        return Some((name, sample));
    }
    let name = metric_name(prefix, key);
    let sample = match n.as_u64() {
        Some(count) if !levels && !GAUGES.contains(&key) && !key.ends_with("_s") => {
            Sample::Counter(count)
        }
        _ => Sample::Gauge(n.as_f64().unwrap_or(0.0)),
    };
    Some((name, sample))
}

/// Adds the metrics of `value` (a JSON object) to `families`, their names under `prefix`,
/// its text fields to the `info` metric.
fn flatten(
    value: &Value,
    prefix: &str,
    info_name: &str,
    labels: &Labels,
    families: &mut BTreeMap<String, Family>,
) {
    let levels = LEVELS
        .iter()
        .any(|l| prefix.strip_suffix('_').is_some_and(|p| p.ends_with(l)));
    let Value::Object(fields) = value else {
        return;
    };
    let mut info = labels.clone();
    for (key, v) in fields {
        match v {
            Value::Number(n) if IDENTIFIERS.contains(&key.as_str()) => {
                info.push((key.clone(), n.to_string()));
            }
            Value::Number(n) => {
                if let Some((name, sample)) = number_metric(prefix, key, n, levels) {
                    push(families, name, labels, sample);
                }
            }
            Value::Bool(b) => push(
                families,
                metric_name(prefix, key),
                labels,
                Sample::Gauge(f64::from(u8::from(*b))),
            ),
            Value::String(s) => {
                if !labels.iter().any(|(k, _)| k == key) {
                    info.push((key.clone(), s.clone()));
                }
            }
            Value::Object(_) if !LIST_ELEMENTS.iter().any(|e| e.0 == key) => {
                let inner = format!("{prefix}{key}_");
                flatten(v, &inner, &format!("{inner}info"), labels, families)
            }
            Value::Object(_) | Value::Array(_) => {
                let list = LIST_ELEMENTS
                    .iter()
                    .find(|e| e.0 == key)
                    .map_or(key.as_str(), |e| e.1);
                let Some(&(_, label, id, child, info)) = LISTS.iter().find(|l| l.0 == list) else {
                    continue;
                };
                let items = match v {
                    Value::Array(items) => items.as_slice(),
                    one => std::slice::from_ref(one),
                };
                for item in items {
                    let mut with = labels.clone();
                    let mut item = item.clone();
                    if let Some(Value::String(name)) =
                        item.as_object_mut().and_then(|o| o.remove(id))
                    {
                        with.push((label.to_string(), name));
                    }
                    let item = &item;
                    let info = format!("{prefix}{info}");
                    flatten(item, &format!("{prefix}{child}"), &info, &with, families);
                }
            }
            Value::Null => {}
        }
    }
    if info.len() > labels.len() {
        push(families, info_name.to_string(), &info, Sample::Info);
    }
}

/// The metric families of a snapshot, by name (without the `xskit_` prefix). An info
/// family is named without its `_info` (the encoder adds it), renamed when that would clash
/// with another family.
fn families(snapshot: &Value) -> BTreeMap<String, Family> {
    let mut flat = BTreeMap::new();
    flatten(snapshot, "", "build_info", &Vec::new(), &mut flat);
    let (infos, mut families): (BTreeMap<_, _>, BTreeMap<_, _>) =
        flat.into_iter().partition(|(_, f): &(String, Family)| {
            matches!(f.samples.first(), Some((_, Sample::Info)))
        });
    for (name, family) in infos {
        let stem = name.strip_suffix("_info").unwrap_or(&name).to_string();
        let stem = if families.contains_key(&stem) {
            format!("{stem}_text")
        } else {
            stem
        };
        families.insert(stem, family);
    }
    families
}

#[derive(Debug)]
struct Latest(Arc<Mutex<Value>>);

impl Collector for Latest {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let snapshot = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (name, family) in families(&snapshot) {
            let name = name.as_str();
            let Some(&(_, first)) = family.samples.first() else {
                continue;
            };
            let kind = match first {
                Sample::Counter(_) | Sample::Seconds(_) => MetricType::Counter,
                Sample::Gauge(_) => MetricType::Gauge,
                Sample::Info => MetricType::Info,
            };
            let help = help::text(name, kind);
            let mut metric = encoder.encode_descriptor(name, &help, None, kind)?;
            for (labels, sample) in &family.samples {
                // A field has one type wherever it appears, so a family's samples share
                // their first one's.
                match *sample {
                    Sample::Counter(n) => {
                        ConstCounter::new(n).encode(metric.encode_family(labels)?)?
                    }
                    Sample::Seconds(x) => {
                        ConstCounter::new(x).encode(metric.encode_family(labels)?)?
                    }
                    Sample::Gauge(x) => metric.encode_family(labels)?.encode_gauge(&x)?,
                    Sample::Info => metric.encode_info(labels)?,
                }
            }
        }
        Ok(())
    }
}

/// File descriptors kept for the command itself (sockets, maps, captures) beside the
/// endpoint's connections.
const OWN_FILES: u64 = 256;

/// How many connections the endpoint may hold: [`http::MAX_CONNECTIONS`], or what the
/// open-files limit leaves (said, when that is fewer), after raising it as far as allowed.
fn connection_limit() -> usize {
    let files = xskit_os::raise_open_files_limit().unwrap_or(1024);
    let left = usize::try_from(files.saturating_sub(OWN_FILES)).unwrap_or(usize::MAX);
    if left < http::MAX_CONNECTIONS {
        note!(
            "xskit: --metrics: the open-files limit ({files}) allows {left} connections at once, \
             not {}: raise it (ulimit -Hn, LimitNOFILE=) for more",
            http::MAX_CONNECTIONS
        );
    }
    left.clamp(1, http::MAX_CONNECTIONS)
}

/// Serves `/metrics` until dropped, on one event-loop thread with bounded connections
/// ([`http`]).
pub(crate) struct MetricsServer {
    latest: Arc<Mutex<Value>>,
    endpoint: http::Endpoint,
    /// Another descriptor of the listening socket, to hand to a successor.
    listener: std::os::fd::OwnedFd,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.endpoint.addr())
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// Listens on `addr` (`HOST:PORT`; port 0 picks a free one).
    pub(crate) fn start(
        addr: &str,
        command: &'static str,
        events: &crate::serve::EventLoop,
    ) -> Result<MetricsServer> {
        // The io::Error stays the source: a successor waits on AddrInUse.
        let listener = std::net::TcpListener::bind(addr).with_context(|| {
            format!(
                "--metrics {addr}: cannot listen there (give a free HOST:PORT, such as \
                 127.0.0.1:0: port 0 picks a free one and prints it)"
            )
        })?;
        Self::start_on(listener, addr, command, events)
    }

    /// Serves on `listener`, already listening (handed over by the forwarder this one took
    /// over from); `addr` as `--metrics` gave it, for errors.
    pub(crate) fn start_on(
        listener: std::net::TcpListener,
        addr: &str,
        command: &'static str,
        events: &crate::serve::EventLoop,
    ) -> Result<MetricsServer> {
        let handed = listener
            .try_clone()
            .map_err(|e| anyhow!("--metrics {addr}: cannot keep its socket ({e})"))?;
        let latest = Arc::new(Mutex::new(serde_json::json!({
            "command": command,
            "version": env!("CARGO_PKG_VERSION"),
        })));
        let mut registry = Registry::with_prefix("xskit");
        registry.register_collector(Box::new(Latest(latest.clone())));
        let render = move || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).map(|()| text)
        };
        let limit = connection_limit();
        let endpoint = http::Endpoint::start(events, listener, Arc::new(render), limit)
            .map_err(|e| anyhow!("--metrics {addr}: cannot start serving ({e})"))?;
        Ok(MetricsServer {
            latest,
            endpoint,
            listener: handed.into(),
        })
    }

    /// Leaves the listening socket to a successor that serves on it too: stops accepting and
    /// answers the connections accepted (for at most a second), so that no scrape is cut.
    pub(crate) fn leave_to_successor(&self) {
        self.endpoint.finish(std::time::Duration::from_secs(1));
    }

    /// Its listening socket, for a successor to serve on.
    pub(crate) fn listener(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.listener)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.endpoint.addr()
    }

    /// Makes `value` (what `--json` would print now) the next scrape's answer.
    pub(crate) fn publish(&self, value: &impl serde::Serialize) {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(value) else {
            return;
        };
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        if let Value::Object(old) = &*latest {
            for key in ["command", "version"] {
                if let Some(v) = old.get(key) {
                    fields.insert(key.into(), v.clone());
                }
            }
        }
        *latest = Value::Object(fields);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(f: &BTreeMap<String, Family>, name: &str, labels: &[(&str, &str)]) -> Sample {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        f[name]
            .samples
            .iter()
            .find(|(l, _)| *l == want)
            .unwrap_or_else(|| panic!("{name} {want:?} in {:?}", f[name]))
            .1
    }

    #[test]
    fn times_are_seconds_and_computed_rates_are_left_to_prometheus() {
        let f = families(&serde_json::json!({
            "latency_mean_us": 12.5,
            "process_cpu_ns": 2_000_000_000u64,
            "tx_pps": 5.0,
            "rate_pps": 1000,
            "cells": [{"name": "rxdrop", "mpps": 1.5, "cpu_ns_per_packet": 30.0}]
        }));
        assert_eq!(
            sample(&f, "latency_mean_seconds", &[]),
            Sample::Gauge(12.5e-6)
        );
        assert_eq!(sample(&f, "process_cpu_seconds", &[]), Sample::Seconds(2.0));
        assert_eq!(
            sample(&f, "rate_packets_per_second", &[]),
            Sample::Gauge(1000.0)
        );
        assert_eq!(
            sample(&f, "cell_packets_per_second", &[("cell", "rxdrop")]),
            Sample::Gauge(1.5e6)
        );
        assert!(
            !f.keys()
                .any(|k| k.contains("pps") || k.contains("per_packet")),
            "{f:?}"
        );
    }

    #[test]
    fn lists_become_labels_and_objects_prefixes() {
        let snapshot = serde_json::json!({
            "command": "fwd",
            "duration_s": 1.5,
            "ports": [
                {"interface": "a", "mode": "xdp-skb", "queue": 0, "rx_packets": 7, "bond": {
                    "mode": "802.3ad", "failovers": 1, "aggregator": 2,
                    "members": [{"interface": "m0", "up": true, "lacp": {"pdus_in": 3, "key": 9}}]
                }},
                {"interface": "b", "mode": "xdp-drv", "rx_packets": 5, "unclassifiable": 1}
            ],
            "rules": [{"name": "web", "action": "drop", "packets": 4}],
            "unclassifiable": {"name": "unclassifiable", "action": "drop", "packets": 2},
            "pool": {"alloc_fast": 10},
            "frames": {"umem": 8192, "fill": 4096}
        });
        let f = families(&snapshot);
        assert_eq!(
            sample(&f, "rx_packets", &[("interface", "a")]),
            Sample::Counter(7)
        );
        assert_eq!(
            sample(&f, "rx_packets", &[("interface", "b")]),
            Sample::Counter(5)
        );
        assert_eq!(
            sample(
                &f,
                "port",
                &[("interface", "a"), ("mode", "xdp-skb"), ("queue", "0")]
            ),
            Sample::Info
        );
        assert!(
            !f.contains_key("queue"),
            "a queue number is a label, not a gauge"
        );
        assert_eq!(
            sample(&f, "bond_failovers", &[("interface", "a")]),
            Sample::Counter(1)
        );
        assert_eq!(
            sample(&f, "bond_aggregator", &[("interface", "a")]),
            Sample::Gauge(2.0)
        );
        let member = [("interface", "a"), ("member", "m0")];
        assert_eq!(sample(&f, "bond_member_up", &member), Sample::Gauge(1.0));
        assert_eq!(
            sample(&f, "bond_member_lacp_pdus_in", &member),
            Sample::Counter(3)
        );
        assert_eq!(
            sample(&f, "bond_member_lacp_key", &member),
            Sample::Gauge(9.0)
        );
        assert_eq!(
            sample(&f, "rule_packets", &[("rule", "web")]),
            Sample::Counter(4)
        );
        assert_eq!(
            sample(&f, "rule", &[("rule", "web"), ("action", "drop")]),
            Sample::Info
        );
        assert_eq!(sample(&f, "pool_alloc_fast", &[]), Sample::Counter(10));
        assert_eq!(sample(&f, "frames_fill", &[]), Sample::Gauge(4096.0));
        assert_eq!(
            sample(&f, "rule_packets", &[("rule", "unclassifiable")]),
            Sample::Counter(2)
        );
        // A port's `unclassifiable` count and the unclassifiable rule's text stay apart.
        assert_eq!(
            sample(&f, "unclassifiable", &[("interface", "b")]),
            Sample::Counter(1)
        );
        assert_eq!(sample(&f, "duration_seconds", &[]), Sample::Gauge(1.5));
        assert_eq!(sample(&f, "build", &[("command", "fwd")]), Sample::Info);
    }

    #[test]
    fn blocked_sources_are_a_label_each_and_their_time_left_a_level() {
        let snapshot = serde_json::json!({
            "command": "fwd",
            "blocked_now": 3,
            "blocked_sources": [{"interface": "a", "rule": "per-source",
                "source": "198.51.100.0/24", "drops": 40, "left_s": 55}]
        });
        let f = families(&snapshot);
        assert_eq!(sample(&f, "blocked_now", &[]), Sample::Gauge(3.0));
        let source = [("source", "198.51.100.0/24")];
        assert_eq!(
            sample(&f, "blocked_source_drops", &source),
            Sample::Counter(40)
        );
        assert_eq!(
            sample(&f, "blocked_source_left_seconds", &source),
            Sample::Gauge(55.0)
        );
    }

    #[test]
    fn a_sets_elements_are_a_label_each_under_their_set() {
        let snapshot = serde_json::json!({
            "command": "fwd",
            "sets": [{"name": "attackers", "elements": 2, "expired": 1, "packets": 9,
                "top": [{"element": "198.51.100.7/32", "packets": 9, "left_s": 30},
                        {"element": "203.0.113.0/24", "packets": 0, "left_s": null}]}]
        });
        let f = families(&snapshot);
        let set = [("set", "attackers")];
        assert_eq!(sample(&f, "set_elements", &set), Sample::Gauge(2.0));
        assert_eq!(sample(&f, "set_expired", &set), Sample::Gauge(1.0));
        assert_eq!(sample(&f, "set_packets", &set), Sample::Counter(9));
        let element = [("set", "attackers"), ("element", "198.51.100.7/32")];
        assert_eq!(
            sample(&f, "set_element_packets", &element),
            Sample::Counter(9)
        );
        assert_eq!(
            sample(&f, "set_element_left_seconds", &element),
            Sample::Gauge(30.0)
        );
    }

    #[test]
    fn an_address_it_cannot_listen_on_is_named_with_what_to_do() {
        let events = crate::serve::EventLoop::start("xskit-test").unwrap();
        let taken = MetricsServer::start("127.0.0.1:0", "gen", &events).unwrap();
        for addr in ["not-an-address", "127.0.0.1", &taken.addr().to_string()] {
            let e = MetricsServer::start(addr, "gen", &events)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("--metrics {addr}: cannot listen there")),
                "{e}"
            );
            assert!(e.contains("port 0 picks a free one"), "{e}");
        }
    }

    #[test]
    fn a_scrape_is_openmetrics_text_ending_in_eof() {
        let events = crate::serve::EventLoop::start("xskit-test").unwrap();
        let server = MetricsServer::start("127.0.0.1:0", "gen", &events).unwrap();
        server.publish(&serde_json::json!({
            "ports": [{"interface": "x0", "tx_packets": 12, "tx_bytes": 768}]
        }));
        let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
        std::io::Write::write_all(
            &mut stream,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("application/openmetrics-text"), "{text}");
        assert!(
            text.contains("xskit_tx_packets_total{interface=\"x0\"} 12"),
            "{text}"
        );
        assert!(text.contains("# TYPE xskit_tx_packets counter"), "{text}");
        assert!(
            text.contains("xskit_build_info{command=\"gen\",version="),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }
}
