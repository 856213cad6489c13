//! What the kernel filter's verdict and reason numbers mean, in words: the comment a capture
//! of the forwarder (`xskit fwd --capture`) gives each packet, so that "why was this
//! dropped?" has an answer in the file.

use std::sync::{Arc, Mutex};

use xskit::capture::XdpAction;
use xskit_os::sync::LockUnpoisoned;

use crate::abi::Slot;
use crate::rules::{KernelShare, Verdict};

/// The filter's rules in order, then its counter slots ([`Slot`]), as the forwarder runs them.
#[derive(Clone, Debug)]
pub struct Reasons {
    /// Per rule: its name, its action, and whether the kernel matches it exactly (if not, it
    /// sends the packets it might match to user space, which evaluates the list again).
    rules: Vec<(String, &'static str)>,
    default: &'static str,
    unclassifiable: &'static str,
    /// Whether `forward` verdicts are carried out in XDP.
    xdp_forward: bool,
}

/// [`Reasons`] that follow a running forwarder's rules as they change
/// ([`crate::Forwarder::capture_reasons`]): a packet captured right around an apply may be
/// named by the other rules' reason of its number.
#[derive(Clone, Debug)]
pub struct LiveReasons(Arc<Mutex<Reasons>>);

impl LiveReasons {
    pub(crate) fn new(reasons: Reasons) -> Self {
        LiveReasons(Arc::new(Mutex::new(reasons)))
    }

    /// [`Reasons::comment`], by the rules in force.
    pub fn comment(&self, verdict: Option<u32>, why: Option<u32>) -> String {
        self.0.lock_unpoisoned().comment(verdict, why)
    }

    /// Follows `reasons` from now on.
    pub(crate) fn set(&self, reasons: Reasons) {
        *self.0.lock_unpoisoned() = reasons;
    }
}

impl Reasons {
    /// The reasons of the rules as the kernel runs them (with `forward` decided in XDP or
    /// not, as the forwarder runs it).
    pub fn new(share: KernelShare<'_>) -> Reasons {
        let rules = share.rule_set();
        Reasons {
            rules: rules
                .rules()
                .iter()
                .map(|r| (r.name.clone(), r.verdict().name()))
                .collect(),
            default: rules.default_verdict().name(),
            unclassifiable: rules.unclassifiable_verdict().name(),
            xdp_forward: share.forwards_in_xdp(),
        }
    }

    /// The reason `why` as (its words, the action it stands for or "-").
    fn reason(&self, why: u32) -> (String, &'static str) {
        if why < crate::MAX_RULES as u32 {
            return match self.rules.get(why as usize) {
                Some((name, action)) => (format!("rule {name}"), *action),
                None => (format!("rule #{why}"), "?"),
            };
        }
        match Slot::at(why) {
            None => ("an unknown reason".to_string(), "-"),
            Some(Slot::Default) => (Slot::Default.describe().into(), self.default),
            Some(Slot::Unclassifiable) => {
                (Slot::Unclassifiable.describe().into(), self.unclassifiable)
            }
            Some(slot) => (slot.describe().into(), "-"),
        }
    }

    /// The comment for a packet the program gave `verdict` (an XDP action number) for
    /// reason `why` (a rule's or a slot's counter index).
    pub fn comment(&self, verdict: Option<u32>, why: Option<u32>) -> String {
        let Some(why) = why else {
            return "xskit fwd: no verdict recorded".to_string();
        };
        let (reason, action) = self.reason(why);
        let forward = Verdict::Forward.name();
        let limit = Verdict::RateLimit.name();
        let what = match verdict.map(|v| (v, XdpAction::from_code(v))) {
            Some((_, Some(XdpAction::Drop))) if action == limit => {
                "dropped in XDP over its rate".to_string()
            }
            Some((_, Some(XdpAction::Drop))) => "dropped in XDP".to_string(),
            Some((_, Some(XdpAction::Pass))) => "passed to the kernel stack".to_string(),
            Some((_, Some(XdpAction::Tx))) => "sent back out (XDP_TX)".to_string(),
            Some((_, Some(XdpAction::Redirect)))
                if (action == forward || action == limit) && self.xdp_forward =>
            {
                "forwarded in XDP".to_string()
            }
            Some((_, Some(XdpAction::Redirect))) => "to xskit fwd in user space".to_string(),
            Some((other, _)) => format!("XDP action {other}"),
            None => "?".to_string(),
        };
        if action == "-" {
            format!("xskit fwd: {what}: {reason}")
        } else {
            format!("xskit fwd: {what}: {reason} ({action})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(xdp_forward: bool) -> Reasons {
        Reasons::new(crate::tests::dns_and_source_rules().kernel_share(xdp_forward))
    }

    const DROP: Option<u32> = Some(XdpAction::Drop as u32);
    const REDIRECT: Option<u32> = Some(XdpAction::Redirect as u32);

    #[test]
    fn comments_name_the_verdict_and_the_rule() {
        let r = reasons(false);
        assert_eq!(
            r.comment(DROP, Some(0)),
            "xskit fwd: dropped in XDP: rule no-dns (drop)"
        );
        assert_eq!(
            r.comment(REDIRECT, Some(Slot::Default.index())),
            "xskit fwd: to xskit fwd in user space: the default (forward)"
        );
        assert_eq!(
            r.comment(DROP, Some(Slot::Unclassifiable.index())),
            "xskit fwd: dropped in XDP: unclassifiable (drop)"
        );
        assert_eq!(
            r.comment(Some(XdpAction::Pass as u32), Some(1)),
            "xskit fwd: passed to the kernel stack: rule from-a (pass)",
            "a rule on a source address is decided in the kernel as any other"
        );
        assert_eq!(r.comment(None, None), "xskit fwd: no verdict recorded");
        assert_eq!(
            r.comment(Some(9), Some(0)),
            "xskit fwd: XDP action 9: rule no-dns (drop)"
        );
    }

    #[test]
    fn every_slot_has_words_and_an_unknown_index_says_so() {
        let r = reasons(false);
        for slot in Slot::ALL {
            let comment = r.comment(DROP, Some(slot.index()));
            assert!(comment.contains(slot.describe()), "{comment}");
        }
        let past = Slot::ALL.len() as u32 + crate::MAX_RULES as u32;
        assert!(r.comment(DROP, Some(past)).contains("an unknown reason"));
        assert!(r.comment(DROP, Some(7)).contains("rule #7"));
    }

    #[test]
    fn forwarding_in_xdp_is_named_only_where_the_forwarder_does_it() {
        let default = Some(Slot::Default.index());
        assert!(reasons(true)
            .comment(REDIRECT, default)
            .contains("forwarded in XDP"));
        assert!(reasons(false)
            .comment(REDIRECT, default)
            .contains("to xskit fwd in user space"));
    }
}
