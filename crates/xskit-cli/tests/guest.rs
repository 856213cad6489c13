//! The guest testbed: Debian's 6.12 kernel under QEMU with virtio NICs on TAP devices, for
//! what the host kernel lacks (bonding, virtio_net). Each boot takes seconds under TCG, so a
//! test puts its steps into one script where it can.

mod common;

use std::time::Duration;

use common::*;
use xskit_testbed::{Guest, GuestConfig};

/// A guest for a test, or a skip without root (a failure under XSKIT_REQUIRE_PRIVILEGES,
/// and a failure saying what is missing when the guest's packages are not installed).
fn guest(config: GuestConfig) -> Option<Guest> {
    if !privileged() {
        return None;
    }
    Some(Guest::new(&config).unwrap_or_else(|e| panic!("guest testbed: {e}")))
}

#[test]
fn the_guest_runs_host_binaries_and_reaches_its_namespace() {
    let Some(mut guest) = guest(GuestConfig::default().nics(2)) else {
        return;
    };
    let script = format!(
        "uname -r
         ip addr add 203.0.113.2/24 dev eth0
         ip link set eth0 up
         ping -c 2 -W 3 203.0.113.1
         ethtool -i eth0 | grep driver
         {XSKIT} info -i eth0
         {XSKIT} recv -i eth0 -m zc -d 1 || echo zc-refused
         ip link add bond0 type bond mode balance-xor
         ip link show bond0
         exit 7"
    );
    let run = guest.run(&script).unwrap();
    let out = &run.output;
    assert_eq!(run.status, 7, "the script's status comes back: {out}");
    assert!(out.contains("6.12."), "Debian's 6.12 kernel: {out}");
    assert!(
        out.contains("2 received"),
        "the guest pings its namespace: {out}"
    );
    assert!(out.contains("driver: virtio_net"), "{out}");
    assert!(out.contains("native XDP        yes"), "{out}");
    // No device this guest can have does AF_XDP zero-copy (virtio_net in 6.12 and QEMU 7.2
    // do not offer it): xskit says so and a zero-copy bind is refused with the reason.
    assert!(out.contains("AF_XDP zero-copy  no"), "{out}");
    assert!(
        out.contains("zero-copy is not available on eth0") && out.contains("zc-refused"),
        "{out}"
    );
    assert!(out.contains("bond0:"), "the bonding driver is there: {out}");
    eprintln!("boot and script: {:?}", run.elapsed);
}

#[test]
fn a_guest_that_hangs_is_killed_at_its_timeout_with_its_console() {
    let Some(mut guest) = guest(GuestConfig::default().timeout(Duration::from_secs(25))) else {
        return;
    };
    let started = std::time::Instant::now();
    let err = guest.run("echo started; sleep 600").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("did not finish") && text.contains("started") && text.contains("console"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    // The guest is gone: the TAP device can be opened by a new one.
    let again = guest.run("exit 0").unwrap();
    assert_eq!(again.status, 0);
}
