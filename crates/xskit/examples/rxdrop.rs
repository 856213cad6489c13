//! Receive and drop every packet on one queue, printing the rate each second.
//!
//! `cargo run --release --example rxdrop -- IFACE [QUEUE]` (as root). Ctrl-C stops it; the XDP
//! program goes with the process because it is attached through a bpf_link.
use std::time::{Duration, Instant};

use xskit::{Port, PortConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let iface = args.next().ok_or("usage: rxdrop IFACE [QUEUE]")?;
    let queue = args.next().map(|q| q.parse()).transpose()?.unwrap_or(0);
    let mut port = Port::open(&iface, queue, &PortConfig::default())?;
    println!("{iface}:{queue} running in {}", port.mode());
    let mut batch = Vec::with_capacity(64);
    let (mut packets, mut tick) = (0u64, Instant::now());
    loop {
        packets +=
            port.poll_receive(&mut batch, 64, Some(std::time::Duration::from_millis(100)))? as u64;
        port.recycle(&mut batch); // dropping = giving the frames back to the fill ring
        if tick.elapsed() >= Duration::from_secs(1) {
            println!("{packets} rx/s");
            (packets, tick) = (0, Instant::now());
        }
    }
}
