//! MSG_ZEROCOPY on real sockets between testbed namespaces.

mod common;

use std::hash::Hasher;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use common::*;
use xskit::{Interface, Mode};
use xskit_testbed::{Chain, TestbedConfig};
use xskit_traffic::XdpCounter;
use xskit_zerocopy::{ZeroCopyConfig, ZeroCopySender};

const BUF: usize = 64 * 1024;

fn fill(buf: &mut [u8], seq: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = seq
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(i as u64)
            .to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A listener on host b's `port` and the thread that hashes the one connection it takes.
fn hashing_listener(
    bed: &xskit_testbed::Testbed,
    port: u16,
) -> (SocketAddr, std::thread::JoinHandle<(u64, u64)>) {
    let addr = SocketAddr::new(bed.b.ip.into(), port);
    let listener = bed.b.ns.run(|| TcpListener::bind(addr)).unwrap().unwrap();
    (addr, hash_receiver(listener))
}

/// Accepts one connection and returns the hash and length of everything it carried.
fn hash_receiver(listener: TcpListener) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut hash = std::collections::hash_map::DefaultHasher::new();
        let mut buf = vec![0u8; BUF];
        let mut total = 0u64;
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            hash.write(&buf[..n]);
            total += n as u64;
        }
        (hash.finish(), total)
    })
}

/// TCP into another namespace: the kernel delivers to a local socket, so it copies and says
/// COPIED; the sender must notice and stop zero-copy. Released buffers are poisoned at once
/// and reused: if one were released early, the receiver would hash poison.
#[test]
fn tcp_local_delivery_reports_copied_and_stream_stays_intact() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let (addr, receiver) = hashing_listener(&bed, 9000);
    let count = 400u64;
    let (sent_hash, stats) = bed
        .a
        .ns
        .run(move || {
            let stream = TcpStream::connect(addr).unwrap();
            let mut sender =
                ZeroCopySender::new(stream.try_clone().unwrap(), ZeroCopyConfig::default())
                    .unwrap();
            let mut hash = std::collections::hash_map::DefaultHasher::new();
            let mut free: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; BUF]).collect();
            let mut seq = 0;
            while seq < count {
                let Some(mut buf) = free.pop() else {
                    sender.reap(&mut free).unwrap();
                    for b in free.iter_mut() {
                        b.fill(0xAA); // poison every released buffer
                    }
                    continue;
                };
                fill(&mut buf, seq);
                hash.write(&buf);
                sender.send(buf).unwrap();
                seq += 1;
            }
            sender.flush(Duration::from_secs(10), &mut free).unwrap();
            assert_eq!(sender.in_flight(), 0);
            assert_eq!(free.len(), 8, "every buffer came back exactly once");
            let stats = sender.stats().clone();
            drop(sender);
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            (hash.finish(), stats)
        })
        .unwrap();
    let (received_hash, total) = receiver.join().unwrap();
    assert_eq!(total, count * BUF as u64);
    assert_eq!(received_hash, sent_hash, "the stream arrived intact");
    assert!(
        stats.copied_completions > 0,
        "local delivery copies: {stats:?}"
    );
    assert!(
        stats.disabled.is_some(),
        "zero-copy was switched off: {stats:?}"
    );
    assert!(
        stats.copy_calls > 0,
        "later sends were plain copies: {stats:?}"
    );
    assert_eq!(stats.duplicate_completions, 0);
    assert_eq!(
        stats.zerocopy_completions + stats.copied_completions,
        stats.zerocopy_calls,
        "every zero-copy send completed exactly once: {stats:?}"
    );
}

