use xskit_pipeline::RingOccupancy;

use super::*;

/// A forwarder taken apart, for tests that drive its workers round by round.
pub(crate) struct Parts<P: crate::bonded::SocketPort> {
    pub(crate) workers: Vec<Worker<Side<P>>>,
    pub(crate) cells: Vec<WorkerCells>,
    pub(crate) shared: SharedFrames,
    pub(crate) total: usize,
    pub(crate) replies: ReplyCounters,
}

impl<K: Kernel> Forwarding<K> {
    /// Its workers, their cells and the frames, as set up.
    pub(crate) fn into_parts(self) -> Parts<K::Port> {
        Parts {
            workers: self.workers,
            cells: self.cells,
            shared: self.shared,
            total: self.total,
            replies: self.replies,
        }
    }
}

fn end(fill: usize, rx: usize, tx: usize, ledger: usize) -> Result<WorkerEnd> {
    Ok(WorkerEnd {
        ledger_in_kernel: ledger,
        rings: RingOccupancy { fill, rx, tx },
        error: None,
    })
}

#[test]
fn every_frame_is_found_in_the_pool_the_rings_or_the_kernel() {
    let (frames, error) =
        account_frames(100, 60, vec![end(20, 5, 5, 35), end(4, 0, 1, 5)]).unwrap();
    assert_eq!(
        (frames.fill, frames.rx, frames.tx, frames.kernel_held),
        (24, 5, 6, 5)
    );
    assert_eq!(frames.unaccounted, 0);
    assert!(error.is_none());
}

#[test]
fn a_missing_frame_and_a_ledger_short_of_the_rings_are_both_unaccounted() {
    let (frames, _) = account_frames(100, 59, vec![end(20, 5, 5, 35), end(4, 0, 1, 5)]).unwrap();
    assert_eq!(frames.unaccounted, 1);
    let (frames, _) = account_frames(10, 0, vec![end(6, 2, 2, 8)]).unwrap();
    assert_eq!((frames.kernel_held, frames.unaccounted), (0, 2));
}

#[test]
fn a_workers_error_is_kept_and_a_failed_worker_fails_the_account() {
    let mut stopped = end(0, 0, 0, 0).unwrap();
    stopped.error = Some(Error::FramesTaken);
    let (_, error) = account_frames(0, 0, vec![Ok(stopped)]).unwrap();
    assert!(matches!(error, Some(Error::FramesTaken)));
    assert!(account_frames(0, 0, vec![Err(Error::FramesTaken)]).is_err());
}

/// The forwarder on a fake kernel, built and run by the same code as on the real one: its
/// workers on threads over in-memory devices, the supervisor on the clock.
mod over_a_fake_kernel {
    use std::cell::RefCell;
    use std::rc::Rc;

    use xskit_bond::MemberChange;

    use super::*;
    use crate::kernel::fake::{Devices, Fake};

    /// Ticks before a test gives up on what it waits for: the run then ends and its
    /// assertions fail, rather than the test hanging.
    const GIVE_UP_AFTER: usize = 3000;

    fn cpus() -> CpuFacts {
        CpuFacts {
            online: 2,
            allowed: vec![0, 1],
        }
    }

    /// Runs `config` on `kernel`, calling `step` on each tick with the counters and the
    /// fake's devices until it says the test is done. `step` must not panic (the workers
    /// would never be told to stop): it notes what it saw, and the test asserts after.
    fn run_until(
        kernel: Fake,
        config: ForwardConfig,
        mut step: impl FnMut(&Counters, &Rc<RefCell<Devices>>) -> bool,
    ) -> (Report, Rc<RefCell<Devices>>) {
        let devices = Rc::clone(&kernel.devices);
        let forwarding = Forwarding::new(kernel, config, &cpus(), false).expect("set up");
        let stop = AtomicBool::new(false);
        let mut ticks = 0;
        let report = forwarding
            .run(&stop, Duration::from_millis(1), |counters| {
                ticks += 1;
                if step(counters, &devices) || ticks == GIVE_UP_AFTER {
                    stop.store(true, Ordering::Relaxed);
                }
            })
            .expect("a run");
        (report, devices)
    }

