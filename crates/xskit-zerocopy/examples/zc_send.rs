//! Sends a stream of bytes over TCP with MSG_ZEROCOPY, reusing a few buffers as the kernel
//! releases them, and says how many sends went out without a copy.
//!
//! `cargo run --release -p xskit-zerocopy --example zc_send -- HOST:PORT MEBIBYTES` (a
//! receiver there: `xskit zcsend --role receiver --addr HOST`, or `nc -l`).
use std::net::TcpStream;
use std::time::Duration;

use xskit_zerocopy::{ZeroCopyConfig, ZeroCopySender, ZeroCopyStats};

/// Bytes per send: large enough for zero-copy to pay (the sender copies below 10 KB).
pub(crate) const CHUNK: usize = 64 * 1024;

/// Sends `chunks` buffers of [`CHUNK`] bytes to `stream`, byte `i` of the stream being
/// `i % 251`, from eight buffers reused as the kernel releases them; waits for the last
/// completion and returns the sender's statistics.
pub(crate) fn send_stream(
    stream: TcpStream,
    chunks: usize,
) -> Result<ZeroCopyStats, Box<dyn std::error::Error>> {
    let mut sender = ZeroCopySender::new(stream, ZeroCopyConfig::default())?;
    let mut free: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; CHUNK]).collect();
    for chunk in 0..chunks {
        // All eight in flight: wait for the kernel to release one.
        while free.is_empty() {
            if sender.reap(&mut free)? == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let mut buffer = free.pop().expect("a free buffer");
        for (i, byte) in buffer.iter_mut().enumerate() {
            *byte = ((chunk * CHUNK + i) % 251) as u8;
        }
        sender.send(buffer)?;
        sender.reap(&mut free)?;
    }
    sender.flush(Duration::from_secs(10), &mut free)?;
    Ok(sender.stats().clone())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, mib] = args.as_slice() else {
        return Err("usage: zc_send HOST:PORT MEBIBYTES".into());
    };
    let chunks = mib.parse::<usize>()? * 1024 * 1024 / CHUNK;
    let stats = send_stream(TcpStream::connect(addr)?, chunks)?;
    println!("{stats:?}");
    Ok(())
}
