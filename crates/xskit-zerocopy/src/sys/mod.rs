//! The system layer of the zero-copy senders: every `unsafe` block of the crate is below this
//! module, and everything here returns system errors.

pub(crate) mod msg_zerocopy;
pub(crate) mod uring_zc;

/// What a sender did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZeroCopyStats {
    /// Buffers sent.
    pub buffers: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Send calls made with MSG_ZEROCOPY (each gets a notification number).
    pub zerocopy_calls: u64,
    /// Send calls made without it.
    pub copy_calls: u64,
    /// Notified sends whose pages were sent without a copy.
    pub zerocopy_completions: u64,
    /// Notified sends the kernel copied after all.
    pub copied_completions: u64,
    /// Notifications for sends already complete or never made (must stay 0).
    pub duplicate_completions: u64,
    /// Times the kernel ran out of option memory (ENOBUFS) and the sender waited.
    pub backpressure_waits: u64,
    /// Zero-copy was switched off because the kernel copied; the reason.
    pub disabled: Option<String>,
    /// Sum and maximum of the time from a buffer's send to its release, in ns.
    pub notify_latency_sum_ns: u64,
    /// Largest such time.
    pub notify_latency_max_ns: u64,
}
