//! The forwarder's configuration checked before anything is opened: plain logic over the
//! configuration and the machine's CPUs, tested without root.

use std::collections::HashMap;

use crate::config::ForwardConfig;
use crate::error::{Error, Result};
use crate::rules::{RuleSet, Verdict};

impl ForwardConfig {
    /// Checks what [`crate::Forwarder::new`] checks before it opens anything (the interfaces'
    /// count, the bonds, the CPUs, the rules against the mode), so that a caller can report
    /// it beside mistakes of its own.
    pub fn validate(&self) -> Result<()> {
        let cpus = CpuFacts::here()?;
        check_config(self, &cpus).map(|_| ())
    }
}

/// The CPUs a worker may be pinned to.
#[derive(Clone, Debug)]
pub(crate) struct CpuFacts {
    /// CPUs online on the machine (0 .. online).
    pub(crate) online: usize,
    /// CPUs this process may run on.
    pub(crate) allowed: Vec<usize>,
}

impl CpuFacts {
    /// This machine's and this process's.
    pub(crate) fn here() -> Result<CpuFacts> {
        Ok(CpuFacts {
            online: xskit_os::online_cpus(),
            allowed: xskit_os::allowed_cpus().map_err(Error::Syscall)?,
        })
    }
}

/// Checks CPUs to pin workers to: each must exist on the machine (counted online, not from
/// this process's affinity) and be one this process may run on.
fn check_cpus(cpus: &[usize], facts: &CpuFacts) -> Result<()> {
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= facts.online) {
        return Err(Error::NoSuchCpu {
            cpu,
            last: facts.online.saturating_sub(1),
        });
    }
    if let Some(&cpu) = cpus.iter().find(|c| !facts.allowed.contains(c)) {
        let list: Vec<String> = facts.allowed.iter().map(|c| c.to_string()).collect();
        return Err(Error::CpuNotAllowed {
            cpu,
            allowed: list.join(","),
        });
    }
    Ok(())
}

/// Checks what can be checked before anything is opened; returns the rules as the workers
/// and the kernel filter will use them.
pub(crate) fn check_config(config: &ForwardConfig, cpus: &CpuFacts) -> Result<RuleSet> {
    let n = config.interfaces.len();
    if n == 0 || n > 2 {
        return Err(Error::InterfaceCount { count: n });
    }
    if n == 2 && config.interfaces[0] == config.interfaces[1] {
        return Err(Error::SameInterface {
            name: config.interfaces[0].clone(),
        });
    }
    check_bonds(config)?;
    if config.xdp_forward
        && (n != 2 || config.reflect || config.respond.is_some() || config.tap.is_some())
    {
        return Err(Error::XdpForwardConflict);
    }
    let rules = config.rules.clone();
    let forwards = rules.default_verdict() == Verdict::Forward
        || rules
            .rules()
            .iter()
            .any(|r| matches!(r.verdict(), Verdict::Forward | Verdict::RateLimit));
    if n == 1 && !config.reflect && forwards {
        return Err(Error::NowhereToForward {
            iface: config.interfaces[0].clone(),
        });
    }
    xskit_pipeline::check_vector_size(config.vector)?;
    config.socket.validate()?;
    check_cpus(&config.cpus, cpus)?;
    Ok(rules)
}

