//! The system layer of the forwarder: every `unsafe` block of the crate is below this module
//! (the TAP device's ioctls and reads, and the plain-data promises the kernel filter's maps
//! need).

pub(crate) mod filter;
pub(crate) mod tap;
