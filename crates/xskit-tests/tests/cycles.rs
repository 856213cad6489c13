//! 100 set-up/tear-down cycles leak no file descriptor, program or namespace. Alone in its
//! test binary so that no other test opens descriptors while it counts them.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64};

use common::*;
use xskit::{Mode, PortConfig};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, ReceiveOptions, SendOptions};

#[test]
fn hundred_cycles_leak_nothing() {
    if !privileged() {
        return;
    }
    let prefix = format!("xskit-{}-", std::process::id());
    let mut fds_before = 0;
    for i in 0..100 {
        if i == 1 {
            // After one warm-up cycle: the first testbed starts a signal-cleanup thread once.
            fds_before = open_fds();
        }
        let mode = if i % 2 == 0 { Mode::Skb } else { Mode::Drv };
        let bed = bed(TestbedConfig::default());
        let cfg = PortConfig::default().mode(mode);
        let mut rx = open(&bed.b, 0, &cfg).unwrap();
        let mut tx = open(&bed.a, 0, &cfg).unwrap();
        let send = SendOptions {
            count: 10,
            ..SendOptions::default()
        };
        let (seen, stop) = (AtomicU64::new(0), AtomicBool::new(false));
        probe::send(&mut tx, &addrs(&bed.a, &bed.b), &send, &seen, &stop).unwrap();
        let recv = ReceiveOptions::default().count(10);
        let report = probe::receive(&mut rx, &recv, &seen, &stop).unwrap();
        assert!(report.check.is_perfect(10), "cycle {i}: {:?}", report.check);
        drop((rx, tx));
        assert_eq!(settled_program(&bed.b), None, "cycle {i}: program detached");
        assert_eq!(settled_program(&bed.a), None, "cycle {i}: program detached");
    }
    assert_eq!(open_fds(), fds_before, "no descriptor leaked");
    let left: Vec<_> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
