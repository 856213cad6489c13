//! # xskit-fwd
//!
//! A filtering forwarder, the application `xskit fwd` runs: a bump in the wire between two
//! interfaces (both directions), or one interface that reflects.
//!
//! Rules (see [`rules`]) are split: what the kernel can decide exactly (drop and pass
//! by destination prefix, protocol and destination port) is decided by the XDP program; the
//! rest comes up to the pipeline. Each queue gets a worker thread with both interfaces'
//! sockets on that queue, one pipeline, and its own frame pool, all on one
//! UMEM, so forwarding moves descriptors and never copies.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use xskit_fwd::rules::RuleSet;
//! use xskit_fwd::{ForwardConfig, Forwarder};
//!
//! let rules = RuleSet::from_toml("[[rule]]\nprotocol = \"udp\"\ndst_port = 53\naction = \"drop\"\n")?;
//! let fwd = Forwarder::new(ForwardConfig::new(["eth1", "eth2"]).rules(rules))?;
//! let stop = AtomicBool::new(false);
//! let report = fwd.run(&stop, Duration::from_secs(1), |c| println!("{:?}", c.ports))?;
//! println!("{} frames unaccounted", report.frames.unaccounted);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

pub mod abi;
mod bond_decisions;
mod bond_runtime;
mod bonded;
mod chains;
mod config;
mod config_check;
mod counter;
mod counts;
mod error;
pub mod filter;
mod filter_plan;
mod forward;
mod kernel;
mod plan;
pub mod reasons;
mod report;
pub mod rules;
mod stages;
mod supervise;
#[allow(unsafe_code)]
mod sys;
mod worker;
mod worker_plan;

pub use bonded::{BondConfig, BondCount, FailOverMac, LacpEnd, MemberCount, MemberLacp};
pub use error::{Error, Result};
pub use forward::*;
pub use xskit_bond::{ArpConfig, BondMode, PrimaryReselect, XmitHashPolicy};

pub use abi::MAX_RULES;

// The filter's tables are sized for what the bond crate allows.
const _: () = assert!(abi::MAX_MEMBERS == xskit_bond::MAX_MEMBERS);
const _: () = assert!(abi::MAX_ARP_TARGETS == xskit_bond::MAX_ARP_TARGETS);
#[cfg(test)]
mod tests;
