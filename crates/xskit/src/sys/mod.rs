//! The system layer: every `unsafe` block of the library lives below this module.
//!
//! Each submodule wraps one kernel interface: [`ring`] the shared single-producer/single-consumer
//! rings, [`xsk`] the AF_XDP socket calls and [`netlink`] the route and generic netlink sockets
//! used to query devices. What is not AF_XDP's (system-call errors, memory mappings, poll,
//! clocks, packet sockets) is `xskit_os`'s.

pub(crate) mod bpf;
pub(crate) mod ethtool;
pub(crate) mod netlink;
#[cfg(feature = "tokio")]
pub(crate) mod reactor;
pub(crate) mod ring;
pub(crate) mod rings;
#[cfg(any(test, feature = "testing"))]
// The unit tests use part of it; the rest is for the `testing` feature's users.
#[cfg_attr(not(feature = "testing"), allow(dead_code, unreachable_pub))]
pub(crate) mod testing;
pub(crate) mod umem;
pub(crate) mod xsk;

pub(crate) use xskit_os::{
    cvt, effective_uid as geteuid, if_nametoindex, ifreq_named, ioctl_socket, memlock_limit,
    setsockopt, SyscallError,
};
