//! The kernel's share of a rule set: what the XDP filter decides itself and what it sends to
//! user space, for a forwarder that carries out `forward` verdicts in XDP or not. Whether it
//! does is the forwarder's decision (it needs two interfaces and copy mode), so it is given
//! here, not kept in the rule set.

use super::{Match, RuleSet, Verdict};
use crate::abi::Extra;
use crate::abi::Police;
use crate::bucket::Limit;
use crate::filter::{port_range, prefix_words, Action, KernelRule, XdpFilter};

/// A rule set as the kernel runs it: [`RuleSet::kernel_share`].
#[derive(Clone, Copy, Debug)]
pub struct KernelShare<'a> {
    rules: &'a RuleSet,
    forward_in_xdp: bool,
    pass_to_tap: bool,
}

impl RuleSet {
    /// The kernel's share of these rules; with `forward_in_xdp` the kernel carries out the
    /// `forward` verdicts it can decide (XDP_REDIRECT out of the other interface), so those
    /// packets never reach user space.
    pub fn kernel_share(&self, forward_in_xdp: bool) -> KernelShare<'_> {
        KernelShare {
            rules: self,
            forward_in_xdp,
            pass_to_tap: false,
        }
    }
}

impl<'a> KernelShare<'a> {
    /// The rules themselves.
    pub fn rule_set(&self) -> &'a RuleSet {
        self.rules
    }

    /// With `pass_to_tap`, `pass` verdicts are carried out in user space, which writes the
    /// packets to the forwarder's TAP device, where the host's own addresses are (an
    /// XDP_PASS would hand them to the stack of the interface they arrived on).
    pub fn passing_to_tap(self, pass_to_tap: bool) -> Self {
        KernelShare {
            pass_to_tap,
            ..self
        }
    }

    /// Makes `filter` tell user space, in front of each packet it redirects there, the rule
    /// its plain path decided the packet by, from the next [`XdpFilter::set_rules`] on,
    /// which must put these rules in force (`src/told.rs`).
    pub fn tell_in(&self, filter: &XdpFilter) {
        filter.tell_as(Some(self.rules.told_id()));
    }

    /// Whether the kernel carries out `forward` verdicts.
    pub fn forwards_in_xdp(&self) -> bool {
        self.forward_in_xdp
    }

    fn kernel_can(&self, v: Verdict) -> bool {
        match v {
            Verdict::Drop => true,
            Verdict::Pass => !self.pass_to_tap,
            Verdict::Forward => self.forward_in_xdp,
            // The filter polices: it drops what is over the rate, and forwards the rest in
            // XDP or sends it to user space to be forwarded (which does not police again).
            Verdict::RateLimit => true,
        }
    }

    /// True if the kernel filter settles rule `i` itself: its action is drop or pass (or
    /// forward, forwarding in XDP), or a rate limit, which it polices. Such a rule's packets
    /// never reach user space, unless an earlier rule that only user space can decide sent
    /// them up, or (a rate limit, not forwarding in XDP) they are within the rate.
    pub fn decided_in_kernel(&self, i: usize) -> bool {
        self.rules
            .rules()
            .get(i)
            .is_some_and(|r| self.kernel_can(r.verdict()))
    }

    /// True if the kernel settles unclassifiable packets itself.
    pub fn unclassifiable_decided_in_kernel(&self) -> bool {
        self.kernel_can(self.rules.unclassifiable_verdict())
    }

    /// True if the kernel settles packets no rule matches.
    pub fn default_decided_in_kernel(&self) -> bool {
        self.kernel_can(self.rules.default_verdict())
    }

    /// The kernel filter's action for unclassifiable packets.
    pub fn kernel_unclassifiable(&self) -> Action {
        self.kernel_action(self.rules.unclassifiable_verdict())
    }

    fn kernel_action(&self, v: Verdict) -> Action {
        match v {
            Verdict::Drop => Action::Drop,
            Verdict::Pass if !self.pass_to_tap => Action::Pass,
            Verdict::Forward | Verdict::RateLimit if self.forward_in_xdp => Action::Forward,
            Verdict::Pass | Verdict::Forward | Verdict::RateLimit => Action::Redirect,
        }
    }

    /// The kernel filter's rules (one per rule, same order, matching every field the rule
    /// names) and default action. A rule whose verdict only user space carries out (a rate
    /// limit; a forward, not forwarding in XDP) redirects its packets to user space, which
    /// then evaluates the whole list again.
    pub fn kernel_rules(&self) -> crate::Result<(Vec<KernelRule>, Action)> {
        let rules = self
            .rules
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut k = r.matcher.kernel_rule(self.kernel_action(r.verdict()))?;
                // Each rule its own slot, in order: a forwarder whose rules change gives a
                // rule the slot it had by name instead (KernelRule::slot).
                k.slot = i as u16;
                k.police = match (&r.rate, &r.per_source) {
                    (None, _) => Police::None,
                    (Some(_), None) => Police::Rule,
                    (Some(_), Some(_)) => Police::Source,
                } as u8;
                Ok(k)
            })
            .collect::<crate::Result<_>>()?;
        Ok((rules, self.kernel_action(self.rules.default_verdict())))
    }

    /// The rate-limit rules' limits, by rule (`None` for the others): a rule's action in
    /// [`KernelShare::kernel_rules`] is what the filter does within the rate.
    pub fn kernel_limits(&self) -> Vec<Option<Limit>> {
        self.rules
            .rules()
            .iter()
            .map(|r| {
                r.rate.as_ref().map(|rate| Limit {
                    bucket: rate.bucket(),
                    per_source: r.per_source,
                })
            })
            .collect()
    }
}

