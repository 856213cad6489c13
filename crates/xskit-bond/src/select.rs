//! Which member an active-backup bond makes active, as Linux's bonding decides it
//! (`bond_choose_primary_or_current`, then the first member that is up): the primary when
//! `primary_reselect` lets it take over, else the active member while it stays up, else the
//! first member that is up.

/// When a primary that comes back (or is set) takes over from an active member that is up:
/// bonding's `primary_reselect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PrimaryReselect {
    /// Always (Linux's default).
    #[default]
    Always,
    /// Only if its link is faster, or as fast and full duplex where the active one is not.
    Better,
    /// Only when the active member fails.
    Failure,
}

impl PrimaryReselect {
    /// The name Linux gives it.
    pub fn name(self) -> &'static str {
        match self {
            PrimaryReselect::Always => "always",
            PrimaryReselect::Better => "better",
            PrimaryReselect::Failure => "failure",
        }
    }
}

/// A member's link as `primary_reselect better` compares them: speed in Mbit/s and full
/// duplex; `None` when the driver does not say (it counts as slowest).
pub type LinkSpeed = Option<(u32, bool)>;

/// The active member after a change: `up` per member, the `current` active member, the
/// `primary`, and each member's `speeds` (for [`PrimaryReselect::Better`]).
pub fn choose_active(
    up: &[bool],
    current: Option<usize>,
    primary: Option<usize>,
    reselect: PrimaryReselect,
    speeds: &[LinkSpeed],
) -> Option<usize> {
    let is_up = |m: Option<usize>| m.filter(|&m| up.get(m).copied().unwrap_or(false));
    let chosen = match (is_up(primary), is_up(current)) {
        (None, current) => current,
        (Some(p), None) => Some(p),
        (Some(p), Some(c)) if p == c => Some(c),
        (Some(p), Some(c)) => match reselect {
            PrimaryReselect::Always => Some(p),
            PrimaryReselect::Failure => Some(c),
            PrimaryReselect::Better => {
                let speed = |m: usize| speeds.get(m).copied().flatten().unwrap_or((0, false));
                let ((ps, pd), (cs, cd)) = (speed(p), speed(c));
                if ps > cs || (ps == cs && pd && !cd) {
                    Some(p)
                } else {
                    Some(c)
                }
            }
        },
    };
    chosen.or_else(|| up.iter().position(|&u| u))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: LinkSpeed = Some((25_000, true));
    const SLOW: LinkSpeed = Some((10_000, true));

    #[test]
    fn without_a_primary_the_active_member_stays_while_it_is_up() {
        let all = [true, true, true];
        assert_eq!(
            choose_active(&all, Some(2), None, PrimaryReselect::Always, &[]),
            Some(2)
        );
        assert_eq!(
            choose_active(
                &[true, true, false],
                Some(2),
                None,
                PrimaryReselect::Always,
                &[]
            ),
            Some(0),
            "the first member up takes over"
        );
        assert_eq!(
            choose_active(&[false; 3], Some(0), None, PrimaryReselect::Always, &[]),
            None
        );
    }

    #[test]
    fn the_primary_comes_back_as_primary_reselect_says() {
        let up = [true, true];
        let speeds = [SLOW, FAST];
        let back =
            |reselect, speeds: &[LinkSpeed]| choose_active(&up, Some(1), Some(0), reselect, speeds);
        assert_eq!(back(PrimaryReselect::Always, &speeds), Some(0));
        assert_eq!(back(PrimaryReselect::Failure, &speeds), Some(1));
        assert_eq!(
            back(PrimaryReselect::Better, &speeds),
            Some(1),
            "slower: stays out"
        );
        assert_eq!(
            back(PrimaryReselect::Better, &[FAST, SLOW]),
            Some(0),
            "faster"
        );
        assert_eq!(
            back(PrimaryReselect::Better, &[SLOW, SLOW]),
            Some(1),
            "as fast is not better"
        );
        assert_eq!(
            back(
                PrimaryReselect::Better,
                &[Some((10_000, true)), Some((10_000, false))]
            ),
            Some(0),
            "as fast and full duplex against half is better"
        );
    }

    #[test]
    fn the_primary_takes_over_whatever_the_policy_when_the_active_member_is_down() {
        for reselect in [
            PrimaryReselect::Always,
            PrimaryReselect::Better,
            PrimaryReselect::Failure,
        ] {
            assert_eq!(
                choose_active(&[true, false], Some(1), Some(0), reselect, &[SLOW, FAST]),
                Some(0),
                "{}",
                reselect.name()
            );
        }
    }
}
