//! The system layer of the traffic crate: every `unsafe` block of it is below this module.

pub(crate) mod afpacket;
