//! Shared helpers for the CLI tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use xskit_testbed::Host;

pub use xskit_testbed::privileged_or_skip as privileged;

pub const XSKIT: &str = env!("CARGO_BIN_EXE_xskit");

/// Starts `xskit ARGS` in `host`'s namespace and waits for its header line on stderr (printed
/// once its port is open, or its error).
pub fn start(host: &Host, args: &[&str]) -> Child {
    let mut child = host
        .ns
        .command(XSKIT)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut header = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut header)
        .unwrap();
    assert!(
        !header.starts_with("xskit:") && !header.is_empty(),
        "{args:?}: {header}"
    );
    child
}

/// Waits for a child and parses the one JSON object it printed.
pub fn json_of(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

pub fn mac(h: &Host) -> String {
    h.mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A child that is killed if the test fails before it is collected, so no process outlives
/// the test (and keeps its namespace alive).
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> Self {
        KillOnDrop(Some(child))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child, no longer guarded.
    pub fn take(mut self) -> Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
