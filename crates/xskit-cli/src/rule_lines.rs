//! Which rules the live lines and the summary show: every rule of a short list; of a long one
//! (up to 4,096 rules), the busiest, in rule order, and one line for the rest.

use crate::opts::thousands;

/// Rules shown a line each, at most.
pub(crate) const SHOWN_RULES: usize = 16;

/// The rules to show, as indices in rule order, from their packet counts (`counts`: in the
/// interval, or in all); and, for a list longer than [`SHOWN_RULES`], what the others did.
pub(crate) fn shown(counts: &[u64]) -> (Vec<usize>, Option<String>) {
    if counts.len() <= SHOWN_RULES {
        return ((0..counts.len()).collect(), None);
    }
    let mut busy: Vec<usize> = (0..counts.len()).filter(|&i| counts[i] > 0).collect();
    busy.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
    let rest: Vec<usize> = busy.split_off(busy.len().min(SHOWN_RULES));
    busy.sort_unstable();
    let idle = counts.len() - busy.len() - rest.len();
    let rest_packets: u64 = rest.iter().map(|&i| counts[i]).sum();
    let line = if rest.is_empty() {
        format!("{} rules matched nothing", thousands(idle as u64))
    } else {
        format!(
            "{} more rules matched {} packets; {} matched nothing",
            thousands(rest.len() as u64),
            thousands(rest_packets),
            thousands(idle as u64)
        )
    };
    (busy, Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_list_is_shown_whole() {
        let (rules, rest) = shown(&[0, 5, 0]);
        assert_eq!((rules, rest), (vec![0, 1, 2], None));
    }

    #[test]
    fn a_long_list_shows_its_busiest_in_order_and_counts_the_rest() {
        let mut counts = vec![0u64; 4097];
        // Twenty busy rules: 1,000 packets at rule 4,000, then 1 to 19 at rules 0 to 18.
        counts[4000] = 1000;
        for (i, c) in counts.iter_mut().enumerate().take(19) {
            *c = i as u64 + 1;
        }
        let (rules, rest) = shown(&counts);
        assert_eq!(rules.len(), SHOWN_RULES);
        assert!(rules.windows(2).all(|w| w[0] < w[1]), "in rule order");
        assert!(rules.contains(&4000) && !rules.contains(&0) && !rules.contains(&3));
        // Left out: the rules of 1, 2, 3 and 4 packets.
        assert_eq!(
            rest.as_deref(),
            Some("4 more rules matched 10 packets; 4,077 matched nothing")
        );
        let (rules, rest) = shown(&[0; 20]);
        assert!(rules.is_empty());
        assert_eq!(rest.as_deref(), Some("20 rules matched nothing"));
    }
}
