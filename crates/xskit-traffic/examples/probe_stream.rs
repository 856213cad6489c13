//! A probe stream and what a receiver makes of it: 1,000 numbered probes over 16 flows, of
//! which the "network" here loses two, swaps two and damages one, and the receiver's check
//! names each.
//!
//! ```sh
//! cargo run -p xskit-traffic --example probe_stream
//! ```
use xskit_traffic::probe::{Endpoints, Flows, SequenceCheck, Template};

/// Run by the crate's tests too (tests/examples.rs).
pub(crate) fn main() -> Result<(), xskit_traffic::Error> {
    let ends = Endpoints {
        src_mac: [0x02, 0, 0, 0, 0, 1],
        dst_mac: [0x02, 0, 0, 0, 0, 2],
        src_ip: "198.51.100.1".parse().expect("an address"),
        dst_ip: "198.51.100.2".parse().expect("an address"),
        src_port: 1000,
        dst_port: 9,
    };
    let flows = Flows {
        src_ports: 16,
        ..Flows::default()
    };
    let template = Template::new(ends, flows, None, 128)?;
    let mut frames: Vec<Vec<u8>> = (0..1000)
        .map(|seq| {
            let mut buf = vec![0u8; template.len()];
            template.write(&mut buf, seq, 0);
            buf
        })
        .collect();
    frames.remove(500); // lost
    frames.remove(700); // lost
    frames.swap(100, 101); // reordered
    frames[300][60] ^= 0xff; // damaged
    let mut check = SequenceCheck::expecting(1000);
    for frame in &frames {
        check.observe(frame);
    }
    println!(
        "{} frames of {} flows: {} valid, {} lost, {} corrupt, {} out of order",
        frames.len(),
        template.flows().total(),
        check.valid,
        check.lost(),
        check.corrupt,
        check.out_of_order
    );
    assert_eq!(
        (check.lost(), check.corrupt),
        (3, 1),
        "the damaged one is not valid either"
    );
    Ok(())
}
