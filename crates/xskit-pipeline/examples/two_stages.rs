//! Two stages over vectors of frames, as VPP's nodes: the first keeps IPv4 and hands it on,
//! sending the rest to the kernel; the second drops what has no TTL left and forwards the rest
//! out of port 1. The runtime splits each vector once per stage, and counts per stage.
//!
//! ```sh
//! cargo run -p xskit-pipeline --example two_stages
//! ```
use xskit::{Frame, Umem, UmemConfig};
use xskit_pipeline::{Next, Outputs, Pipeline, Stage, StageContext, StageId};
use xskit_wire::{ethernet, ipv4, EtherType};

/// IPv4 on to `then`; anything else to the kernel stack.
struct Ipv4Only {
    then: StageId,
}

impl Stage for Ipv4Only {
    fn name(&self) -> &'static str {
        "ipv4-only"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (frame, next) in frames.iter().zip(nexts.iter_mut()) {
            let ipv4 = ethernet::Frame::new_checked(umem.data(frame))
                .is_ok_and(|eth| eth.ethertype() == EtherType::Ipv4);
            *next = if ipv4 {
                Next::Stage(self.then)
            } else {
                Next::Kernel
            };
        }
    }
}

/// Packets whose TTL would run out here are dropped; the rest go out of port 1.
struct TtlGuard;

impl Stage for TtlGuard {
    fn name(&self) -> &'static str {
        "ttl-guard"
    }
    fn process(&mut self, _: &StageContext, umem: &Umem, frames: &mut [Frame], nexts: &mut [Next]) {
        for (frame, next) in frames.iter().zip(nexts.iter_mut()) {
            let ttl = ethernet::Frame::new_checked(umem.data(frame))
                .and_then(|eth| ipv4::Packet::new_checked(eth.payload()).map(|ip| ip.ttl()));
            *next = match ttl {
                Ok(ttl) if ttl > 1 => Next::Tx(1),
                _ => Next::Drop,
            };
        }
    }
}

/// A 64-byte frame: IPv4 with `ttl`, or ARP.
fn frame(umem: &Umem, f: &mut Frame, ipv4_ttl: Option<u8>) -> xskit_pipeline::Result<()> {
    let mut bytes = [0u8; 64];
    let mut eth = ethernet::Frame::new_unchecked(&mut bytes[..]);
    match ipv4_ttl {
        Some(ttl) => {
            eth.set_ethertype(EtherType::Ipv4);
            let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
            ip.init(50, 17, [198, 51, 100, 1], [203, 0, 113, 1]);
            ip.set_ttl(ttl);
        }
        None => eth.set_ethertype(EtherType::Arp),
    }
    umem.write(f, &bytes)?;
    Ok(())
}

/// Run by the crate's tests too (tests/examples.rs).
pub(crate) fn main() -> xskit_pipeline::Result<()> {
    let mut pipeline = Pipeline::new(2);
    let ttl_stage = pipeline.next_stage_id().next();
    pipeline.add_stage(Box::new(Ipv4Only { then: ttl_stage }));
    pipeline.add_stage(Box::new(TtlGuard));
    let umem = Umem::new(UmemConfig::default().frame_count(256))?;
    let mut vector = umem.take_frames().unwrap_or_default();
    for (i, f) in vector.iter_mut().enumerate() {
        // Every eighth frame is ARP, every tenth has a TTL of 1.
        let kind = match i {
            i if i % 8 == 0 => None,
            i if i % 10 == 0 => Some(1),
            _ => Some(64),
        };
        frame(&umem, f, kind)?;
    }
    let mut out = Outputs::new(2);
    pipeline.process(&umem, StageContext::default(), &mut vector, &mut out);
    println!(
        "out of port 1: {}, to the kernel: {}, dropped: {}",
        out.tx[1].len(),
        out.kernel.len(),
        out.drop.len()
    );
    // 32 ARP frames, 19 IPv4 frames with a TTL of 1, and the other 205 forwarded.
    assert_eq!(
        (out.tx[1].len(), out.kernel.len(), out.drop.len()),
        (205, 32, 19)
    );
    for (name, c) in pipeline.counters() {
        println!(
            "  {name}: {} frames in {} vector(s), {} dropped",
            c.frames, c.vectors, c.dropped
        );
    }
    Ok(())
}
