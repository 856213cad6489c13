//! The rules file: TOML read into a [`RuleSet`], every mistake with its line and column.

use serde::Deserialize;
use xskit_wire::ip_protocol;

use super::set_syntax::Sets;
use super::*;

/// A rules file that could not be read, with where in the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct RulesError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl RulesError {
    pub(super) fn at(text: &str, offset: usize, message: String) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let (line, column) = crate::text_file::line_and_column(&text[..offset]);
        RulesError {
            line,
            column,
            message,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    #[serde(default)]
    default: Option<toml::Spanned<String>>,
    #[serde(default)]
    unclassifiable: Option<toml::Spanned<String>>,
    #[serde(default)]
    rule: Vec<toml::Spanned<RuleRepr>>,
    #[serde(default)]
    set: Vec<toml::Spanned<SetRepr>>,
    #[serde(default)]
    source_table: Option<toml::Spanned<i64>>,
    #[serde(default)]
    block_table: Option<toml::Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SetRepr {
    pub(super) name: toml::Spanned<String>,
    pub(super) file: Option<toml::Spanned<String>>,
    pub(super) prefixes: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    pub(super) ports: Option<toml::Spanned<Vec<toml::Spanned<toml::Value>>>>,
    pub(super) timeout: Option<toml::Spanned<String>>,
    pub(super) counters: Option<toml::Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleRepr {
    name: Option<toml::Spanned<String>>,
    src: Option<toml::Spanned<String>>,
    dst: Option<toml::Spanned<String>>,
    protocol: Option<toml::Spanned<toml::Value>>,
    src_port: Option<toml::Spanned<toml::Value>>,
    dst_port: Option<toml::Spanned<toml::Value>>,
    pub(super) icmp_type: Option<toml::Spanned<toml::Value>>,
    pub(super) icmp_code: Option<toml::Spanned<toml::Value>>,
    pub(super) tcp_flags: Option<toml::Spanned<String>>,
    pub(super) length: Option<toml::Spanned<toml::Value>>,
    pub(super) vlan: Option<toml::Spanned<toml::Value>>,
    action: toml::Spanned<String>,
    rate: Option<toml::Spanned<String>>,
    burst: Option<toml::Spanned<i64>>,
    pub(super) per: Option<toml::Spanned<String>>,
    pub(super) block: Option<toml::Spanned<String>>,
}

fn parse_verdict(s: &str, allow_rate: bool) -> Result<Verdict, String> {
    match s {
        "forward" => Ok(Verdict::Forward),
        "drop" => Ok(Verdict::Drop),
        "pass" => Ok(Verdict::Pass),
        "rate-limit" if allow_rate => Ok(Verdict::RateLimit),
        _ if allow_rate => Err(format!(
            "action {s:?} is not one of \"forward\", \"drop\", \"pass\", \"rate-limit\""
        )),
        _ => Err(format!(
            "default {s:?} is not one of \"forward\", \"drop\", \"pass\""
        )),
    }
}

fn parse_protocol(v: &toml::Value) -> Result<u8, String> {
    match v {
        toml::Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(ip_protocol::TCP),
            "udp" => Ok(ip_protocol::UDP),
            "icmp" => Ok(ip_protocol::ICMP),
            "icmpv6" => Ok(ip_protocol::ICMPV6),
            _ => Err(format!(
                "protocol {s:?} is not tcp, udp, icmp or icmpv6 (or give a number 1-255)"
            )),
        },
        toml::Value::Integer(n) => u8::try_from(*n)
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("protocol {n} must be 1 to 255")),
        other => Err(format!(
            "protocol must be a name or a number, not {}",
            other.type_str()
        )),
    }
}

