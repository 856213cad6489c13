//! IPv6 with its extension headers, and what it carries: an accepted view reads every field
//! without panicking, the header walk ends within the payload and within its limit.
#![no_main]

#[path = "shared/transport.rs"]
mod transport;

use libfuzzer_sys::fuzz_target;
use xskit_wire::ipv6;

fuzz_target!(|data: &[u8]| {
    let Ok(ip) = ipv6::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        ip.version(),
        ip.flow_label(),
        ip.hop_limit(),
        ip.src_addr(),
        ip.dst_addr(),
    );
    let payload = ip.payload();
    assert!(40 + payload.len() <= data.len());
    assert_eq!(usize::from(ip.payload_len()), payload.len());
    if let Ok((protocol, rest, offset)) = ip.upper_layer_fragment() {
        assert!(rest.len() <= payload.len());
        if offset == 0 {
            transport::transport(protocol, rest, ip.pseudo_header());
        }
    }
});
