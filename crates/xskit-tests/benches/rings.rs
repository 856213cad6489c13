#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Ring operations and frame building, in ns per descriptor (criterion reports time per
//! iteration; throughput is set to the batch size, so elements/s gives descriptors per second).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use xskit::testing::{completion_ring, fill_ring, rx_ring, tx_ring, RawPair};
use xskit::{RawDesc, Umem, UmemConfig};
use xskit_traffic::probe::{Endpoints, Flows, ProbeAddrs, Template};

const BATCHES: [u32; 4] = [1, 16, 64, 256];

/// The xsk.h verbs alone: reserve/write/submit on one side and peek/read/release on the
/// other, per descriptor (each needs the other, or the ring fills or runs dry).
fn raw_verbs(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw");
    for batch in BATCHES {
        g.throughput(Throughput::Elements(u64::from(batch)));
        let mut pair = RawPair::new(2048, u32::MAX - 1000).unwrap();
        g.bench_with_input(
            BenchmarkId::new("produce_consume", batch),
            &batch,
            |b, &n| {
                b.iter(|| {
                    let got = pair.reserve_submit(n, 7);
                    black_box(pair.peek_release(got))
                })
            },
        );
    }
    g.finish();
}

/// The typed API as an application drives it, with a fake kernel: transmit (tx send, kernel
/// takes, kernel completes, completion reap) and receive (kernel delivers, rx receive, fill).
fn typed_cycles(c: &mut Criterion) {
    let mut g = c.benchmark_group("typed");
    for batch in BATCHES {
        g.throughput(Throughput::Elements(u64::from(batch)));
        let umem = Umem::new(UmemConfig::default().frame_count(1024)).unwrap();
        let mut frames = umem.take_frames().unwrap();
        for f in frames.iter_mut() {
            umem.set_len(f, 64).unwrap();
        }
        let (mut tx, mut tx_kernel) = tx_ring(&umem, 1024).unwrap();
        let (mut comp, mut comp_kernel) = completion_ring(&umem, 1024).unwrap();
        let mut addrs = Vec::with_capacity(256);
        let mut pool = Vec::with_capacity(1024);
        let mut sending: Vec<_> = frames.drain(..batch as usize).collect();
        g.bench_with_input(BenchmarkId::new("tx_cycle", batch), &batch, |b, &n| {
            b.iter(|| {
                let sent = tx.send(&mut sending, n as usize);
                addrs.clear();
                tx_kernel.consume(n, |d: RawDesc| addrs.push(d.addr));
                comp_kernel.produce(&addrs);
                comp.complete(&mut pool, n as usize);
                for mut f in pool.drain(..) {
                    umem.set_len(&mut f, 64).unwrap();
                    sending.push(f);
                }
                black_box(sent)
            })
        });

        let umem = Umem::new(UmemConfig::default().frame_count(1024)).unwrap();
        let mut frames = umem.take_frames().unwrap();
        let (mut rx, mut rx_kernel) = rx_ring(&umem, 1024).unwrap();
        let (mut fill, mut fill_kernel) = fill_ring(&umem, 1024).unwrap();
        fill.fill(&mut frames, 512);
        let mut received = Vec::with_capacity(256);
        let mut descs = Vec::with_capacity(256);
        g.bench_with_input(BenchmarkId::new("rx_cycle", batch), &batch, |b, &n| {
            b.iter(|| {
                descs.clear();
                fill_kernel.consume(n, |addr: u64| {
                    descs.push(RawDesc {
                        addr: addr + 256,
                        len: 64,
                        options: 0,
                    })
                });
                rx_kernel.produce(&descs);
                let got = rx.receive(&mut received, n as usize);
                fill.fill(&mut received, n as usize);
                black_box(got)
            })
        });
    }
    g.finish();
}

fn frame_building(c: &mut Criterion) {
    let mut g = c.benchmark_group("build");
    g.throughput(Throughput::Elements(1));
    let v4 = ProbeAddrs {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [198, 51, 100, 1],
        dst_ip: [198, 51, 100, 2],
    };
    let mut buf = vec![0u8; 1600];
    for size in [64usize, 512, 1500] {
        let t = v4.template(size).unwrap();
        let mut seq = 0u64;
        g.bench_with_input(BenchmarkId::new("ipv4_udp", size), &size, |b, _| {
            b.iter(|| {
                seq += 1;
                black_box(t.write(&mut buf, seq, seq))
            })
        });
    }
    let ends = Endpoints {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: "2001:db8::1".parse().unwrap(),
        dst_ip: "2001:db8::2".parse().unwrap(),
        src_port: 1000,
        dst_port: 9,
    };
    let t = Template::new(
        ends,
        Flows {
            src_ports: 1024,
            ..Flows::default()
        },
        Some(100),
        86,
    )
    .unwrap();
    let mut seq = 0u64;
    g.bench_function("ipv6_vlan_1024_flows_86", |b| {
        b.iter(|| {
            seq += 1;
            black_box(t.write(&mut buf, seq, seq))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = raw_verbs, typed_cycles, frame_building
}
criterion_main!(benches);
