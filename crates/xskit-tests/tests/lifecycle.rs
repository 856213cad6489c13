//! Program lifecycle and error handling: every failure says what is wrong and leaves nothing
//! attached; a killed process leaves no program behind; another program is never replaced.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use xskit::{Error, Interface, Mode, Port, PortConfig, SocketConfig, UmemConfig, XdpProgram};
use xskit_testbed::{Host, TestbedConfig};

/// Run by a child process (see `spawn_child`): opens a port as XSKIT_CHILD asks and reports on
/// stdout. Ignored in normal runs.
#[test]
#[ignore = "entry point for child processes of other tests"]
fn child_entry() {
    let (Ok(action), Ok(iface)) = (
        std::env::var("XSKIT_CHILD"),
        std::env::var("XSKIT_CHILD_IFACE"),
    ) else {
        return;
    };
    if action == "promisc" {
        let held = Interface::by_name(&iface).and_then(|i| i.promiscuous());
        match held {
            Ok(_held) => {
                println!("XSKIT-CHILD-READY");
                std::thread::sleep(Duration::from_secs(60));
            }
            Err(e) => println!("XSKIT-CHILD-ERROR: {e}"),
        }
        return;
    }
    let config = match action.as_str() {
        // 64 MiB: far over an 8 MiB locked-memory limit.
        "big-umem" => PortConfig::default().umem(UmemConfig::default().frame_count(16384)),
        _ => PortConfig::default().mode(Mode::Skb),
    };
    match Port::open(&iface, 0, &config) {
        Ok(port) => {
            println!("XSKIT-CHILD-READY");
            if action == "hold" {
                std::thread::sleep(Duration::from_secs(60));
            }
            drop(port);
        }
        Err(e) => println!("XSKIT-CHILD-ERROR: {e}"),
    }
}

/// Starts this test binary in `host`'s namespace, wrapped in `wrapper` (e.g. setpriv), running
/// `child_entry` with `action`.
fn spawn_child(host: &Host, action: &str, wrapper: &[&str]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let mut cmd = if wrapper.is_empty() {
        host.ns.command(exe)
    } else {
        let mut c = host.ns.command(wrapper[0]);
        c.args(&wrapper[1..]).arg(exe);
        c
    };
    cmd.args([
        "--ignored",
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("XSKIT_CHILD", action)
    .env("XSKIT_CHILD_IFACE", &host.ifname)
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("starting the child")
}

/// The child's first report line, without its prefix tag.
fn child_report(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        // libtest writes "test child_entry ... " in front of the child's first line.
        if let Some(at) = line.find("XSKIT-CHILD-") {
            return line[at + "XSKIT-CHILD-".len()..].to_string();
        }
    }
    "no report".into()
}

/// The device's promiscuity count (`ip -d link`): how many hold it promiscuous.
fn promiscuity(host: &Host) -> u32 {
    let out = host
        .ns
        .command("ip")
        .args(["-d", "link", "show", &host.ifname])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = text
        .find("promiscuity ")
        .expect("ip -d link shows promiscuity")
        + 12;
    text[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// An interface is promiscuous while xskit holds it, a setting of the user's own is kept
/// when xskit lets go, and a holder killed with SIGKILL lets go too (the kernel drops the
/// hold with the process's socket).
#[test]
fn promiscuous_mode_is_held_and_given_back_however_the_holder_ends() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let held = bed
        .b
        .ns
        .run(|| Interface::by_name(&bed.b.ifname)?.promiscuous())
        .unwrap()
        .unwrap();
    assert_eq!(held.interface().name(), bed.b.ifname);
    assert_eq!(promiscuity(&bed.b), 1);
    let user = |on: &str| {
        let out = bed
            .b
            .ns
            .command("ip")
            .args(["link", "set", &bed.b.ifname, "promisc", on])
            .output()
            .unwrap();
        assert!(out.status.success());
    };
    user("on");
    assert_eq!(promiscuity(&bed.b), 2);
    drop(held);
    assert_eq!(promiscuity(&bed.b), 1, "the user's own setting stays");
    user("off");
    assert_eq!(promiscuity(&bed.b), 0);
    let mut child = spawn_child(&bed.b, "promisc", &[]);
    assert_eq!(child_report(&mut child), "READY");
    assert_eq!(promiscuity(&bed.b), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(promiscuity(&bed.b), 0, "given back by the kernel");
}

#[test]
fn sigkill_leaves_no_program_attached() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let mut child = spawn_child(&bed.b, "hold", &[]);
    assert_eq!(child_report(&mut child), "READY");
    assert!(
        attached_program(&bed.b).is_some(),
        "the child attached its program"
    );
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while attached_program(&bed.b).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        settled_program(&bed.b),
        None,
        "the bpf_link died with the process"
    );
}

#[test]
fn missing_privileges_are_explained() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let mut child = spawn_child(
        &bed.b,
        "open",
        &["setpriv", "--bounding-set=-all", "--inh-caps=-all"],
    );
    let report = child_report(&mut child);
    child.wait().unwrap();
    assert!(report.starts_with("ERROR:"), "{report}");
    assert!(
        report.contains("permission denied") && report.contains("run as root"),
        "{report}"
    );
    assert_eq!(attached_program(&bed.b), None);
}

