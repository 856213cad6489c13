//! Rate limits kept per source: a rule's `per = "source"` (or `"source/N"`) and `block =
//! "60s"`, and the sizes of the kernel tables they live in, `source_table` and `block_table`
//! at the top of the file.

use std::time::Duration;

use super::syntax::{RuleRepr, RulesError};
use super::Verdict;
pub use crate::bucket::PerSource;

/// Per-source buckets the kernel keeps when the file does not say (`source_table`).
pub const DEFAULT_SOURCE_TABLE: u32 = 65_536;
/// The most `source_table` may ask for.
pub const MAX_SOURCE_TABLE: u32 = 1 << 22;
/// Blocked sources the kernel keeps when the file does not say (`block_table`).
pub const DEFAULT_BLOCK_TABLE: u32 = 16_384;
/// The most `block_table` may ask for.
pub const MAX_BLOCK_TABLE: u32 = 1 << 20;
/// The longest `block`.
pub const MAX_BLOCK: Duration = Duration::from_secs(86_400);

/// `per = "source"`, `"source/N"`: the prefix lengths sources are grouped by. N up to 32
/// groups IPv4 (IPv6 by /64); above 32, IPv6 (IPv4 by address).
fn parse_per_value(s: &str) -> Result<(u8, u8), String> {
    let bad = || format!("per {s:?} is not \"source\" or \"source/N\" (such as \"source/24\")");
    let Some(rest) = s.trim().strip_prefix("source") else {
        return Err(bad());
    };
    if rest.is_empty() {
        return Ok((32, 64));
    }
    let len: u8 = rest
        .strip_prefix('/')
        .and_then(|n| n.parse().ok())
        .ok_or_else(bad)?;
    match len {
        1..=32 => Ok((len, 64)),
        33..=128 => Ok((32, len)),
        _ => Err(format!(
            "per {s:?}: a prefix length is 1 to 32 (IPv4) or 33 to 128 (IPv6)"
        )),
    }
}

/// `"500ms"`, `"60s"`, `"5m"`, `"1h"`: at least a millisecond, at most [`MAX_BLOCK`].
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse_within(s, "block", (MAX_BLOCK, "24h"))
}

/// A rule's `per` and `block`: only for `rate-limit`, and `block` only with `per`.
pub(super) fn parse_per(
    text: &str,
    r: &RuleRepr,
    action: Verdict,
) -> Result<Option<PerSource>, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    let Some(per) = &r.per else {
        if let Some(b) = &r.block {
            return Err(at(
                b.span(),
                "block needs per = \"source\": it blocks one source, not the rule".into(),
            ));
        }
        return Ok(None);
    };
    if action != Verdict::RateLimit {
        return Err(at(
            per.span(),
            "per is only for action = \"rate-limit\"".into(),
        ));
    }
    let (v4_len, v6_len) = parse_per_value(per.get_ref()).map_err(|m| at(per.span(), m))?;
    let block = r
        .block
        .as_ref()
        .map(|b| parse_duration(b.get_ref()).map_err(|m| at(b.span(), m)))
        .transpose()?;
    Ok(Some(PerSource {
        v4_len,
        v6_len,
        block,
    }))
}

/// A table size at the top of the file: `default` when not given, 1 to `max`.
pub(super) fn parse_table(
    text: &str,
    value: Option<&toml::Spanned<i64>>,
    name: &str,
    default: u32,
    max: u32,
) -> Result<u32, RulesError> {
    let Some(v) = value else {
        return Ok(default);
    };
    u32::try_from(*v.get_ref())
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| RulesError::at(text, v.span().start, format!("{name} must be 1 to {max}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;

    #[test]
    fn per_source_limits_read_and_refuse_what_they_cannot_be() {
        assert_eq!(parse_per_value("source"), Ok((32, 64)));
        assert_eq!(parse_per_value("source/24"), Ok((24, 64)));
        assert_eq!(parse_per_value("source/48"), Ok((32, 48)));
        assert!(parse_per_value("source/0").is_err() && parse_per_value("dest").is_err());
        assert!(parse_per_value("source/129").is_err() && parse_per_value("source/x").is_err());
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["60", "0s", "25h", "2d", "s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let limit = "[[rule]]\naction = \"rate-limit\"\nrate = \"10pps\"\n";
        let rs = RuleSet::from_toml(&format!(
            "source_table = 1000\nblock_table = 10\n{limit}per = \"source/24\"\nblock = \"60s\"\n"
        ))
        .unwrap();
        assert_eq!((rs.source_table(), rs.block_table()), (1000, 10));
        assert_eq!(
            rs.rules()[0].per_source,
            Some(PerSource {
                v4_len: 24,
                v6_len: 64,
                block: Some(Duration::from_secs(60)),
            })
        );
        let plain = RuleSet::from_toml(limit).unwrap();
        assert_eq!(plain.rules()[0].per_source, None);
        assert_eq!(plain.source_table(), DEFAULT_SOURCE_TABLE);
        for (text, says) in [
            (format!("{limit}block = \"60s\"\n"), "block needs per"),
            (
                "[[rule]]\naction = \"drop\"\nper = \"source\"\n".to_string(),
                "per is only for",
            ),
            (
                format!("source_table = 0\n{limit}"),
                "source_table must be 1 to",
            ),
            (
                format!("block_table = 2000000\n{limit}"),
                "block_table must be 1 to",
            ),
            (
                format!("{limit}per = \"source\"\nblock = \"1w\"\n"),
                "write ms, s, m, h or d",
            ),
        ] {
            let e = RuleSet::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
