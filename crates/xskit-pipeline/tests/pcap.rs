//! Capture files as ports: byte-exact round trips, pcapng input, and a pipeline run offline.

use std::borrow::Cow;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use xskit::{Frame, Umem, UmemConfig};
use xskit_pipeline::{
    Next, Outputs, PcapSink, PcapSource, Pipeline, SharedFrames, Stage, StageContext,
};
use xskit_traffic::probe::{self, ProbeAddrs};

const ADDRS: ProbeAddrs = ProbeAddrs {
    src_mac: [2, 0, 0, 0, 0, 1],
    dst_mac: [2, 0, 0, 0, 0, 2],
    src_ip: [198, 51, 100, 1],
    dst_ip: [198, 51, 100, 2],
};

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("xskit-{}-{name}", std::process::id()))
}

fn packets(n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|seq| {
            let len = 64 + (seq as usize * 37) % 1400;
            let mut buf = vec![0u8; len];
            ADDRS
                .template(len)
                .unwrap()
                .write(&mut buf, seq, seq)
                .unwrap();
            buf
        })
        .collect()
}

fn setup() -> (Umem, SharedFrames) {
    let umem = Umem::new(UmemConfig::default().frame_count(512).frame_size(2048)).unwrap();
    let shared = SharedFrames::new(umem.take_frames().unwrap());
    (umem, shared)
}

fn read_all(umem: &Umem, shared: &SharedFrames, path: &std::path::Path) -> Vec<Vec<u8>> {
    let mut pool = shared.pool(64);
    let mut src = PcapSource::open(path).unwrap();
    let mut frames = Vec::new();
    let mut bytes = Vec::new();
    while !src.is_done() {
        src.receive(umem, &mut pool, &mut frames, 32).unwrap();
        bytes.extend(frames.iter().map(|f| umem.data(f).to_vec()));
        pool.free(&mut frames);
    }
    bytes
}

#[test]
fn pcap_round_trip_is_byte_exact() {
    let (umem, shared) = setup();
    let mut pool = shared.pool(64);
    let originals = packets(300);
    let path = temp("round-trip.pcap");
    let mut sink = PcapSink::create(&path).unwrap();
    for chunk in originals.chunks(50) {
        let mut frames = Vec::new();
        pool.alloc(&mut frames, chunk.len());
        for (f, data) in frames.iter_mut().zip(chunk) {
            umem.reset(f);
            umem.write(f, data).unwrap();
        }
        sink.send(&umem, &mut frames, &mut pool).unwrap();
    }
    assert_eq!(sink.written(), 300);
    sink.finish().unwrap();
    let back = read_all(&umem, &shared, &path);
    assert_eq!(back, originals);
    assert_eq!(
        shared.len() + pool.cached(),
        512,
        "every frame back in the pool"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pcapng_files_are_read_too() {
    let originals = packets(50);
    let path = temp("input.pcapng");
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut w = PcapNgWriter::new(file).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0xffff,
            options: vec![],
        })
        .unwrap();
        for p in &originals {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_secs(1),
                original_len: p.len() as u32,
                data: Cow::Borrowed(p),
                options: vec![],
            })
            .unwrap();
        }
    }
    let (umem, shared) = setup();
    assert_eq!(read_all(&umem, &shared, &path), originals);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn oversize_packets_are_skipped_and_counted() {
    let path = temp("big.pcap");
    {
        let mut w =
            pcap_file::pcap::PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
        for len in [100usize, 3000, 200] {
            w.write_packet(&pcap_file::pcap::PcapPacket::new(
                Duration::ZERO,
                len as u32,
                &vec![7u8; len],
            ))
            .unwrap();
        }
    }
    let (umem, shared) = setup();
    let mut pool = shared.pool(8);
    let mut src = PcapSource::open(&path).unwrap();
    let mut frames = Vec::new();
    while !src.is_done() {
        src.receive(&umem, &mut pool, &mut frames, 8).unwrap();
    }
    assert_eq!(frames.len(), 2);
    assert_eq!(
        src.oversize(),
        1,
        "a 3000-byte packet does not fit a 2048-byte frame"
    );
    pool.free(&mut frames);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn bad_files_get_clear_errors() {
    let missing = PcapSource::open("/nonexistent/x.pcap")
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cannot open it"), "{missing}");
    let garbage = temp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture").unwrap();
    let err = PcapSource::open(&garbage).unwrap_err().to_string();
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    // A valid header and a packet record cut short.
    let truncated = temp("truncated.pcap");
    {
        let mut w =
            pcap_file::pcap::PcapWriter::new(std::fs::File::create(&truncated).unwrap()).unwrap();
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            Duration::ZERO,
            100,
            &[1u8; 100],
        ))
        .unwrap();
    }
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let (umem, shared) = setup();
    let mut pool = shared.pool(8);
    let mut src = PcapSource::open(&truncated).unwrap();
    let mut frames = Vec::new();
    let err = src
        .receive(&umem, &mut pool, &mut frames, 8)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ends inside the record of packet 1")
            && err.contains("cut short")
            && !err.contains("Error reading bytes"),
        "{err}"
    );
    for p in [garbage, truncated] {
        let _ = std::fs::remove_file(p);
    }
}

/// Keeps even sequence numbers (to port 0), drops odd ones.
struct EvenOnly;
impl Stage for EvenOnly {
    fn name(&self) -> &'static str {
        "even-only"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (f, n) in frames.iter().zip(nexts.iter_mut()) {
            *n = match probe::check(umem.data(f)) {
                probe::Probe::Valid { seq, .. } if seq % 2 == 0 => Next::Tx(0),
                _ => Next::Drop,
            };
        }
    }
}

#[test]
fn a_pipeline_runs_offline_from_pcap_to_pcap() {
    let input = temp("offline-in.pcap");
    let output = temp("offline-out.pcap");
    let originals = packets(200);
    {
        let mut w =
            pcap_file::pcap::PcapWriter::new(std::fs::File::create(&input).unwrap()).unwrap();
        for p in &originals {
            w.write_packet(&pcap_file::pcap::PcapPacket::new(
                Duration::ZERO,
                p.len() as u32,
                p,
            ))
            .unwrap();
        }
    }
    let (umem, shared) = setup();
    let mut pool = shared.pool(64);
    let mut src = PcapSource::open(&input).unwrap();
    let mut sink = PcapSink::create(&output).unwrap();
    let mut p = Pipeline::new(1);
    p.add_stage(Box::new(EvenOnly));
    let (mut frames, mut out) = (Vec::new(), Outputs::new(1));
    while !src.is_done() {
        src.receive(&umem, &mut pool, &mut frames, 64).unwrap();
        p.process(&umem, StageContext::default(), &mut frames, &mut out);
        sink.send(&umem, &mut out.tx[0], &mut pool).unwrap();
        pool.free(&mut out.drop);
    }
    sink.finish().unwrap();
    let expected: Vec<_> = originals.iter().step_by(2).cloned().collect();
    assert_eq!(read_all(&umem, &shared, &output), expected);
    for f in [input, output] {
        let _ = std::fs::remove_file(f);
    }
}
