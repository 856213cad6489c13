//! The HELP line of each metric family: what it counts, in a reader's words. The families
//! come from the commands' JSON by a uniform mapping, so a family this table does not name
//! gets its name in words and what it is per (rule, bond member, benchmark cell).

use prometheus_client::metrics::MetricType;

/// Families by name (without `xskit_`, and without `_total` for counters), what each is.
const HELP: &[(&str, &str)] = &[
    (
        "build",
        "The xskit serving these metrics: its command and version as labels (always 1)",
    ),
    (
        "port",
        "Each port's facts as labels: its interface, queue and mode (always 1)",
    ),
    (
        "rule",
        "Each rule's facts as labels: its name and action (always 1)",
    ),
    (
        "rx_packets",
        "Packets received by xskit's sockets on the interface",
    ),
    (
        "rx_bytes",
        "Bytes received by xskit's sockets on the interface",
    ),
    (
        "tx_packets",
        "Packets sent by xskit's sockets on the interface",
    ),
    ("tx_bytes", "Bytes sent by xskit's sockets on the interface"),
    (
        "device_tx_packets",
        "Packets the device itself counts as sent (its own tx counter)",
    ),
    (
        "xdp_dropped",
        "Packets the XDP program dropped by a rule, before user space",
    ),
    (
        "xdp_passed",
        "Packets the XDP program passed to the kernel's stack by a rule",
    ),
    (
        "xdp_forwarded",
        "Packets the XDP program forwarded out of the other side (--xdp-forward)",
    ),
    (
        "xdp_forward_undelivered",
        "Packets forwarded in XDP that the other device did not send (its peer took no XDP frames)",
    ),
    (
        "xdp_no_socket_dropped",
        "Packets dropped in XDP for want of a socket to take them (the forwarder starting or stopping)",
    ),
    (
        "xdp_partial_checksums",
        "Packets the XDP program sent to user space to finish a partial checksum",
    ),
    (
        "to_kernel",
        "Packets user space handed to the host's kernel (the TAP device)",
    ),
    (
        "to_kernel_dropped",
        "Packets for the host's kernel dropped: no TAP device (--tap)",
    ),
    (
        "from_kernel",
        "Frames the host's kernel sent through the TAP device",
    ),
    (
        "tx_direct",
        "Packets transmitted straight from the other interface's rx ring, not through the pipeline",
    ),
    (
        "rx_told",
        "Packets received and sent on by the rule the XDP filter told, not classified again",
    ),
    (
        "tx_ring_full",
        "Packets dropped because the interface's tx ring was full",
    ),
    (
        "no_frames_dropped",
        "Packets dropped for want of a free UMEM frame",
    ),
    (
        "oversize_dropped",
        "Packets dropped because they exceed the egress MTU",
    ),
    (
        "unclassifiable",
        "Packets whose headers could not be read (fail-closed verdict)",
    ),
    (
        "checksums_completed",
        "Partial TCP/UDP checksums finished in software",
    ),
    (
        "checksums_offloaded",
        "Partial TCP/UDP checksums handed to the kernel to finish",
    ),
    ("segmented", "Super-packets cut into MTU-sized segments"),
    ("segments", "Segments cut from super-packets"),
    (
        "copies",
        "Frames copied on the way through (zero-copy moves descriptors only)",
    ),
    (
        "fill_wakeups",
        "Wakeup system calls through the fill ring, the driver having asked for buffers",
    ),
    (
        "tx_wakeups",
        "Wakeup system calls through the tx ring, asked for or not",
    ),
    (
        "tx_stall_wakeups",
        "Transmit wakeups the driver did not ask for, made because frames had waited a millisecond with none taken or completed",
    ),
    ("arp_replies", "ARP requests answered (--respond)"),
    ("echo_replies", "ICMP echo requests answered (--respond)"),
    (
        "respond_refused",
        "ARP and echo requests refused as Linux would (--respond)",
    ),
    ("link_up", "1 while the interface's link is up"),
    (
        "link_changes",
        "Times the interface's link went down or came up",
    ),
    (
        "socket_rx_dropped",
        "Packets the sockets dropped: too large for a frame",
    ),
    (
        "socket_rx_ring_full",
        "Packets the kernel dropped because an rx ring was full",
    ),
    (
        "socket_fill_ring_empty",
        "Packets the kernel dropped because a fill ring was empty",
    ),
    (
        "statistics_rx_dropped",
        "XDP_STATISTICS rx_dropped of the interface's sockets",
    ),
    (
        "statistics_rx_invalid_descs",
        "XDP_STATISTICS rx_invalid_descs of the sockets",
    ),
    (
        "statistics_tx_invalid_descs",
        "XDP_STATISTICS tx_invalid_descs of the sockets",
    ),
    (
        "statistics_rx_ring_full",
        "XDP_STATISTICS rx_ring_full of the sockets",
    ),
    (
        "statistics_rx_fill_ring_empty_descs",
        "XDP_STATISTICS rx_fill_ring_empty_descs of the sockets",
    ),
    (
        "statistics_tx_ring_empty_descs",
        "XDP_STATISTICS tx_ring_empty_descs of the sockets",
    ),
    ("frames_umem", "Frames in the UMEM"),
    ("frames_pool", "UMEM frames free in user space's pool, now"),
    ("frames_fill", "UMEM frames on the fill rings, now"),
    ("frames_rx", "UMEM frames on the rx rings, now"),
    (
        "frames_tx",
        "UMEM frames on the tx rings or awaiting completion, now",
    ),
    ("frames_kernel_held", "UMEM frames the kernel holds, now"),
    ("pool_alloc_fast", "Frames taken from a worker's pool cache"),
    (
        "pool_alloc_slow",
        "Frames taken from the pool's shared ring",
    ),
    ("pool_alloc_empty", "Frame requests the pool could not meet"),
    (
        "pool_recycled_cache",
        "Frames returned to a worker's pool cache",
    ),
    (
        "pool_recycled_ring",
        "Frames returned to the pool's shared ring",
    ),
    (
        "pool_recycled_full",
        "Frames returned when the pool was full",
    ),
    ("rule_packets", "Packets that matched the rule"),
    ("rule_bytes", "Bytes of the packets that matched the rule"),
    (
        "rule_in_kernel",
        "Packets the rule decided in the XDP program",
    ),
    (
        "rule_over_rate",
        "Packets a rate-limit rule dropped above its rate",
    ),
    (
        "rule_blocked",
        "Packets of sources a rate-limit rule blocked, dropped",
    ),
    ("rule_sources_blocked", "Sources a rate-limit rule blocked"),
    (
        "rule_blocks_refused",
        "Blocks refused because the block table was full",
    ),
    ("blocked_now", "Sources blocked now"),
    (
        "rules_generation",
        "The generation of the rules in force: 1 at start, one more for each apply or reload",
    ),
    (
        "rules_applied_timestamp_seconds",
        "When the rules in force were put in force, in seconds since the Unix epoch",
    ),
    (
        "set_elements",
        "Elements of a set with timeouts or counters, expired ones included",
    ),
    (
        "set_expired",
        "Elements of a set that expired: no lookup matches them",
    ),
    (
        "set_packets",
        "Packets whose address, on the side a rule asks, a set's elements hold, counted in XDP",
    ),
    (
        "set_element_packets",
        "Packets whose address, on the side a rule asks, one element holds (the busiest)",
    ),
    (
        "set_element_left_seconds",
        "Seconds until an element of a set expires",
    ),
    (
        "blocked_source_drops",
        "Packets dropped from a source since it was blocked (the most dropping ones)",
    ),
    (
        "blocked_source_left_seconds",
        "Seconds until a blocked source's block runs out",
    ),
    ("valid", "Probes received intact"),
    ("corrupt", "Probes received damaged"),
    ("out_of_order", "Probes received out of order"),
    ("lost", "Probes not received"),
    ("foreign", "Packets received that are not this run's probes"),
    (
        "latency_min_seconds",
        "Lowest one-way latency of the probes",
    ),
    ("latency_mean_seconds", "Mean one-way latency of the probes"),
    (
        "latency_max_seconds",
        "Highest one-way latency of the probes",
    ),
    (
        "process_cpu_seconds",
        "CPU time the command's process has used",
    ),
    ("cpu_share", "Share of one CPU the command's process used"),
    ("duration_seconds", "How long the command has run"),
    ("elapsed_seconds", "How long the command has run"),
    (
        "rate_packets_per_second",
        "The rate the command was asked to send at (-r)",
    ),
    (
        "wakeups",
        "Wake-up system calls the kernel asked for (need_wakeup)",
    ),
];