    #[test]
    fn frames_cross_and_a_link_that_goes_down_is_counted() {
        let kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        let a_end = kernel.devices.borrow().ends.get(&(0, 0)).cloned();
        assert!(a_end.is_none(), "no socket before the forwarder opens one");
        let mut sent = false;
        let (report, devices) =
            run_until(kernel, ForwardConfig::new(["a0", "b0"]), |c, devices| {
                if let Some(end) = devices.borrow().ends.get(&(0, 0)).filter(|_| !sent) {
                    for seq in 0..5 {
                        end.inject(&crate::tests::udp(9, seq));
                    }
                    sent = true;
                }
                if c.ports[1].user.tx_packets == 5 {
                    devices.borrow_mut().up[1] = false;
                }
                c.ports[1].link_changes == 1
            });
        let b = &report.counters.ports[1];
        assert_eq!(report.counters.ports[0].user.rx_packets, 5, "{report:?}");
        assert_eq!(
            (b.user.tx_packets, b.link_up, b.link_changes),
            (5, false, 1)
        );
        assert_eq!(devices.borrow().ends[&(1, 0)].take().len(), 5);
        assert_eq!(report.frames.unaccounted, 0, "{:?}", report.frames);
        assert!(report.fault.is_none(), "{report:?}");
    }

    fn rules(text: &str) -> RuleSet {
        RuleSet::from_toml(text).expect("rules")
    }

    const DROP_7: &str = "[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\n\
                          action = \"drop\"\n";
    const DROP_9: &str = "[[rule]]\nname = \"drop-9\"\nprotocol = \"udp\"\ndst_port = 9\n\
                          action = \"drop\"\n";