/// A chain with a counting XDP_DROP on c, and neighbours resolved on a and m, so no datagram
/// waits in (or falls out of) an ARP queue.
fn chain_with_sink() -> (Chain, XdpCounter) {
    let chain = Chain::new().unwrap();
    let ping = chain
        .a
        .ns
        .command("ping")
        .args(["-c", "1", "-W", "2", &chain.c.ip.to_string()])
        .output()
        .unwrap();
    assert!(ping.status.success(), "a reaches c");
    let c_if = chain.c.ifname.clone();
    let sink = chain
        .c
        .ns
        .run(|| XdpCounter::drop_all(&Interface::by_name(&c_if)?, Mode::Drv, false))
        .unwrap()
        .unwrap();
    (chain, sink)
}

/// Runs `f` in a's namespace with a UDP socket connected to c's discard port.
fn from_a_udp_to_c<T: Send>(chain: &Chain, f: impl FnOnce(UdpSocket) -> T + Send) -> T {
    let dst = SocketAddr::new(chain.c.ip.into(), 9);
    chain
        .a
        .ns
        .run(move || {
            let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
            socket.connect(dst).unwrap();
            f(socket)
        })
        .unwrap()
}

/// UDP routed through m and dropped by XDP on c: no socket ever receives it, so the pages go
/// out without a copy and no completion says COPIED.
#[test]
fn udp_forwarded_then_dropped_completes_without_copy() {
    if !privileged() {
        return;
    }
    let (chain, drop_counter) = chain_with_sink();
    let count = 300u64;
    let stats = from_a_udp_to_c(&chain, move |socket| {
        let config = ZeroCopyConfig::default().threshold(1024);
        let mut sender = ZeroCopySender::new(socket, config).unwrap();
        let mut free: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; 1400]).collect();
        let mut seq = 0;
        while seq < count {
            match free.pop() {
                Some(mut buf) => {
                    fill(&mut buf, seq);
                    sender.send(buf).unwrap();
                    seq += 1;
                }
                None => {
                    sender.reap(&mut free).unwrap();
                }
            }
        }
        sender.flush(Duration::from_secs(10), &mut free).unwrap();
        assert_eq!(free.len(), 16);
        sender.stats().clone()
    });
    assert_eq!(stats.zerocopy_calls, count, "{stats:?}");
    assert_eq!(
        stats.copied_completions, 0,
        "forwarded, never delivered: no copy: {stats:?}"
    );
    assert_eq!(stats.zerocopy_completions, count, "{stats:?}");
    assert_eq!(stats.duplicate_completions, 0);
    assert!(stats.disabled.is_none());
    let dropped = drop_counter.packets().unwrap();
    assert!(
        dropped >= count,
        "the datagrams crossed m and reached c's XDP: {dropped}"
    );
}

#[test]
fn small_buffers_are_copied_below_the_threshold() {
    if !privileged() {
        return;
    }
    let (chain, _sink) = chain_with_sink();
    let stats = from_a_udp_to_c(&chain, move |socket| {
        let mut sender = ZeroCopySender::new(socket, ZeroCopyConfig::default()).unwrap();
        let mut back = Vec::new();
        for _ in 0..10 {
            sender.send(vec![1u8; 512]).unwrap();
        }
        sender.reap(&mut back).unwrap();
        assert_eq!(back.len(), 10, "copied buffers come straight back");
        sender.stats().clone()
    });
    assert_eq!((stats.zerocopy_calls, stats.copy_calls), (0, 10));
}

#[test]
fn sockets_without_zero_copy_get_a_clear_error() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let err = ZeroCopySender::new(a, ZeroCopyConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot do MSG_ZEROCOPY") && err.contains("TCP or UDP"),
        "{err}"
    );
}

mod uring {
    use super::*;
    use xskit_zerocopy::UringZeroCopySender;

    /// Sends `count` slots of `len` bytes, each filled with `fill(seq)`; returns the hash of
    /// everything sent and the stats.
    fn send_all(
        sender: &mut UringZeroCopySender,
        count: u64,
        len: usize,
    ) -> (u64, xskit_zerocopy::ZeroCopyStats) {
        let mut hash = std::collections::hash_map::DefaultHasher::new();
        let mut seq = 0;
        while seq < count {
            match sender.take_slot() {
                Some(idx) => {
                    let buf = &mut sender.slot_mut(idx)[..len];
                    fill(buf, seq);
                    hash.write(buf);
                    sender.send(idx, len).unwrap();
                    seq += 1;
                }
                None => {
                    sender.wait().unwrap();
                }
            }
        }
        sender.flush(Duration::from_secs(10)).unwrap();
        (hash.finish(), sender.stats().clone())
    }

