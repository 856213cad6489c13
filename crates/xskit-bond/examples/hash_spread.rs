//! How the Linux bond's transmit hashes spread 1,200 flows (one client, source ports 10000
//! to 11199, to one server's port 443) over three members: what `xmit_hash_policy` means for
//! a bond in front of a single busy service. xskit computes the same hash as the kernel, bit
//! for bit, so an XDP program or an AF_XDP bond sends each flow where the Linux bond would.
//!
//! ```sh
//! cargo run -p xskit-bond --example hash_spread
//! ```
use xskit_bond::{xmit_hash, XmitHashPolicy};
use xskit_wire::{ethernet, ip_protocol, ipv4, tcp, EtherType};

const MEMBERS: u32 = 3;

/// A TCP SYN from 198.51.100.1:`src_port` to 203.0.113.80:443.
fn syn(src_port: u16) -> [u8; 64] {
    let mut frame = [0u8; 64];
    let mut eth = ethernet::Frame::new_unchecked(&mut frame[..]);
    eth.set_src_addr([0x02, 0, 0, 0, 0, 1]);
    eth.set_dst_addr([0x02, 0, 0, 0, 0, 2]);
    eth.set_ethertype(EtherType::Ipv4);
    let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
    ip.init(40, ip_protocol::TCP, [198, 51, 100, 1], [203, 0, 113, 80]);
    let mut t = tcp::Packet::new_unchecked(ip.payload_mut());
    t.set_src_port(src_port);
    t.set_dst_port(443);
    frame
}

/// Run by the crate's tests too (tests/examples.rs).
pub(crate) fn main() {
    let flows: Vec<[u8; 64]> = (10000..11200).map(syn).collect();
    println!("{} flows over {MEMBERS} members:", flows.len());
    for policy in XmitHashPolicy::ALL {
        let mut per_member = [0u32; MEMBERS as usize];
        for frame in &flows {
            per_member[(xmit_hash(policy, frame) % MEMBERS) as usize] += 1;
        }
        println!("  {:<12} {per_member:?}", policy.name());
        // One client and one server: only the policies that read the ports spread them.
        let spread = per_member.iter().all(|&n| n > 0);
        let reads_ports = matches!(policy, XmitHashPolicy::Layer34 | XmitHashPolicy::Encap34);
        assert_eq!(spread, reads_ports, "{}: {per_member:?}", policy.name());
    }
}