    /// Port 7's three packets, then port 9's five forwarded; then rules with port 9 dropped
    /// first and drop-7 moved second are applied while it runs; then port 9's five more.
    #[test]
    fn an_apply_changes_the_verdicts_at_once_and_a_kept_rule_keeps_its_counts() {
        let kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        let mut config = ForwardConfig::new(["a0", "b0"]);
        config.rules = rules(DROP_7);
        let devices = Rc::clone(&kernel.devices);
        let forwarding = Forwarding::new(kernel, config, &cpus(), false).expect("set up");
        let changer = RuleChanger::new(forwarding.apply_sender.clone());
        let (answer_to, answers) = std::sync::mpsc::channel();
        let stop = AtomicBool::new(false);
        let (mut phase, mut ticks) = (0, 0);
        let mut at_apply = None;
        let report = std::thread::scope(|s| {
            forwarding.run(&stop, Duration::from_millis(1), |c| {
                ticks += 1;
                let devices = devices.borrow();
                let Some(end) = devices.ends.get(&(0, 0)) else {
                    return;
                };
                match phase {
                    0 => {
                        (0..3).for_each(|seq| end.inject(&crate::tests::udp(7, seq)));
                        (0..5).for_each(|seq| end.inject(&crate::tests::udp(9, seq)));
                        phase = 1;
                    }
                    1 if c.ports[1].user.tx_packets == 5 && c.rules[0].packets == 3 => {
                        at_apply = Some(c.clone());
                        let (changer, answer_to) = (changer.clone(), answer_to.clone());
                        let next = rules(&format!("{DROP_9}{DROP_7}"));
                        s.spawn(move || {
                            let _ = answer_to.send(changer.apply(next, Duration::from_secs(60)));
                        });
                        phase = 2;
                    }
                    2 if c.rules_generation == 2 => {
                        (0..5).for_each(|seq| end.inject(&crate::tests::udp(9, 100 + seq)));
                        phase = 3;
                    }
                    3 if c.rules[0].packets == 5 => stop.store(true, Ordering::Relaxed),
                    _ => {}
                }
                if ticks == GIVE_UP_AFTER {
                    stop.store(true, Ordering::Relaxed);
                }
            })
        })
        .expect("a run");
        let applied = answers.recv().expect("an answer").expect("applied");
        assert_eq!(
            (
                applied.generation,
                applied.rules,
                applied.kept,
                applied.added,
                applied.removed
            ),
            (2, 2, 1, 1, 0)
        );
        let before = at_apply.expect("the apply was asked");
        assert_eq!(
            (before.rules_generation, before.rules[0].name.as_str()),
            (1, "drop-7")
        );
        let c = &report.counters;
        let names: Vec<&str> = c.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["drop-9", "drop-7", "default"], "{c:?}");
        assert_eq!(c.rules_generation, 2);
        assert_eq!(c.rules[0].packets, 5, "port 9 dropped once applied: {c:?}");
        assert_eq!(
            c.rules[1].packets, 3,
            "drop-7 kept its count where it moved: {c:?}"
        );
        assert_eq!(c.rules[2].packets, 5, "the default kept its five: {c:?}");
        assert_eq!(
            c.ports[1].user.tx_packets, 5,
            "nothing of port 9 crossed after: {c:?}"
        );
        assert_eq!(report.frames.unaccounted, 0, "{:?}", report.frames);
    }

    #[test]
    fn an_apply_that_does_not_fit_leaves_the_running_rules_alone() {
        let kernel = Fake::new(&[("a0", 1500), ("b0", 1500)]);
        let calls = kernel.calls.clone();
        let mut config = ForwardConfig::new(["a0", "b0"]);
        config.rules = rules(DROP_7);
        let mut forwarding = Forwarding::new(kernel, config, &cpus(), false).expect("set up");
        let installs = |calls: &std::cell::RefCell<Vec<String>>| {
            calls
                .borrow()
                .iter()
                .filter(|c| c.starts_with("install"))
                .count()
        };
        let before = installs(&calls);
        let with_set = rules(&format!(
            "[[set]]\nname = \"s\"\nprefixes = [\"203.0.113.0/24\"]\n{DROP_7}"
        ));
        let refused = forwarding
            .apply(with_set)
            .expect_err("a set the filter was not loaded with");
        assert!(matches!(refused, Error::SetsChanged { .. }), "{refused}");
        assert_eq!(installs(&calls), before, "no filter was touched");
        assert_eq!(forwarding.generation.number, 1);
        let named = |f: &Forwarding<Fake>| f.reasons.comment(Some(1), Some(0));
        assert!(
            named(&forwarding).contains("drop-7"),
            "{}",
            named(&forwarding)
        );
        let applied = forwarding.apply(rules(DROP_9)).expect("applied");
        assert!(
            named(&forwarding).contains("drop-9"),
            "captures name the rules in force"
        );
        assert_eq!(
            (
                applied.generation,
                applied.kept,
                applied.added,
                applied.removed
            ),
            (2, 0, 1, 1)
        );
        assert_eq!(
            installs(&calls),
            before + 2,
            "both filters got the new rules"
        );
    }

    #[test]
    fn a_vanished_bond_member_ends_the_run_naming_its_bond() {
        let kernel = Fake::new(&[("a0", 1500), ("m0", 1500), ("m1", 1500)]);
        let calls = Rc::clone(&kernel.calls);
        let bond = BondConfig::new("bond0", ["m0", "m1"], xskit_bond::BondMode::ActiveBackup);
        let config = ForwardConfig::new(["a0", "bond0"]).bonds(vec![bond]);
        let (report, _) = run_until(kernel, config, |_, devices| {
            devices.borrow_mut().gone = Some(2);
            false
        });
        let fault = report.fault.expect("a fault");
        assert!(
            fault.starts_with("m1 was deleted or moved (a member of bond bond0"),
            "{fault}"
        );
        let calls = calls.borrow();
        assert!(calls.iter().any(|c| c == "open bond bond0"), "{calls:?}");
        assert!(
            calls.iter().any(|c| c == "m1 stops redirecting 1 queue(s)"),
            "the filters stop redirecting before the rings drain: {calls:?}"
        );
    }

    #[test]
    fn an_active_members_carrier_loss_fails_over_and_reprograms_the_filters() {
        let kernel = Fake::new(&[("a0", 1500), ("m0", 1500), ("m1", 1500)]);
        let bond = BondConfig::new("bond0", ["m0", "m1"], xskit_bond::BondMode::ActiveBackup);
        let config = ForwardConfig::new(["a0", "bond0"]).bonds(vec![bond]);
        let inactive = |d: &Devices| -> Vec<Option<bool>> {
            d.settings
                .iter()
                .map(|s| s.as_ref().map(|s| s.inactive))
                .collect()
        };
        let mut at_start = None;
        let (report, devices) = run_until(kernel, config, |c, devices| {
            let mut d = devices.borrow_mut();
            if at_start.is_none() {
                at_start = Some(inactive(&d));
                let down = MemberChange {
                    member: 0,
                    up: false,
                    removed: false,
                };
                d.member_changes.entry(1).or_default().push_back(vec![down]);
            }
            c.ports[1].bond.as_ref().is_some_and(|b| b.failovers == 1)
        });
        let bond = report.counters.ports[1].bond.clone().expect("a bond");
        assert_eq!(
            (bond.active.as_deref(), bond.failovers),
            (Some("m1"), 1),
            "{bond:?}"
        );
        let (f, t) = (Some(false), Some(true));
        assert_eq!(at_start, Some(vec![f, f, t]), "m0 is active at first");
        assert_eq!(inactive(&devices.borrow()), [f, t, f]);
    }
}

#[test]
fn programs_are_kept_only_where_they_can_be_pinned() {
    let dir = std::env::temp_dir().join(format!("xskit-pins-{}", std::process::id()));
    let config = ForwardConfig::new(["a", "b"]).pins(Some(dir.clone()));
    // Not kept: the directory is only where kept programs would be found.
    assert_eq!(super::pins_ready(&config).unwrap(), Some(dir.clone()));
    let e = super::pins_ready(&config.keep_in_kernel(true)).unwrap_err();
    assert!(e.to_string().contains("not on a BPF file system"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