/// A number or an inclusive range `"low-high"` of `what` (a port, a length), 0 to 65535.
pub(super) fn parse_range(v: &toml::Value, what: &str) -> Result<(u16, u16), String> {
    let one = |s: &str| {
        s.trim()
            .parse::<u16>()
            .map_err(|_| format!("{s:?} is not a {what} (0-65535)"))
    };
    match v {
        toml::Value::Integer(n) => u16::try_from(*n)
            .map(|p| (p, p))
            .map_err(|_| format!("{what} {n} is not 0-65535")),
        toml::Value::String(s) => {
            let (lo, hi) = match s.split_once('-') {
                Some((a, b)) => (one(a)?, one(b)?),
                None => {
                    let p = one(s)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(format!("{what} range {s:?} is empty: write it low-high"));
            }
            Ok((lo, hi))
        }
        other => Err(format!(
            "a {what} is a number or a range such as \"1000-2000\", not {}",
            other.type_str()
        )),
    }
}

/// A rule's `src` or `dst`: a prefix, or `"@NAME"`, a set's index.
fn parse_address(s: &str, sets: &Sets) -> Result<(Option<Prefix>, Option<usize>), String> {
    let Some(name) = s.strip_prefix('@') else {
        return Prefix::parse(s).map(|p| (Some(p), None));
    };
    match sets.prefixes.iter().position(|set| set.name() == name) {
        Some(i) => Ok((None, Some(i))),
        None if sets.ports.iter().any(|set| set.name() == name) => Err(format!(
            "set {name:?} holds ports: name it in src_port or dst_port"
        )),
        None => Err(no_set(name, "file = \"...\" or prefixes = [...]")),
    }
}

fn no_set(name: &str, holding: &str) -> String {
    format!("no set is named {name:?}: declare it with [[set]], name = {name:?} and {holding}")
}

/// An inclusive range of ports.
type PortRange = (u16, u16);

/// A rule's `src_port` or `dst_port`: a number, a range, or `"@NAME"`, a port set's index.
fn parse_port_key(
    v: &toml::Value,
    sets: &Sets,
) -> Result<(Option<PortRange>, Option<usize>), String> {
    let Some(name) = v.as_str().and_then(|s| s.strip_prefix('@')) else {
        return parse_range(v, "port").map(|r| (Some(r), None));
    };
    match sets.ports.iter().position(|set| set.name() == name) {
        Some(i) => Ok((None, Some(i))),
        None if sets.prefixes.iter().any(|set| set.name() == name) => Err(format!(
            "set {name:?} holds addresses: name it in src or dst"
        )),
        None => Err(no_set(name, "ports = [...]")),
    }
}

/// Rule `i` of a rules file, its errors pointing into `text`.
fn parse_rule(
    text: &str,
    i: usize,
    spanned: &toml::Spanned<RuleRepr>,
    sets: &Sets,
) -> Result<RuleSpec, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    let r = spanned.get_ref();
    let address = |p: &Option<toml::Spanned<String>>| {
        p.as_ref()
            .map(|s| parse_address(s.get_ref(), sets).map_err(|m| at(s.span(), m)))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let ((src, src_set), (dst, dst_set)) = (address(&r.src)?, address(&r.dst)?);
    if let (Some(s), Some(d)) = (src, dst) {
        if s.family() != d.family() {
            return Err(at(
                spanned.span(),
                "src and dst are of different families: no packet can match".into(),
            ));
        }
    }
    let protocol = r
        .protocol
        .as_ref()
        .map(|p| parse_protocol(p.get_ref()).map_err(|m| at(p.span(), m)))
        .transpose()?;
    let ports = |p: &Option<toml::Spanned<toml::Value>>| {
        p.as_ref()
            .map(|s| parse_port_key(s.get_ref(), sets).map_err(|m| at(s.span(), m)))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let ((src_ports, src_port_set), (dst_ports, dst_port_set)) =
        (ports(&r.src_port)?, ports(&r.dst_port)?);
    if (r.src_port.is_some() || r.dst_port.is_some())
        && !matches!(protocol, Some(ip_protocol::TCP | ip_protocol::UDP))
    {
        let span = r
            .dst_port
            .as_ref()
            .or(r.src_port.as_ref())
            .map(|s| s.span());
        return Err(at(
            span.unwrap_or(spanned.span()),
            "ports need protocol = \"tcp\" or \"udp\" in the same rule".into(),
        ));
    }
    let extra = super::extra_keys::parse(text, r, protocol)?;
    let action = parse_verdict(r.action.get_ref(), true).map_err(|m| at(r.action.span(), m))?;
    let rate = parse_rate(text, r, action)?;
    let per_source = super::limit_syntax::parse_per(text, r, action)?;
    let name = match &r.name {
        Some(n) => {
            check_name(n.get_ref()).map_err(|m| at(n.span(), m))?;
            n.get_ref().clone()
        }
        None => format!("rule{}", i + 1),
    };
    Ok(RuleSpec {
        name,
        matcher: Match {
            src,
            dst,
            protocol,
            src_ports,
            dst_ports,
            src_set,
            dst_set,
            src_port_set,
            dst_port_set,
            ..extra
        },
        action,
        rate,
        per_source,
    })
}

/// A rule's rate limit: a rate and a burst for `rate-limit` rules, nothing for the others.
fn parse_rate(text: &str, r: &RuleRepr, action: Verdict) -> Result<Option<Rate>, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    Ok(match (&r.rate, action) {
        (Some(rate), Verdict::RateLimit) => {
            let (per_second, unit) = Rate::parse(rate.get_ref()).map_err(|m| at(rate.span(), m))?;
            let burst = match &r.burst {
                Some(b) => u64::try_from(*b.get_ref())
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| at(b.span(), "burst must be at least 1".into()))?,
                // 50 ms worth, and at least one full-size frame: a user-space
                // policer sees packets in bunches when its thread is scheduled
                // out, and a shorter burst would police the scheduler.
                None => match unit {
                    RateUnit::Packets => (per_second / 20).max(1),
                    RateUnit::Bits => (per_second / 160).max(1514),
                },
            };
            Some(Rate {
                per_second,
                unit,
                burst,
            })
        }
        (None, Verdict::RateLimit) => {
            return Err(at(
                r.action.span(),
                "a rate-limit rule needs rate = \"...\", such as \"10kpps\" or \"5Mbps\"".into(),
            ))
        }
        (Some(rate), _) => {
            return Err(at(
                rate.span(),
                "rate is only for action = \"rate-limit\"".into(),
            ))
        }
        (None, _) => {
            if let Some(b) = &r.burst {
                return Err(at(
                    b.span(),
                    "burst is only for action = \"rate-limit\"".into(),
                ));
            }
            None
        }
    })
}