/// Checks the bonds: each is used as a side, has 1 to 8 members, and its primary among
/// them; no interface is in two places.
fn check_bonds(config: &ForwardConfig) -> Result<()> {
    if config.bonds.is_empty() {
        return Ok(());
    }
    if config.xdp_forward
        && config
            .bonds
            .iter()
            .any(|b| b.mode == xskit_bond::BondMode::Broadcast)
    {
        return Err(Error::BondXdpForward);
    }
    let mut used: HashMap<String, String> = HashMap::new();
    let mut claim = |name: &str, place: String| match used.get(name) {
        Some(first) => Err(Error::InterfaceTwice {
            name: name.to_string(),
            first: first.clone(),
            second: place,
        }),
        None => {
            used.insert(name.to_string(), place);
            Ok(())
        }
    };
    for bond in &config.bonds {
        claim(&bond.name, format!("the name of bond {}", bond.name))?;
    }
    for bond in &config.bonds {
        if !config.interfaces.contains(&bond.name) {
            return Err(Error::BondNotUsed {
                name: bond.name.clone(),
            });
        }
        let count = bond.members.len();
        if count == 0 || count > xskit_bond::MAX_MEMBERS {
            return Err(Error::Bond(xskit_bond::Error::MemberCount { count }));
        }
        if let Some(arp) = &bond.arp {
            arp.validate().map_err(Error::Bond)?;
        }
        if matches!(bond.mode, xskit_bond::BondMode::Lacp { .. }) {
            bond.lacp.validate().map_err(Error::Bond)?;
        }
        if let Some(primary) = bond.primary.as_ref().filter(|p| !bond.members.contains(p)) {
            return Err(Error::PrimaryNotMember {
                bond: bond.name.clone(),
                primary: primary.clone(),
                members: bond.members.join(","),
            });
        }
        for m in &bond.members {
            claim(m, format!("a member of bond {}", bond.name))?;
        }
    }
    for name in &config.interfaces {
        if !config.bonds.iter().any(|b| &b.name == name) {
            claim(name, "a side of its own".into())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use xskit_bond::{ArpConfig, BondMode};

    use super::*;
    use crate::BondConfig;

    fn cpus() -> CpuFacts {
        CpuFacts {
            online: 4,
            allowed: vec![0, 1, 2],
        }
    }

    fn two() -> ForwardConfig {
        ForwardConfig::new(["a0", "b0"])
    }

    fn refused(config: ForwardConfig) -> String {
        check_config(&config, &cpus()).unwrap_err().to_string()
    }

    fn bond(name: &str, members: &[&str], mode: BondMode) -> BondConfig {
        BondConfig::new(name, members.iter().copied(), mode)
    }

    #[test]
    fn a_plain_pair_passes_with_its_rules() {
        let config = two().xdp_forward(true);
        assert_eq!(check_config(&config, &cpus()).unwrap(), config.rules);
    }

    #[test]
    fn interface_count_and_sameness_are_checked() {
        assert!(matches!(
            check_config(&ForwardConfig::new(Vec::<String>::new()), &cpus()),
            Err(Error::InterfaceCount { count: 0 })
        ));
        assert!(matches!(
            check_config(&ForwardConfig::new(["a", "b", "c"]), &cpus()),
            Err(Error::InterfaceCount { count: 3 })
        ));
        assert!(matches!(
            check_config(&ForwardConfig::new(["a", "a"]), &cpus()),
            Err(Error::SameInterface { .. })
        ));
    }

    #[test]
    fn one_interface_must_reflect_or_have_nothing_to_forward() {
        let one = || ForwardConfig::new(["a0"]);
        assert!(matches!(
            check_config(&one(), &cpus()),
            Err(Error::NowhereToForward { .. })
        ));
        assert!(check_config(&one().reflect(true), &cpus()).is_ok());
        let drop_all = RuleSet::with_default(Verdict::Drop);
        assert!(check_config(&one().rules(drop_all), &cpus()).is_ok());
    }

    #[test]
    fn forwarding_in_xdp_needs_two_plain_sides() {
        let addr = Some(Ipv4Addr::new(198, 51, 100, 9));
        for config in [
            ForwardConfig::new(["a0"]).reflect(true).xdp_forward(true),
            two().xdp_forward(true).respond(addr),
            two().xdp_forward(true).tap(Some("xsk-tap0".into())),
        ] {
            assert!(matches!(
                check_config(&config, &cpus()),
                Err(Error::XdpForwardConflict)
            ));
        }
        let broadcast = ForwardConfig::new(["bond0", "b0"])
            .bonds(vec![bond("bond0", &["m0", "m1"], BondMode::Broadcast)])
            .xdp_forward(true);
        assert!(matches!(
            check_config(&broadcast, &cpus()),
            Err(Error::BondXdpForward)
        ));
    }

    #[test]
    fn an_interface_is_used_in_one_place_only() {
        let ab = BondMode::ActiveBackup;
        let twice =
            |bonds: Vec<BondConfig>| refused(ForwardConfig::new(["bond0", "b0"]).bonds(bonds));
        assert!(twice(vec![bond("bond0", &["b0"], ab)]).contains("b0"));
        assert!(twice(vec![bond("bond0", &["m0", "m0"], ab)]).contains("m0"));
        assert!(
            twice(vec![bond("bond0", &["m0"], ab), bond("bond0", &["m1"], ab)]).contains("bond0")
        );
    }

    #[test]
    fn bonds_are_sides_with_1_to_8_members_and_their_primary_among_them() {
        let ab = BondMode::ActiveBackup;
        let config = |b: BondConfig| ForwardConfig::new(["bond0", "b0"]).bonds(vec![b]);
        assert!(matches!(
            check_config(&two().bonds(vec![bond("bond9", &["m0"], ab)]), &cpus()),
            Err(Error::BondNotUsed { .. })
        ));
        for members in [vec![], (0..9).map(|i| format!("m{i}")).collect::<Vec<_>>()] {
            let b = BondConfig::new("bond0", members, ab);
            assert!(matches!(
                check_config(&config(b), &cpus()),
                Err(Error::Bond(xskit_bond::Error::MemberCount { .. }))
            ));
        }
        let mut b = bond("bond0", &["m0", "m1"], ab);
        b.primary = Some("m7".into());
        assert!(matches!(
            check_config(&config(b), &cpus()),
            Err(Error::PrimaryNotMember { .. })
        ));
        let mut b = bond("bond0", &["m0", "m1"], ab);
        b.arp = Some(ArpConfig::new(
            std::time::Duration::from_millis(100),
            Vec::new(),
        ));
        assert!(matches!(
            check_config(&config(b), &cpus()),
            Err(Error::Bond(_))
        ));
        assert!(check_config(&config(bond("bond0", &["m0", "m1"], ab)), &cpus()).is_ok());
    }

    #[test]
    fn vector_sockets_and_cpus_are_checked() {
        assert!(refused(two().vector(0)).contains("vector"));
        assert!(matches!(
            check_config(&two().cpus(vec![7]), &cpus()),
            Err(Error::NoSuchCpu { cpu: 7, last: 3 })
        ));
        assert!(matches!(
            check_config(&two().cpus(vec![3]), &cpus()),
            Err(Error::CpuNotAllowed { cpu: 3, .. })
        ));
        assert!(check_config(&two().cpus(vec![0, 2]), &cpus()).is_ok());
        let bad_ring = xskit::SocketConfig::default().rx_size(100);
        assert!(check_config(&two().socket(bad_ring), &cpus()).is_err());
    }
}
