//! The keys of a rule that most rules leave out: ICMP type and code, TCP flags, the IP
//! length and the VLAN ID, read from a rules file.

use xskit_wire::ip_protocol;

use super::syntax::{parse_range, RuleRepr, RulesError};
use super::{Match, TcpFlags};

/// A number from 0 to `max`, for `key`.
fn small_number(v: &toml::Value, key: &str, max: u16) -> Result<u16, String> {
    match v {
        toml::Value::Integer(n) => u16::try_from(*n)
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{key} {n} is not 0 to {max}")),
        other => Err(format!("{key} is a number, not {}", other.type_str())),
    }
}

/// The rule's ICMP, TCP flag, length and VLAN keys, as a [`Match`] with only those set;
/// `protocol` is what the rule's `protocol` says, which the ICMP and TCP keys need.
pub(super) fn parse(text: &str, r: &RuleRepr, protocol: Option<u8>) -> Result<Match, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    let number = |v: &Option<toml::Spanned<toml::Value>>, key: &str, max: u16| {
        v.as_ref()
            .map(|s| small_number(s.get_ref(), key, max).map_err(|m| at(s.span(), m)))
            .transpose()
    };
    let icmp = matches!(protocol, Some(ip_protocol::ICMP | ip_protocol::ICMPV6));
    let byte = |n: Option<u16>| n.map(|n| n as u8);
    let icmp_type = byte(number(&r.icmp_type, "icmp_type", 255)?);
    let icmp_code = byte(number(&r.icmp_code, "icmp_code", 255)?);
    if let Some(s) = r.icmp_type.as_ref().or(r.icmp_code.as_ref()) {
        if !icmp {
            return Err(at(
                s.span(),
                "icmp_type and icmp_code need protocol = \"icmp\" or \"icmpv6\" in the same rule"
                    .into(),
            ));
        }
    }
    let tcp_flags = match &r.tcp_flags {
        None => None,
        Some(_) if protocol != Some(ip_protocol::TCP) => {
            let span = r.tcp_flags.as_ref().map(|s| s.span()).unwrap_or_default();
            return Err(at(
                span,
                "tcp_flags needs protocol = \"tcp\" in the same rule".into(),
            ));
        }
        Some(s) => Some(TcpFlags::parse(s.get_ref()).map_err(|m| at(s.span(), m))?),
    };
    let length = r
        .length
        .as_ref()
        .map(|s| parse_range(s.get_ref(), "length").map_err(|m| at(s.span(), m)))
        .transpose()?;
    let vlan = number(&r.vlan, "vlan", 4095)?;
    Ok(Match {
        icmp_type,
        icmp_code,
        tcp_flags,
        length,
        vlan,
        ..Match::default()
    })
}
