//! The capture reader behind `gen --pcap` and `bond hash --pcap`: any file is read packet by
//! packet or refused with an error, never a panic or an allocation the file merely asks for,
//! and every packet it gives is hashed as `bond hash` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit_pipeline::PcapSource;
use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("xskit-fuzz-pcap-{}", std::process::id()));
    std::fs::write(&path, data).expect("writing the input to a file");
    if let Ok(mut source) = PcapSource::open(&path) {
        // A packet is at least its record's header: no file holds more packets than bytes.
        for _ in 0..=data.len() {
            match source.next_packet_with(|p| {
                for policy in XmitHashPolicy::ALL {
                    let _ = xmit_hash(policy, p);
                }
                p.len()
            }) {
                Ok(Some(len)) => assert!(len <= data.len()),
                Ok(None) | Err(_) => break,
            }
        }
    }
    let _ = std::fs::remove_file(&path);
});
