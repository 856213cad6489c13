//! Shared set-up for the testbed integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use xskit::{Port, PortConfig};
use xskit_testbed::{Host, Testbed, TestbedConfig};
use xskit_traffic::probe::{self, ProbeAddrs, ReceiveOptions, ReceiveReport, SendOptions};

pub use xskit_testbed::privileged_or_skip as privileged;

pub fn bed(config: TestbedConfig) -> Testbed {
    Testbed::new(&config).expect("building the testbed")
}

/// Opens a port on `host`'s interface, inside its namespace.
/// Opens a port on `host`. A program found attached is waited for, up to a second, before the
/// error is returned: a port this test dropped just before detaches only once every copy of
/// its link's descriptor is closed, and a child process that another test thread is spawning
/// holds copies until its exec (see `settled_program`).
pub fn open(host: &Host, queue: u32, config: &PortConfig) -> xskit::Result<Port> {
    let ifname = host.ifname.clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let r = host
            .ns
            .run(|| Port::open(&ifname, queue, config))
            .expect("entering the namespace");
        match r {
            Err(xskit::Error::ProgramAttached { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

pub fn addrs(from: &Host, to: &Host) -> ProbeAddrs {
    ProbeAddrs {
        src_mac: from.mac,
        dst_mac: to.mac,
        src_ip: from.ip.octets(),
        dst_ip: to.ip.octets(),
    }
}

/// A fresh testbed with a receiving port on host b (configured by `rx`) and a default sending
/// port on host a, both in `mode`. Returned as (receiver, sender, testbed).
pub fn receiver_and_sender(mode: xskit::Mode, rx: PortConfig) -> (Port, Port, Testbed) {
    let bed = bed(TestbedConfig::default());
    let rx = open(&bed.b, 0, &rx.mode(mode)).expect("receiver port");
    let tx = open(&bed.a, 0, &PortConfig::default().mode(mode)).expect("sender port");
    (rx, tx, bed)
}

/// Sends probes from `tx` to `rx` on two threads; returns how many were sent and what arrived.
pub fn transfer(
    rx: &mut Port,
    tx: &mut Port,
    addrs: &ProbeAddrs,
    send: &SendOptions,
    recv: &ReceiveOptions,
) -> (u64, ReceiveReport) {
    let seen = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let receiver = s.spawn(|| probe::receive(rx, recv, &seen, &stop).expect("receiving"));
        let sent = probe::send(tx, addrs, send, &seen, &stop).expect("sending");
        stop.store(true, Ordering::Relaxed);
        (sent, receiver.join().expect("receiver thread"))
    })
}

/// Number of open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The id of the XDP program attached to `host`'s interface, if any.
/// The program attached to `host`'s interface once detaches have settled: a test that spawns
/// a child process at the same moment briefly duplicates every descriptor (the link's too)
/// until the child's exec closes them, which can delay a detach by that long.
pub fn settled_program(host: &Host) -> Option<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let id = attached_program(host);
        if id.is_none() || std::time::Instant::now() > deadline {
            return id;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The program attached to `host`'s interface now.
pub fn attached_program(host: &Host) -> Option<u32> {
    let ifname = host.ifname.clone();
    host.ns
        .run(|| {
            xskit::Interface::by_name(&ifname)
                .and_then(|i| i.link_info())
                .map(|l| l.xdp.any())
        })
        .expect("entering the namespace")
        .expect("reading link info")
}

/// A probe template from host a to host b's UDP port `dst_port`, 64-byte frames.
pub fn probe_template(bed: &Testbed, dst_port: u16) -> probe::Template {
    let ends = probe::Endpoints {
        src_mac: bed.a.mac,
        dst_mac: bed.b.mac,
        src_ip: std::net::IpAddr::V4(bed.a.ip),
        dst_ip: std::net::IpAddr::V4(bed.b.ip),
        src_port: 40000,
        dst_port,
    };
    probe::Template::new(ends, probe::Flows::default(), None, 64).unwrap()
}

/// A transmit-only port in DRV mode on host a's interface.
pub fn tx_port(bed: &Testbed) -> Port {
    let a_if = bed.a.ifname.clone();
    let config = PortConfig::default().mode(xskit::Mode::Drv).tx_only(true);
    bed.a
        .ns
        .run(move || Port::open(&a_if, 0, &config))
        .expect("entering a's namespace")
        .expect("a transmit port on a")
}