#[test]
fn umem_over_memlock_limit_is_explained() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    // Without CAP_IPC_LOCK the UMEM is charged against RLIMIT_MEMLOCK (8 MiB here).
    let wrapper = [
        "setpriv",
        "--bounding-set=-ipc_lock",
        "prlimit",
        "--memlock=8388608:8388608",
    ];
    let mut child = spawn_child(&bed.b, "big-umem", &wrapper);
    let report = child_report(&mut child);
    child.wait().unwrap();
    assert!(
        report.contains("RLIMIT_MEMLOCK") && report.contains("ulimit -l"),
        "{report}"
    );
    assert_eq!(attached_program(&bed.b), None);
}

#[test]
fn another_program_is_named_and_not_replaced() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let ifname = bed.b.ifname.clone();
    let first = bed
        .b
        .ns
        .run(|| XdpProgram::attach(&Interface::by_name(&ifname).unwrap(), Mode::Skb, false))
        .unwrap()
        .unwrap();
    let id = attached_program(&bed.b).expect("attached");
    let err = open(&bed.b, 0, &PortConfig::default()).unwrap_err();
    match &err {
        Error::ProgramAttached {
            id: named,
            name,
            mode,
            ..
        } => {
            assert_eq!(*named, id);
            assert_eq!(name, "xskit_redirect");
            assert_eq!(*mode, "generic");
        }
        other => panic!("expected ProgramAttached, got {other}"),
    }
    assert!(
        err.to_string().contains("xdp off"),
        "says how to remove it: {err}"
    );
    assert_eq!(
        attached_program(&bed.b),
        Some(id),
        "the first program is still there"
    );
    drop(first);
    assert_eq!(settled_program(&bed.b), None, "detached on drop");
}

/// Each bad request fails with its own error and leaves no program attached.
#[test]
fn errors_are_clear_and_leave_nothing_attached() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let cases: Vec<(&str, PortConfig, u32, &str)> = vec![
        (
            "queue out of range",
            PortConfig::default(),
            3,
            "queue 3 does not exist on xsk-b, which has 1",
        ),
        (
            "ring size",
            PortConfig::default().socket(SocketConfig::default().rx_size(1000)),
            0,
            "not a power of two",
        ),
        (
            "frame size",
            PortConfig::default().umem(UmemConfig::default().frame_size(3000)),
            0,
            "power of two",
        ),
        (
            "headroom",
            PortConfig::default().umem(UmemConfig::default().headroom(3900)),
            0,
            "headroom 3900 is too large",
        ),
        (
            "zero-copy on veth",
            PortConfig::default().mode(Mode::ZeroCopy),
            0,
            "zero-copy is not available on xsk-b",
        ),
    ];
    for (what, config, queue, expected) in cases {
        let err = open(&bed.b, queue, &config).unwrap_err().to_string();
        assert!(err.contains(expected), "{what}: {err}");
        assert_eq!(
            settled_program(&bed.b),
            None,
            "{what}: nothing left attached"
        );
    }
    let err = open(&bed.b, 0, &PortConfig::default());
    assert!(
        err.is_ok(),
        "the interface is still usable: {:?}",
        err.err()
    );
}

#[test]
fn no_such_interface() {
    let err = Port::open("xskit-nope0", 0, &PortConfig::default()).unwrap_err();
    assert!(matches!(err, Error::NoSuchInterface { .. }));
    assert!(err.to_string().contains("ip link"), "{err}");
}

#[test]
fn queue_in_use_is_reported() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let ifname = bed.b.ifname.clone();
    let result = bed
        .b
        .ns
        .run(|| -> xskit::Result<()> {
            let iface = Interface::by_name(&ifname)?;
            let program = std::sync::Arc::new(XdpProgram::attach(&iface, Mode::Skb, false)?);
            let _first = Port::open_with(program.clone(), 0, &PortConfig::default())?;
            let second = Port::open_with(program, 0, &PortConfig::default());
            match second {
                Err(Error::QueueBusy { queue: 0, .. }) => Ok(()),
                other => panic!("expected QueueBusy, got {other:?}"),
            }
        })
        .unwrap();
    result.unwrap();
    // Another test of this binary may spawn a child at this moment, which holds a copy of
    // the link's descriptor until its exec: wait for the detach to settle.
    assert_eq!(settled_program(&bed.b), None);
}
