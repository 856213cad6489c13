#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

use aya::maps::Array;
use aya::programs::Xdp;
use aya::Ebpf;

pub use port::{BondMode, BondPort, BondStats, MemberStats};
pub use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

mod announce;
mod arp_monitor;
pub mod lacp;
mod members;
mod monitor;
mod port;
mod select;
mod xdp;

pub use announce::{announce, announce_v6, gratuitous_arp, unsolicited_na, UNSOLICITED_NA_LEN};
pub use arp_monitor::{arp_probe, ArpConfig, ArpMonitor, ArpProber, MAX_ARP_TARGETS};
pub use monitor::{LinkDelays, LinkMonitor, MemberChange};
pub use select::{choose_active, LinkSpeed, PrimaryReselect};
pub use xdp::{XdpBond, XdpBondMode, MAX_MEMBERS};

/// `xskit_bond.h`: the transmit hashes for your own XDP program (`#include "xskit_bond.h"`,
/// then `xskit_bond_hash(data, data_end, policy) % members`).
pub const HEADER: &str = include_str!("../bpf/xskit_bond.h");

static HASH_RUN_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xskit_bond_hash.o"));
const HASH_RUN: &str = "xskit_bond_hash_run";

/// Errors of the bond crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A BPF program or map of this crate could not be loaded, run or read.
    #[error("{what} failed")]
    Bpf {
        /// What was being done.
        what: &'static str,
        /// The loader's or kernel's answer.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A system call failed.
    #[error(transparent)]
    Syscall(#[from] xskit::SyscallError),
    /// From the AF_XDP layer (attaching a program, taking its maps).
    #[error(transparent)]
    Xsk(#[from] xskit::Error),
    /// From a member port (marking it inactive).
    #[error(transparent)]
    Port(#[from] xskit_pipeline::Error),
    /// A bond has 1 to 8 members.
    #[error("a bond has 1 to {max} members, not {count}", max = MAX_MEMBERS)]
    MemberCount {
        /// Members given.
        count: usize,
    },
    /// The same interface twice.
    #[error("{name} is given twice: a bond's members are different interfaces")]
    MemberTwice {
        /// The interface.
        name: String,
    },
    /// ARP monitoring settings that cannot work.
    #[error("{reason}")]
    ArpConfig {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// 802.3ad settings out of range.
    #[error("{reason}")]
    LacpConfig {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// A member index past the last member.
    #[error("the bond has no member {index} (it has {count})")]
    NoSuchMember {
        /// The index given.
        index: usize,
        /// Members the bond has.
        count: usize,
    },
}

/// Results of bond operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps a loader's or kernel's error as what was being done.
pub(crate) fn bpf<E: std::error::Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl FnOnce(E) -> Error {
    move |e| Error::Bpf {
        what,
        source: Box::new(e),
    }
}

fn missing(what: &'static str, name: &str) -> Error {
    Error::Bpf {
        what,
        source: format!("the object has no {name}").into(),
    }
}

/// The C hash of `xskit_bond.h`, loaded into the kernel (never attached) and run over frames
/// with BPF_PROG_TEST_RUN. Needs CAP_BPF (root).
pub struct BpfHasher {
    ebpf: Ebpf,
}

impl std::fmt::Debug for BpfHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfHasher").finish_non_exhaustive()
    }
}

impl BpfHasher {
    /// Loads and verifies the hash program.
    pub fn load() -> Result<Self> {
        let mut ebpf = Ebpf::load(HASH_RUN_OBJ).map_err(bpf("loading the bond hash program"))?;
        let program: &mut Xdp = ebpf
            .program_mut(HASH_RUN)
            .ok_or_else(|| missing("finding the bond hash program", HASH_RUN))?
            .try_into()
            .map_err(bpf("loading the bond hash program"))?;
        program
            .load()
            .map_err(bpf("verifying the bond hash program"))?;
        Ok(BpfHasher { ebpf })
    }

    /// The C hash of `frame` under `policy`.
    pub fn hash(&mut self, policy: XmitHashPolicy, frame: &[u8]) -> Result<u32> {
        let mut policies: Array<_, u32> = Array::try_from(
            self.ebpf
                .map_mut("hash_policy")
                .ok_or_else(|| missing("finding the policy map", "hash_policy"))?,
        )
        .map_err(bpf("opening the policy map"))?;
        policies
            .set(0, policy.id(), 0)
            .map_err(bpf("setting the policy"))?;
        let program: &Xdp = self
            .ebpf
            .program(HASH_RUN)
            .ok_or_else(|| missing("finding the bond hash program", HASH_RUN))?
            .try_into()
            .map_err(bpf("running the bond hash program"))?;
        let fd = program.fd().map_err(bpf("running the bond hash program"))?;
        xskit::program::test_run(std::os::fd::AsFd::as_fd(fd), frame)?;
        let out: Array<_, u32> = Array::try_from(
            self.ebpf
                .map("hash_out")
                .ok_or_else(|| missing("finding the hash map", "hash_out"))?,
        )
        .map_err(bpf("opening the hash map"))?;
        out.get(&0, 0).map_err(bpf("reading the hash"))
    }
}
