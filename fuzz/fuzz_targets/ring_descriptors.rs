//! Descriptors from the kernel's rings: whatever address, length and options the rx and
//! completion rings hold, the frames made of them read and write only inside the UMEM, and
//! what goes back on the fill and tx rings are addresses of the UMEM.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xskit::testing::{completion_ring, fill_ring, rx_ring, tx_ring};
use xskit::{Frame, Umem, UmemConfig};

const FRAMES: u32 = 16;

fuzz_target!(|input: (u8, Vec<(u64, u32, u32)>)| {
    let (shape, descs) = input;
    let unaligned = shape & 1 == 1;
    let frame_size = if unaligned {
        2048 + u32::from(shape >> 1) * 8
    } else {
        2048 << (shape >> 7)
    };
    let config = UmemConfig::default()
        .frame_size(frame_size)
        .frame_count(FRAMES)
        .unaligned(unaligned)
        .headroom(u32::from(shape >> 4) * 16);
    let Ok(umem) = Umem::new(config) else {
        return;
    };
    let len = config.len();
    let (mut rx, mut rx_kernel) = rx_ring(&umem, 16).unwrap();
    let (mut cq, mut cq_kernel) = completion_ring(&umem, 16).unwrap();
    let (mut fill, mut fill_kernel) = fill_ring(&umem, 16).unwrap();
    let (mut tx, mut tx_kernel) = tx_ring(&umem, 16).unwrap();
    let mut frames: Vec<Frame> = Vec::new();
    for batch in descs.chunks(16) {
        let rx_descs: Vec<libc::xdp_desc> = batch
            .iter()
            .map(|&(addr, len, options)| libc::xdp_desc { addr, len, options })
            .collect();
        rx_kernel.produce(&rx_descs);
        let addrs: Vec<u64> = batch.iter().map(|d| d.0).collect();
        cq_kernel.produce(&addrs);
        rx.receive(&mut frames, usize::MAX);
        cq.complete(&mut frames, usize::MAX);
        for f in frames.iter_mut() {
            assert!(f.addr() + f.len() as u64 <= len, "{f:?} past {len}");
            let data = umem.data_mut(f);
            data.fill(0xa5);
        }
        // Half back to the kernel to receive into, half to send.
        let mut to_send = frames.split_off(frames.len() / 2);
        fill.fill(&mut frames, usize::MAX);
        tx.send(&mut to_send, usize::MAX);
        fill_kernel.consume(16, |addr| assert!(addr < len, "fill {addr:#x} past {len}"));
        tx_kernel.consume(16, |d| {
            assert!(
                d.addr + u64::from(d.len) <= len,
                "tx {:#x}+{} past {len}",
                d.addr,
                d.len
            )
        });
        // What the rings had no room for is dropped with the batch: ownership is the ring's.
        frames.clear();
        drop(to_send);
    }
});
