//! An xskit port driven from a tokio task ([`AsyncPort`], feature `tokio`): the task sleeps
//! in tokio's reactor until packets come, then sends each one back where it came from with
//! the MAC addresses swapped.
//!
//! `cargo run --features tokio --example tokio_reflect -- IFACE [COUNT]` (as root); it stops
//! after COUNT packets (default: never) or 10 s without one.
use std::time::Duration;

use xskit::{AsyncPort, Port, PortConfig};

/// Reflects packets until `count` have gone back or none has come for `idle`; returns how
/// many went back.
pub(crate) async fn reflect(
    port: &mut AsyncPort,
    count: u64,
    idle: Duration,
) -> xskit::Result<u64> {
    let umem = port.port().umem().clone();
    let mut frames = Vec::with_capacity(64);
    let mut reflected = 0u64;
    while reflected < count {
        let Ok(received) = tokio::time::timeout(idle, port.receive(&mut frames, 64)).await else {
            break;
        };
        for frame in frames.iter_mut() {
            let data = umem.data_mut(frame);
            if data.len() >= 12 {
                let (dst, src) = data.split_at_mut(6);
                dst.swap_with_slice(&mut src[..6]);
            }
        }
        reflected += received? as u64;
        port.send(&mut frames).await?;
    }
    Ok(reflected)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let iface = args.next().ok_or("usage: tokio_reflect IFACE [COUNT]")?;
    let count = args
        .next()
        .map(|c| c.parse())
        .transpose()?
        .unwrap_or(u64::MAX);
    let port = Port::open(&iface, 0, &PortConfig::default())?;
    println!("{iface}:0 reflecting in {}", port.mode());
    let mut port = AsyncPort::new(port)?;
    let n = reflect(&mut port, count, Duration::from_secs(10)).await?;
    println!("reflected {n} packets");
    Ok(())
}