impl Match {
    /// The XDP filter's rule for this match, taking `action` on a match: every key, laid out
    /// as the program compares it.
    pub fn kernel_rule(&self, action: Action) -> crate::Result<KernelRule> {
        let mut r = KernelRule {
            action: action as u8,
            protocol: self.protocol.unwrap_or(0),
            source: u8::from(self.src.is_some() || self.src_ports.is_some()),
            ..KernelRule::default()
        };
        (r.port_lo, r.port_hi) = port_range(self.dst_ports)?;
        (r.sport_lo, r.sport_hi) = port_range(self.src_ports)?;
        if let Some(p) = self.dst {
            (r.family, r.addr, r.mask) = prefix_words(p.addr, p.len)?;
        }
        if let Some(p) = self.src {
            let family;
            (family, r.saddr, r.smask) = prefix_words(p.addr, p.len)?;
            if r.family != 0 && r.family != family {
                return Err(crate::Error::MixedFamilies);
            }
            r.family = family;
        }
        self.lay_out_extras(&mut r);
        Ok(r)
    }

    /// The keys most rules leave out, each with its bit in `extra` set.
    fn lay_out_extras(&self, r: &mut KernelRule) {
        let mut named = |key: Extra, named: bool| {
            if named {
                r.extra |= key.bit();
            }
        };
        named(Extra::Vlan, self.vlan.is_some());
        named(
            Extra::Length,
            self.length.is_some_and(|l| l != (0, u16::MAX)),
        );
        named(Extra::TcpFlags, self.tcp_flags.is_some());
        named(Extra::IcmpType, self.icmp_type.is_some());
        named(Extra::IcmpCode, self.icmp_code.is_some());
        named(Extra::SrcSet, self.src_set.is_some());
        named(Extra::DstSet, self.dst_set.is_some());
        named(
            Extra::PortSets,
            self.src_port_set.is_some() || self.dst_port_set.is_some(),
        );
        // Sets are numbered from 1 here: 0 is none. The rules file holds at most MAX_SETS.
        let number =
            |set: Option<usize>| set.map_or(0, |i| (i + 1).min(usize::from(u8::MAX)) as u8);
        (r.sset, r.dset) = (number(self.src_set), number(self.dst_set));
        (r.spset, r.dpset) = (number(self.src_port_set), number(self.dst_port_set));
        r.vlan = self.vlan.unwrap_or(crate::abi::NO_VLAN);
        (r.len_lo, r.len_hi) = self.length.unwrap_or((0, u16::MAX));
        let flags = self.tcp_flags.unwrap_or_default();
        (r.tcp_mask, r.tcp_value) = (flags.mask, flags.value);
        r.icmp_type = self.icmp_type.unwrap_or(0);
        r.icmp_code = self.icmp_code.unwrap_or(0);
    }
}
