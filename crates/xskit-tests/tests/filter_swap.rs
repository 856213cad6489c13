//! A rule change in the kernel is one switch: two rule sets that disagree on every class of
//! probe are put in force 1,000 times, one after the other, under a numbered probe stream,
//! and no probe meets a half-written or empty table.
//!
//! The sets drop or redirect three classes of probe (by UDP destination port):
//!
//! | probe | set A    | set B    |
//! |-------|----------|----------|
//! | 5001  | redirect | drop     |
//! | 5002  | drop     | redirect |
//! | 5003  | drop     | drop     |
//!
//! Each set names every class, and the default (redirect) is left to nothing: a table of no
//! rules lets 5003 through, and a table of one set's rules in some places and the other's in
//! the rest leaves 5001 or 5002 to the default, whose counter then moves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use xskit::{Interface, Mode, Port, PortConfig};
use xskit_fwd::filter::{Action, KernelRule, XdpFilter};
use xskit_fwd::rules::Match;
use xskit_testbed::{Testbed, TestbedConfig};
use xskit_traffic::probe::{self, Template};

mod common;

const PORTS: [u16; 3] = [5001, 5002, 5003];
const SWITCHES: usize = 1000;

fn udp_to(port: u16, action: Action) -> KernelRule {
    Match {
        protocol: Some(17),
        dst_ports: Some((port, port)),
        ..Match::default()
    }
    .kernel_rule(action)
    .unwrap()
}

/// Set A (`redirected` 5001) or set B (`redirected` 5002): the other two classes dropped,
/// the class that no set lets through first.
fn rule_set(redirected: u16) -> Vec<KernelRule> {
    let dropped = if redirected == 5001 { 5002 } else { 5001 };
    vec![
        udp_to(5003, Action::Drop),
        udp_to(dropped, Action::Drop),
        udp_to(redirected, Action::Redirect),
    ]
}

fn templates(bed: &Testbed) -> Vec<Template> {
    PORTS
        .iter()
        .map(|&port| probe_template(bed, port))
        .collect()
}

/// Sends probe `seq` to `PORTS[seq % 3]`, in batches of 16, until the receiver has seen one
/// numbered `stop_at` or later (`highest`); the last number sent is in `last`.
fn send_until_seen(
    mut tx: Port,
    templates: Vec<Template>,
    [stop_at, highest]: [&AtomicU64; 2],
    last: &AtomicU64,
) {
    let umem = tx.umem().clone();
    let mut batch = Vec::new();
    let mut seq = 0u64;
    while highest.load(Ordering::Relaxed) < stop_at.load(Ordering::Relaxed) {
        for _ in 0..16 {
            tx.alloc(&mut batch, 1);
            let f = batch.last_mut().unwrap();
            let t = &templates[(seq % 3) as usize];
            let len = t.write(umem.buffer_mut(f), seq, 0).unwrap();
            umem.set_len(f, len).unwrap();
            seq += 1;
        }
        while !batch.is_empty() {
            tx.send(&mut batch).unwrap();
        }
        last.store(seq - 1, Ordering::Relaxed);
        // Paced, so that the receiving socket's ring keeps up.
        std::thread::sleep(Duration::from_micros(100));
    }
    tx.finish_sending(Duration::from_secs(2)).unwrap();
}

/// Receives until `stop`, keeping (number, destination port) of every probe, and the highest
/// number in `highest`.
fn receive_until(
    mut rx: Port,
    (stop, highest): (&AtomicBool, &AtomicU64),
    got: &Mutex<Vec<(u64, u16)>>,
) {
    let umem = rx.umem().clone();
    let mut frames = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        rx.poll_receive(&mut frames, 64, Some(Duration::from_millis(20)))
            .unwrap();
        let mut kept = got.lock().unwrap();
        for f in &frames {
            let data = umem.data(f);
            if let probe::Probe::Valid { seq, .. } = probe::check(data) {
                kept.push((seq, u16::from_be_bytes([data[36], data[37]])));
                highest.fetch_max(seq, Ordering::Relaxed);
            }
        }
        drop(kept);
        rx.recycle(&mut frames);
    }
}