    #[test]
    fn tcp_stream_intact_and_copy_reported() {
        if !privileged() {
            return;
        }
        let bed = bed(TestbedConfig::default());
        let (addr, receiver) = super::hashing_listener(&bed, 9001);
        let (sent, stats) = bed
            .a
            .ns
            .run(move || {
                let stream = TcpStream::connect(addr).unwrap();
                let mut sender =
                    UringZeroCopySender::new(stream.try_clone().unwrap(), 8, BUF).unwrap();
                let out = send_all(&mut sender, 300, BUF);
                drop(sender);
                stream.shutdown(std::net::Shutdown::Write).unwrap();
                out
            })
            .unwrap();
        let (received, total) = receiver.join().unwrap();
        assert_eq!(total, 300 * BUF as u64);
        assert_eq!(received, sent, "the stream arrived intact: {stats:?}");
        assert_eq!(stats.buffers, 300);
        // A short send (full socket buffer) is continued by another SEND_ZC from where it
        // stopped: submissions can exceed buffers, and each has its own notification.
        assert!(stats.zerocopy_calls >= 300, "{stats:?}");
        assert_eq!(
            stats.zerocopy_completions + stats.copied_completions,
            stats.zerocopy_calls,
            "one notification per submission: {stats:?}"
        );
        assert!(
            stats.copied_completions > 0,
            "local delivery copies: {stats:?}"
        );
        assert_eq!(stats.duplicate_completions, 0);
    }

    #[test]
    fn udp_forwarded_then_dropped_is_zero_copy() {
        if !privileged() {
            return;
        }
        let (chain, sink) = chain_with_sink();
        let stats = from_a_udp_to_c(&chain, move |socket| {
            let mut sender = UringZeroCopySender::new(socket, 16, 1400).unwrap();
            send_all(&mut sender, 300, 1400).1
        });
        assert_eq!(stats.zerocopy_completions, 300, "{stats:?}");
        assert_eq!(stats.copied_completions, 0, "{stats:?}");
        assert!(sink.packets().unwrap() >= 300);
    }
}

#[allow(dead_code)]
#[path = "../../xskit-zerocopy/examples/zc_send.rs"]
mod zc_send;

/// xskit-zerocopy's example, run between two hosts: every byte of its stream arrives as it
/// wrote it, every buffer is released once, and the kernel's copy on local delivery is noticed.
#[test]
fn the_zc_send_example_delivers_its_stream_intact() {
    if !privileged() {
        return;
    }
    let bed = bed(TestbedConfig::default());
    let (addr, receiver) = hashing_listener(&bed, 9001);
    let chunks = 128;
    let stats = bed
        .a
        .ns
        .run(move || {
            let stream = TcpStream::connect(addr).unwrap();
            zc_send::send_stream(stream, chunks).map_err(|e| e.to_string())
        })
        .unwrap()
        .unwrap();
    let (received_hash, received) = receiver.join().unwrap();
    let mut expected = std::collections::hash_map::DefaultHasher::new();
    let stream: Vec<u8> = (0..chunks * zc_send::CHUNK)
        .map(|i| (i % 251) as u8)
        .collect();
    expected.write(&stream);
    assert_eq!(received, stream.len() as u64);
    assert_eq!(
        received_hash,
        expected.finish(),
        "the stream arrived changed"
    );
    assert_eq!(stats.buffers, chunks as u64, "{stats:?}");
    assert_eq!(stats.duplicate_completions, 0, "{stats:?}");
    assert!(
        stats.disabled.is_some(),
        "local delivery copies, and says so: {stats:?}"
    );
}
