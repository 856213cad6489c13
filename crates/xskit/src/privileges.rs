//! The capabilities xskit needs, which of them this process lacks, and the advice a refused
//! operation gives: the capability it names is the one missing, not a list to guess from.

/// A capability xskit uses: its name, its bit in the kernel's masks, and what needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capability {
    /// As `capabilities(7)` and systemd's `CapabilityBoundingSet=` spell it.
    pub name: &'static str,
    /// Its number (`CAP_*` in linux/capability.h).
    pub bit: u32,
    /// What xskit does with it.
    pub used_for: &'static str,
}

/// Every capability xskit needs to run as a user other than root: what a service's
/// `CapabilityBoundingSet=` and `AmbientCapabilities=` give it (the unit in `dist/systemd`
/// names exactly these).
pub const NEEDED: [Capability; 5] = [
    Capability {
        name: "CAP_NET_ADMIN",
        bit: 12,
        used_for: "attaching XDP programs, and changing links: promiscuity, queues",
    },
    Capability {
        name: "CAP_NET_RAW",
        bit: 13,
        used_for: "AF_XDP and AF_PACKET sockets",
    },
    Capability {
        name: "CAP_IPC_LOCK",
        bit: 14,
        used_for: "pinning a UMEM larger than RLIMIT_MEMLOCK",
    },
    Capability {
        name: "CAP_PERFMON",
        bit: 38,
        used_for: "the verifier's leave for what xskit's programs do: pointer arithmetic, clocks",
    },
    Capability {
        name: "CAP_BPF",
        bit: 39,
        used_for: "loading BPF programs and maps",
    },
];

/// The process's effective capabilities (CapEff in /proc/self/status), if it can be read.
pub fn effective() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    cap_eff(&status)
}

/// CapEff's mask from the text of a /proc/PID/status file.
fn cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Those of [`NEEDED`] that `effective` lacks.
pub fn missing(effective: u64) -> Vec<Capability> {
    NEEDED
        .iter()
        .filter(|c| effective & (1u64 << c.bit) == 0)
        .copied()
        .collect()
}

/// What to do about a refusal, for a process with `effective` capabilities (unknown:
/// `None`): the ones it lacks by name, or, when it lacks none, that something else refused.
pub(crate) fn advice(effective: Option<u64>) -> String {
    let all: Vec<&str> = NEEDED.iter().map(|c| c.name).collect();
    let Some(mask) = effective else {
        return format!(
            "xskit needs root, or {}: run as root, e.g. with sudo",
            all.join(", ")
        );
    };
    let lacking = missing(mask);
    if lacking.is_empty() {
        return format!(
            "the process has every capability xskit uses ({}), so something else refused: a \
             security module (AppArmor, SELinux), a seccomp filter, or a sysctl such as \
             kernel.unprivileged_bpf_disabled",
            all.join(", ")
        );
    }
    let named: Vec<String> = lacking
        .iter()
        .map(|c| format!("{} ({})", c.name, c.used_for))
        .collect();
    format!(
        "this process lacks {}: run as root (e.g. with sudo), or give it {} (setcap, or \
         AmbientCapabilities= in a service: dist/systemd/xskit-fwd@.service)",
        named.join(", "),
        all.join(", ")
    )
}

/// What to do about a refusal, for this process as it is now (see [`NEEDED`]).
pub fn advice_now() -> String {
    advice(effective())
}

/// Whether the process lacks any capability xskit needs (false when it cannot tell).
pub(crate) fn lacks_any() -> bool {
    effective().is_some_and(|mask| !missing(mask).is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: u64 = (1 << 12) | (1 << 13) | (1 << 14) | (1 << 38) | (1 << 39);

    #[test]
    fn the_mask_is_read_from_proc_status() {
        let status = "Name:\txskit\nCapInh:\t0000000000000000\nCapEff:\t000000c000007000\n";
        assert_eq!(cap_eff(status), Some(ALL));
        assert_eq!(cap_eff("Name:\tx\n"), None);
        assert_eq!(cap_eff("CapEff:\tzz\n"), None);
    }

    #[test]
    fn the_advice_names_exactly_what_is_missing() {
        for c in NEEDED {
            let text = advice(Some(ALL & !(1 << c.bit)));
            let lacks = text.split(": run as root").next().unwrap();
            assert!(lacks.contains(c.name), "{text}");
            for other in NEEDED.iter().filter(|o| o.name != c.name) {
                assert!(!lacks.contains(other.name), "{text}");
            }
        }
        assert!(advice(Some(u64::MAX)).contains("something else refused"));
        assert!(advice(None).contains("CAP_BPF"));
        assert_eq!(missing(ALL), []);
        assert_eq!(missing(0).len(), NEEDED.len());
    }
}