/// The longest rule name, in characters: it stands in every live line and metric.
pub const MAX_RULE_NAME_CHARS: usize = 64;

/// Whether `c` would change what a terminal or a log shows rather than show itself: control
/// characters, and the marks that reorder text (a name must read as it is written).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A rule or set name fit to print in live lines, logs and metrics.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if chars == 0 {
        return Err("a rule's name cannot be empty: give it one, or leave name out (ruleN)".into());
    }
    if chars > MAX_RULE_NAME_CHARS {
        let start: String = name.chars().take(16).collect();
        return Err(format!(
            "the name {start:?}... is {chars} characters long: at most {MAX_RULE_NAME_CHARS}"
        ));
    }
    if let Some(c) = name.chars().find(|&c| invisible(c)) {
        return Err(format!(
            "the name {name:?} holds the control character U+{:04X}: names are printed in live \
             lines, logs and metrics, so give one of letters, digits and punctuation",
            u32::from(c)
        ));
    }
    Ok(())
}

/// Counters and metrics are kept by rule name, beside `default` and `unclassifiable`: two
/// rules of one name would share them, so a name is refused where it is used the second time.
fn unique_names(
    text: &str,
    spans: &[toml::Spanned<RuleRepr>],
    rules: &[RuleSpec],
) -> Result<(), RulesError> {
    let mut seen = std::collections::HashMap::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let earlier = seen.insert(r.name.as_str(), i);
        let clash = match earlier {
            Some(j) => format!("rule {} is named {:?} too", j + 1, r.name),
            None if matches!(r.name.as_str(), "default" | "unclassifiable") => {
                format!("{:?} names the counter of packets no rule takes", r.name)
            }
            None => continue,
        };
        return Err(RulesError::at(
            text,
            spans[i].span().start,
            format!(
                "{clash}: give each rule a name of its own (counters and metrics are kept by name)"
            ),
        ));
    }
    Ok(())
}