/// How often the class of what arrived changes, in the probes' order.
fn class_changes(got: &mut [(u64, u16)]) -> usize {
    got.sort_unstable();
    got.windows(2).filter(|w| w[0].1 != w[1].1).count()
}

/// Puts set B and set A in force in turn, `SWITCHES` times; each switch waits for a probe
/// its set redirects, so that every one is seen in the stream.
fn switch_under_the_stream(
    filter: &XdpFilter,
    [set_a, set_b]: [&[KernelRule]; 2],
    got: &Mutex<Vec<(u64, u16)>>,
) {
    for i in 0..SWITCHES {
        let (set, port) = if i % 2 == 0 {
            (set_b, 5002)
        } else {
            (set_a, 5001)
        };
        let before = got.lock().unwrap().len();
        filter.set_rules(set, None, Action::Redirect).unwrap();
        xskit_testbed::wait_for(Duration::from_secs(30), || {
            let got = got.lock().unwrap();
            got[before..].iter().any(|&(_, p)| p == port).then_some(())
        })
        .unwrap_or_else(|| panic!("switch {i}: no {port} probe came through"));
    }
}

#[test]
fn a_thousand_rule_changes_under_a_probe_stream_never_show_a_half_written_table() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let b_if = bed.b.ifname.clone();
    let (filter, rx) = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let filter = XdpFilter::attach(&iface, Mode::Drv, false).unwrap();
            let config = PortConfig::default().mode(Mode::Drv);
            let rx = Port::open_with(Arc::clone(filter.program()), 0, &config).unwrap();
            (filter, rx)
        })
        .unwrap();
    let (set_a, set_b) = (rule_set(5001), rule_set(5002));
    filter.set_rules(&set_a, None, Action::Redirect).unwrap();
    let tx = tx_port(&bed);
    let receiving = AtomicBool::new(false);
    let (stop_at, highest, last) = (
        AtomicU64::new(u64::MAX),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let got = Mutex::new(Vec::new());
    let templates = templates(&bed);
    std::thread::scope(|s| {
        s.spawn(|| receive_until(rx, (&receiving, &highest), &got));
        let sender = s.spawn(|| send_until_seen(tx, templates, [&stop_at, &highest], &last));
        // The stream is under way before the first switch.
        xskit_testbed::wait_for(Duration::from_secs(30), || {
            (!got.lock().unwrap().is_empty()).then_some(())
        })
        .expect("set A's probes arrive");
        switch_under_the_stream(&filter, [&set_a, &set_b], &got);
        // Set A is in force again: once a probe sent after the last switch has come through
        // (its 5001s do), every earlier one has met the filter, in the queue's order.
        stop_at.store(last.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        sender.join().unwrap();
        receiving.store(true, Ordering::Relaxed);
    });
    let mut got = got.into_inner().unwrap();
    let sent = last.load(Ordering::Relaxed) + 1;
    let through_5003 = got.iter().filter(|&&(_, port)| port == 5003).count();
    assert_eq!(through_5003, 0, "5003 probes no whole set lets through");
    let counters = filter.rule_counters().unwrap();
    let default = counters.last().unwrap().packets;
    assert_eq!(default, 0, "probes left to the default: {counters:?}");
    let matched: u64 = counters.iter().map(|c| c.packets).sum();
    assert!(
        matched > 0 && matched <= sent,
        "{matched} of {sent}: {counters:?}"
    );
    let changes = class_changes(&mut got);
    eprintln!(
        "{sent} probes, {} redirected, {changes} switches seen in the stream of {SWITCHES}",
        got.len()
    );
    assert_eq!(changes, SWITCHES, "each switch seen once, in order");
}
