//! Stage 0 in the kernel: ordered rules drop, pass and redirect, count exactly, and change at
//! run time without reattaching.

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use xskit::probe::{self, Endpoints, Flows, Template};
use xskit::{Action, AttachMode, Interface, Mode, Port, PortConfig, Rule, XdpProgram};
use xskit_testbed::TestbedConfig;

fn template(bed: &xskit_testbed::Testbed, dst_port: u16) -> Template {
    let ends = Endpoints {
        src_mac: bed.a.mac,
        dst_mac: bed.b.mac,
        src_ip: IpAddr::V4(bed.a.ip),
        dst_ip: IpAddr::V4(bed.b.ip),
        src_port: 40000,
        dst_port,
    };
    Template::new(ends, Flows::default(), None, 64).unwrap()
}

/// Sends `n` probes numbered from `first` to `dst_port`, paced so no ring overflows.
fn send(tx: &mut Port, t: &Template, first: u64, n: u64) {
    let umem = tx.umem().clone();
    let mut batch = Vec::new();
    for seq in first..first + n {
        tx.alloc(&mut batch, 1);
        let f = batch.last_mut().unwrap();
        let len = t.write(umem.buffer_mut(f), seq, 0).unwrap();
        umem.set_len(f, len).unwrap();
        if batch.len() == 16 || seq + 1 == first + n {
            while !batch.is_empty() {
                tx.send(&mut batch).unwrap();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while tx.tx_in_flight() > 0 && Instant::now() < deadline {
        tx.complete();
        tx.socket().tx().unwrap().wakeup_if_needed().unwrap();
    }
}

/// Receives until `n` probes arrived or a second passed; returns how many were valid.
fn receive(rx: &mut Port, n: u64) -> u64 {
    let umem = rx.umem().clone();
    let (mut frames, mut valid) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(1);
    while valid < n && Instant::now() < deadline {
        rx.receive(&mut frames, 64).unwrap();
        valid += frames
            .iter()
            .filter(|f| matches!(probe::check(umem.data(f)), probe::Probe::Valid { .. }))
            .count() as u64;
        rx.recycle(&mut frames);
    }
    valid
}

#[test]
fn rules_drop_pass_and_redirect_and_change_at_run_time() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let (b_if, b_ip) = (bed.b.ifname.clone(), bed.b.ip);
    let (program, mut rx, udp) = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let program = Arc::new(XdpProgram::attach_filter(&iface, AttachMode::Drv).unwrap());
            let rx = Port::open_with(
                program.clone(),
                0,
                &PortConfig {
                    mode: Mode::Drv,
                    ..PortConfig::default()
                },
            )
            .unwrap();
            let udp = UdpSocket::bind(SocketAddr::new(IpAddr::V4(b_ip), 5000)).unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            (program, rx, udp)
        })
        .unwrap();
    let id = attached_program(&bed.b).expect("filter attached");
    program
        .set_rules(
            &[
                Rule {
                    prefix: Some((IpAddr::V4(bed.b.ip), 32)),
                    protocol: Some(17),
                    dst_ports: Some((7, 7)),
                    action: Action::Drop,
                },
                Rule {
                    prefix: None,
                    protocol: Some(17),
                    dst_ports: Some((5000, 5000)),
                    action: Action::Pass,
                },
            ],
            Action::Redirect,
        )
        .unwrap();
    let a_if = bed.a.ifname.clone();
    let cfg = PortConfig {
        mode: Mode::Drv,
        tx_only: true,
        ..PortConfig::default()
    };
    let mut tx = bed
        .a
        .ns
        .run(|| Port::open(&a_if, 0, &cfg))
        .unwrap()
        .unwrap();

    send(&mut tx, &template(&bed, 7), 0, 100); // dropped in the kernel
    send(&mut tx, &template(&bed, 5000), 0, 50); // passed to the kernel stack's socket
    send(&mut tx, &template(&bed, 9), 0, 80); // redirected to the xskit socket
    let mut buf = [0u8; 2048];
    let mut datagrams = 0;
    while udp.recv(&mut buf).is_ok() {
        datagrams += 1;
    }
    assert_eq!(datagrams, 50, "passed packets reach the stack's UDP socket");
    assert_eq!(
        receive(&mut rx, 80),
        80,
        "redirected packets reach the xskit socket"
    );
    let c = program.rule_counters().unwrap();
    assert_eq!(c.len(), 3, "two rules and the default");
    assert_eq!((c[0].packets, c[0].bytes), (100, 100 * 64), "drop rule");
    assert_eq!(c[1].packets, 50, "pass rule");
    assert_eq!(c[2].packets, 80, "default (redirect)");

    // Change the rules while running: the drop rule goes, port 7 now takes the default.
    program.set_rules(&[], Action::Redirect).unwrap();
    send(&mut tx, &template(&bed, 7), 100, 20);
    assert_eq!(receive(&mut rx, 20), 20, "port 7 is redirected now");
    let c = program.rule_counters().unwrap();
    assert_eq!(
        (c.len(), c[0].packets),
        (1, 100),
        "only the default remains, counting on"
    );
    assert_eq!(
        attached_program(&bed.b),
        Some(id),
        "same program, never reattached"
    );

    // A default of Drop stops everything without a rule.
    program.set_rules(&[], Action::Drop).unwrap();
    send(&mut tx, &template(&bed, 9), 200, 10);
    assert_eq!(receive(&mut rx, 10), 0);
}

#[test]
fn rule_errors_are_clear() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let b_if = bed.b.ifname.clone();
    let (plain, filter) = bed
        .b
        .ns
        .run(move || {
            let iface = Interface::by_name(&b_if).unwrap();
            let plain = XdpProgram::attach(&iface, AttachMode::Skb, false).unwrap();
            let err = plain.set_rules(&[], Action::Pass).unwrap_err().to_string();
            drop(plain);
            let filter = XdpProgram::attach_filter(&iface, AttachMode::Skb).unwrap();
            let too_many = vec![
                Rule {
                    prefix: None,
                    protocol: None,
                    dst_ports: None,
                    action: Action::Pass
                };
                65
            ];
            (
                err,
                filter
                    .set_rules(&too_many, Action::Pass)
                    .unwrap_err()
                    .to_string(),
            )
        })
        .unwrap();
    assert!(plain.contains("attach_filter"), "{plain}");
    assert!(filter.contains("at most 64"), "{filter}");
}
