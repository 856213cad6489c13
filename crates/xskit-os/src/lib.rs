#![doc = include_str!("../README.md")]

mod calls;
mod error;
pub mod fdpass;
mod mmap;
pub mod packet;
mod poll;
pub mod promisc;
pub mod sync;
pub mod tap;

pub use calls::{
    allowed_cpus, cvt, effective_uid, if_nametoindex, ifreq_named, ioctl_socket, memlock_limit,
    monotonic_coarse_ns, monotonic_ns, online_cpus, pin_current_thread, process_cpu_ns,
    raise_open_files_limit, setsockopt, wait_for_readers, with_stop_signals_held, SockOptValue,
};
pub use error::SyscallError;
pub use mmap::Mmap;
pub use poll::{poll, poll_readable, PollSet};

/// Chainable setters, one per listed field, for config structs that are `#[non_exhaustive]`
/// (built from `Default` and changed, never with a struct literal outside their crate). For
/// xskit's own crates.
#[doc(hidden)]
#[macro_export]
macro_rules! config_setters {
    ($ty:ident { $($(#[$doc:meta])* $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $field(mut self, $field: $t) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
