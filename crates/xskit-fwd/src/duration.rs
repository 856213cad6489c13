//! Times as rules files write them: `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"7d"`.

use std::time::Duration;

/// `s` as a time of at least a millisecond and at most `max`; `what` names it in errors.
pub(crate) fn parse_within(s: &str, what: &str, max: (Duration, &str)) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a time such as \"60s\", \"5m\" or \"1h\""))?;
    let unit_secs = |secs: u64| Duration::from_secs(n.saturating_mul(secs));
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => unit_secs(1),
        "m" => unit_secs(60),
        "h" => unit_secs(3600),
        "d" => unit_secs(86_400),
        _ => {
            return Err(format!(
                "{s:?} has no unit: write ms, s, m, h or d, as in \"60s\""
            ))
        }
    };
    if d < Duration::from_millis(1) || d > max.0 {
        return Err(format!("{what} {s:?} must be 1ms to {}", max.1));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_with_their_units_and_bounds() {
        let day = (Duration::from_secs(86_400), "24h");
        assert_eq!(parse_within("60s", "t", day), Ok(Duration::from_secs(60)));
        assert_eq!(parse_within("5m", "t", day), Ok(Duration::from_secs(300)));
        assert_eq!(
            parse_within("1d", "t", day),
            Ok(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_within("250ms", "t", day),
            Ok(Duration::from_millis(250))
        );
        for bad in [
            "",
            "60",
            "s",
            "1w",
            "-1s",
            "0s",
            "25h",
            "99999999999999999999s",
        ] {
            assert!(parse_within(bad, "t", day).is_err(), "{bad}");
        }
        let e = parse_within("2d", "block", day).unwrap_err();
        assert_eq!(e, "block \"2d\" must be 1ms to 24h");
    }
}
