#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod abi;
mod bond_decisions;
mod bond_runtime;
mod bonded;
mod bucket;
pub mod carry;
mod chains;
mod config;
mod config_check;
pub mod control;
mod counter;
mod counts;
mod direct;
mod duration;
mod error;
pub mod filter;
mod filter_plan;
mod forward;
pub mod handover;
mod kernel;
mod live_rules;
mod plan;
mod prefix;
pub mod reasons;
mod report;
mod rule_slots;
mod rule_state;
mod rule_vectors;
pub mod rules;
mod set_tables;
mod sets;
mod stages;
mod supervise;
#[allow(unsafe_code)]
mod sys;
pub mod text_file;
mod told;
mod vector_tables;
mod worker;
mod worker_plan;

pub use bonded::{BondConfig, BondCount, FailOverMac, LacpEnd, MemberCount, MemberLacp};
pub use config::{ChecksumMode, ForwardConfig};
pub use counter::UserPortCounts;
pub use counts::{
    BlockedCount, Counters, ElementCount, FrameReport, LiveFrames, PortCount, Report, RuleCount,
    SetCount, TOP_BLOCKED, TOP_ELEMENTS,
};
pub use error::{Error, Result};
pub use forward::{Applied, Forwarder, Generation, RuleChanger, SetChange};
pub use xskit_bond::{ArpConfig, BondMode, PrimaryReselect, XmitHashPolicy};

pub use abi::MAX_RULES;

// The filter's tables are sized for what the bond crate allows.
const _: () = assert!(abi::MAX_MEMBERS == xskit_bond::MAX_MEMBERS);
const _: () = assert!(abi::MAX_ARP_TARGETS == xskit_bond::MAX_ARP_TARGETS);
#[cfg(test)]
mod tests;
