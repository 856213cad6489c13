//! The system layer of the forwarder: every `unsafe` block of the crate is below this module
//! (the plain-data promises the kernel filter's maps need; the TAP device is `xskit_os`'s).

pub(crate) mod filter;
