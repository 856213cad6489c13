//! A socket, its UMEM and the program that steers packets to it, handed from one owner to
//! another while packets arrive: the second owner maps the same rings and memory and carries
//! on where the first stopped, and the interface never runs without a program.

mod common;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use common::*;
use xskit::{Interface, Mode, ProgramObject, Socket, SocketConfig, Umem, UmemConfig, XdpProgram};
use xskit_testbed::TestbedConfig;
use xskit_traffic::probe::{self, SendOptions};

fn blast(tx: &mut xskit::Port, bed: &xskit_testbed::Testbed, count: u64) {
    let send = SendOptions {
        count,
        size: 64,
        window: u64::MAX,
        idle_timeout: Duration::from_secs(1),
        ..SendOptions::default()
    };
    let sent = probe::send(
        tx,
        &addrs(&bed.a, &bed.b),
        &send,
        &AtomicU64::new(0),
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(sent, count);
}

/// Receives until `want` frames have come (or ten seconds pass); returns them.
fn receive(socket: &mut Socket, want: usize) -> Vec<xskit::Frame> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if socket.rx().unwrap().receive(&mut got, 64) == 0 {
            socket
                .poll(true, false, Some(Duration::from_millis(50)))
                .unwrap();
        }
    }
    got
}

#[test]
fn a_socket_its_umem_and_its_program_change_owner_without_losing_a_packet() {
    if !privileged() {
        return;
    }
    for mode in [Mode::Skb, Mode::Drv] {
        let bed = bed(TestbedConfig::default());
        let ifname = bed.b.ifname.clone();
        let layout = UmemConfig::default().frame_count(256).shareable(true);
        let cfg = SocketConfig::default().fill_size(128).rx_size(128);
        let first = bed
            .b
            .ns
            .run(|| -> xskit::Result<_> {
                let iface = Interface::by_name(&ifname)?;
                let program = XdpProgram::attach(&iface, mode, false)?;
                let umem = Umem::new(layout)?;
                let mut socket = Socket::bind(&umem, &iface, 0, &cfg)?;
                program.register(&socket)?;
                let mut frames = umem.take_frames().unwrap();
                socket.fill().unwrap().fill(&mut frames, 128);
                Ok((iface, program, umem, socket, frames))
            })
            .unwrap()
            .unwrap();
        let (iface, program, umem, mut socket, mut free) = first;
        let mut tx = open(&bed.a, 0, &xskit::PortConfig::default().mode(mode)).unwrap();
        blast(&mut tx, &bed, 20);
        let mut got = receive(&mut socket, 20);
        assert_eq!(got.len(), 20, "{mode:?}: the first owner receives");
        // What the first owner hands over: descriptors of its link, socket and memory, and
        // which frames it holds.
        let link = program.link_fd().unwrap();
        let socket_fd = socket.as_fd().try_clone_to_owned().unwrap();
        let file = umem.file().unwrap().try_clone_to_owned().unwrap();
        free.append(&mut got);
        let addrs: Vec<u64> = free.iter().map(xskit::Frame::addr).collect();
        let second = bed
            .b
            .ns
            .run(|| -> xskit::Result<_> {
                let umem = Umem::adopt(file, layout)?;
                let socket = Socket::adopt(socket_fd, &umem, &iface, 0, &cfg)?;
                let program =
                    XdpProgram::take_over(&iface, ProgramObject::redirect(false), link, false)?;
                program.register(&socket)?;
                program.put_on_link()?;
                Ok((umem, socket, program))
            })
            .unwrap()
            .unwrap();
        let (umem2, mut socket2, program2) = second;
        assert_eq!(program2.mode(), program.mode());
        // The first owner goes: its descriptors closed, its memory unmapped.
        drop((program, socket, free, umem));
        let lost = bed.b.ns.run(|| program2.lost()).unwrap();
        assert!(lost.is_none(), "{mode:?}: {lost:?}");
        let mut frames = umem2.take_frames_at(&addrs).expect("the handed frames");
        // The 128 never given to the kernel and the 20 received.
        assert_eq!(frames.len(), 256 - 128 + 20);
        // The fill ring still holds the first owner's 108 frames: the next packets land there.
        blast(&mut tx, &bed, 20);
        let got = receive(&mut socket2, 20);
        assert_eq!(got.len(), 20, "{mode:?}: the second owner receives");
        assert!(got.iter().all(|f| umem2.data(f).len() >= 60));
        socket2.fill().unwrap().fill(&mut frames, 64);
        drop((socket2, program2));
        let left = bed
            .b
            .ns
            .run(|| iface.link_info().unwrap().xdp.any())
            .unwrap();
        assert!(left.is_none(), "{mode:?}: detached at the end");
    }
}