/// What a family is, for its HELP line.
pub(super) fn text(name: &str, kind: MetricType) -> String {
    if let Some((_, help)) = HELP.iter().find(|(n, _)| *n == name) {
        return (*help).to_string();
    }
    let (per, rest) = [
        ("bond_member_", " of each bond member"),
        ("member_", " of each bond member"),
        ("bond_", " of each bond"),
        ("rule_", " of each rule"),
        ("cell_", " of each benchmark cell"),
    ]
    .iter()
    .find_map(|(prefix, per)| name.strip_prefix(prefix).map(|rest| (*per, rest)))
    .unwrap_or(("", name));
    let words = rest.replace('_', " ");
    match kind {
        MetricType::Counter => format!("The count '{words}'{per}"),
        MetricType::Info => format!("Facts about the {words}{per}, as labels (always 1)"),
        _ => format!("The level '{words}'{per}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_families_say_what_they_count_and_the_rest_say_whose_they_are() {
        assert_eq!(
            text("rule_packets", MetricType::Counter),
            "Packets that matched the rule"
        );
        assert_eq!(
            text("bond_member_lacp_pdus_in", MetricType::Counter),
            "The count 'lacp pdus in' of each bond member"
        );
        assert!(!text("anything_else", MetricType::Gauge).contains("--json"));
    }

    #[test]
    fn every_named_family_is_named_once() {
        for (i, (name, _)) in HELP.iter().enumerate() {
            assert!(
                !HELP[i + 1..].iter().any(|(n, _)| n == name),
                "{name} twice"
            );
        }
    }
}
