//! The map values of the in-kernel filter (bpf/xdp_filter.c), laid out as the C structs.

/// `struct rule`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RuleRepr {
    pub(crate) addr: [u32; 4],
    pub(crate) mask: [u32; 4],
    pub(crate) family: u8,
    pub(crate) protocol: u8,
    pub(crate) action: u8,
    pub(crate) pad: u8,
    pub(crate) port_lo: u16,
    pub(crate) port_hi: u16,
}

/// `struct config`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConfigRepr {
    pub(crate) rule_count: u32,
    pub(crate) default_action: u32,
    pub(crate) unclassifiable_action: u32,
}

/// `struct counter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CounterRepr {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
}

// SAFETY: RuleRepr is repr(C), has no padding (16+16+4+4 bytes, all fields naturally aligned)
// and every bit pattern is a valid value, which is what aya::Pod requires.
unsafe impl aya::Pod for RuleRepr {}
// SAFETY: three u32s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for ConfigRepr {}
// SAFETY: two u64s, repr(C), no padding, any bit pattern valid.
unsafe impl aya::Pod for CounterRepr {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<RuleRepr>(), 40);
        assert_eq!(std::mem::size_of::<ConfigRepr>(), 12);
        assert_eq!(std::mem::size_of::<CounterRepr>(), 16);
    }
}
