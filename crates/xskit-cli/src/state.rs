//! What a running `xskit fwd` tells `xskit info`: its bonds' state, in one file per process
//! under the runtime directory (`/run/xskit`, or `$XSKIT_RUN_DIR`), rewritten every
//! interval and removed at exit. A file whose process is gone (killed) is skipped and
//! removed by the next reader.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use xskit_fwd::Counters;

/// A running forwarder's bonds.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FwdState {
    pub(crate) pid: u32,
    /// The network namespace it runs in (the inode of its nsfs file): interface names are
    /// per namespace.
    pub(crate) netns: u64,
    pub(crate) bonds: Vec<BondState>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct BondState {
    pub(crate) name: String,
    pub(crate) mode: String,
    pub(crate) xmit_hash_policy: Option<String>,
    pub(crate) active: Option<String>,
    pub(crate) failovers: u64,
    pub(crate) members: Vec<MemberState>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct MemberState {
    pub(crate) interface: String,
    pub(crate) up: bool,
    pub(crate) carrier: bool,
    pub(crate) arp_up: bool,
    pub(crate) active: bool,
    /// 802.3ad: the member's LACP state, as the live lines show it.
    #[serde(default)]
    pub(crate) lacp: Option<String>,
}

/// The runtime directory: `/run/xskit`, or `$XSKIT_RUN_DIR`.
pub(crate) fn dir() -> PathBuf {
    std::env::var_os("XSKIT_RUN_DIR").map_or_else(|| PathBuf::from("/run/xskit"), PathBuf::from)
}

/// This process's network namespace: the inode of its nsfs file.
pub(crate) fn netns() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

/// This process's state file, removed when dropped.
pub(crate) struct StateFile {
    path: PathBuf,
    failed: bool,
}

impl StateFile {
    pub(crate) fn new() -> Self {
        StateFile {
            path: dir().join(format!("fwd-{}.json", std::process::id())),
            failed: false,
        }
    }

    /// Writes the bonds' state from `counters` (whole, by a rename); says once if it
    /// cannot, and goes on forwarding.
    pub(crate) fn write(&mut self, counters: &Counters) {
        let bonds: Vec<BondState> = counters
            .ports
            .iter()
            .filter_map(|p| {
                let b = p.bond.as_ref()?;
                Some(BondState {
                    name: p.interface.clone(),
                    mode: b.mode.to_string(),
                    xmit_hash_policy: b.xmit_hash_policy.map(str::to_string),
                    active: b.active.clone(),
                    failovers: b.failovers,
                    members: b
                        .members
                        .iter()
                        .map(|m| MemberState {
                            interface: m.interface.clone(),
                            up: m.up,
                            carrier: m.carrier,
                            arp_up: m.arp_up,
                            active: m.active,
                            lacp: m.lacp.as_ref().map(crate::fwd::lacp_line),
                        })
                        .collect(),
                })
            })
            .collect();
        if bonds.is_empty() || self.failed {
            return;
        }
        let state = FwdState {
            pid: std::process::id(),
            netns: netns(),
            bonds,
        };
        let tmp = self.path.with_extension("tmp");
        let written = std::fs::create_dir_all(dir())
            .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(&state).unwrap_or_default()))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            self.failed = true;
            let _ = std::fs::remove_file(&tmp);
            note!(
                "xskit fwd: note: cannot write the bond state to {}: {e}. Forwarding goes on, \
                 but xskit info will not show these bonds: run as root, or set XSKIT_RUN_DIR \
                 to a writable directory for both commands",
                self.path.display()
            );
        }
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The forwarders running in this network namespace.
pub(crate) fn running() -> Vec<FwdState> {
    let Ok(entries) = std::fs::read_dir(dir()) else {
        return Vec::new();
    };
    let here = netns();
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(state) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<FwdState>(&b).ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{}", state.pid)).exists() {
            // Its forwarder was killed before it could remove it.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if state.netns == here {
            out.push(state);
        }
    }
    out
}