/// A rules file that could not be read or holds a mistake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesFileError {
    /// Not a regular file, too large, unreadable or not UTF-8.
    #[error(transparent)]
    Read(#[from] crate::text_file::TextFileError),
    /// A mistake in the rules, with its line and column.
    #[error("{}: {error}", path.display())]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// The mistake.
        error: RulesError,
    },
}

impl RuleSet {
    /// Rules from the file at `path`: a regular file of at most
    /// [`MAX_RULES_FILE_BYTES`](crate::text_file::MAX_RULES_FILE_BYTES) of UTF-8.
    pub fn from_file(path: &std::path::Path) -> Result<Self, RulesFileError> {
        let text = crate::text_file::read_bounded(path, crate::text_file::MAX_RULES_FILE_BYTES)?;
        let files = super::set_syntax::SetFiles::Disk(path.parent());
        RuleSet::from_toml_in(&text, files).map_err(|error| RulesFileError::Invalid {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Rules from a TOML text; errors give line and column. A set's `file` is read relative
    /// to the working directory.
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        Self::from_toml_in(text, super::set_syntax::SetFiles::Disk(None))
    }

    /// Rules from a TOML text to replace `running`'s in a running forwarder: a set that
    /// names a `file` is not read but taken from `running` as it runs (by name), so that
    /// rules sent over a control socket make the forwarder open no path.
    pub fn from_toml_keeping_sets(text: &str, running: &RuleSet) -> Result<Self, RulesError> {
        Self::from_toml_in(text, super::set_syntax::SetFiles::Running(running.sets()))
    }

    /// Rules from a TOML text whose sets' `file`s come from `files`.
    fn from_toml_in(
        text: &str,
        files: super::set_syntax::SetFiles<'_>,
    ) -> Result<Self, RulesError> {
        let file: FileRepr = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            let mut message = e.message().trim().to_string();
            if text[offset.min(text.len())..].starts_with("[rule]") {
                message += ": write each rule under [[rule]], in double brackets";
            }
            RulesError::at(text, offset, message)
        })?;
        if file.rule.len() > crate::MAX_RULES {
            return Err(RulesError::at(
                text,
                file.rule[crate::MAX_RULES].span().start,
                format!(
                    "{} rules; at most {} are supported",
                    file.rule.len(),
                    crate::MAX_RULES
                ),
            ));
        }
        let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
        let default = match &file.default {
            Some(d) => parse_verdict(d.get_ref(), false).map_err(|m| at(d.span(), m))?,
            None => Verdict::Forward,
        };
        // Fail closed: a packet the rules cannot see into is dropped unless the file says so.
        let unclassifiable = match &file.unclassifiable {
            Some(u) => parse_verdict(u.get_ref(), false)
                .map_err(|m| at(u.span(), m.replacen("default", "unclassifiable", 1)))?,
            None => Verdict::Drop,
        };
        let sets = super::set_syntax::parse_sets(text, &file.set, files)?;
        let rules = file
            .rule
            .iter()
            .enumerate()
            .map(|(i, spanned)| parse_rule(text, i, spanned, &sets))
            .collect::<Result<Vec<_>, _>>()?;
        unique_names(text, &file.rule, &rules)?;
        let matches: Vec<Match> = rules.iter().map(|r| r.matcher).collect();
        Ok(RuleSet {
            fast: FastMatches::new(&matches, &sets.prefixes, &sets.ports),
            vectors: (rules.len() > crate::abi::LINEAR_RULES)
                .then(|| Arc::new(super::vectors::build(&matches, &sets.ports))),
            rules,
            default,
            unclassifiable,
            sets: sets.prefixes,
            port_sets: sets.ports,
            source_table: limit_syntax::parse_table(
                text,
                file.source_table.as_ref(),
                "source_table",
                DEFAULT_SOURCE_TABLE,
                MAX_SOURCE_TABLE,
            )?,
            block_table: limit_syntax::parse_table(
                text,
                file.block_table.as_ref(),
                "block_table",
                DEFAULT_BLOCK_TABLE,
                MAX_BLOCK_TABLE,
            )?,
            told_id: crate::told::RulesId::fresh(),
        })
    }
}
