//! Your own XDP program in front of an xskit port: the program decides what goes to the
//! socket (here `bpf/udp_to_socket.c`: UDP to port 9) and what the kernel keeps. xskit loads
//! the object through aya, attaches it, and registers its socket in the object's XSKMAP,
//! which must be named `xsks_map`; the object's other maps are yours (`take_map`).
//!
//! ```sh
//! clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu \
//!       -c crates/xskit/examples/bpf/udp_to_socket.c -o udp_to_socket.o
//! cargo run --example own_program -- IFACE udp_to_socket.o udp_to_socket [COUNT]
//! ```
//! (as root). It prints what reached the socket and how many packets the program passed on.
use std::sync::Arc;
use std::time::{Duration, Instant};

use xskit::maps::PerCpuArray;
use xskit::{Interface, Mode, Port, PortConfig, ProgramObject, XdpProgram};

/// What one run saw.
#[derive(Debug)]
pub(crate) struct Seen {
    /// Packets the program sent to the socket.
    pub(crate) received: u64,
    /// Packets the program passed on to the kernel (its `passed` map).
    pub(crate) passed: u64,
}

/// Attaches program `name` of the object `elf` to `iface`, opens queue 0 through it, and
/// receives until `count` packets came or none for `idle`. `ready` is called once the
/// socket is registered.
pub(crate) fn receive_through(
    iface: &str,
    elf: &[u8],
    name: &str,
    count: u64,
    idle: Duration,
    ready: impl FnOnce(),
) -> xskit::Result<Seen> {
    let iface = Interface::by_name(iface)?;
    let program =
        XdpProgram::attach_object(&iface, ProgramObject::new(elf, name), Mode::Auto, false)?;
    let passed: PerCpuArray<_, u64> = program.take_map("passed")?;
    let mut port = Port::open_with(Arc::new(program), 0, &PortConfig::default())?;
    ready();
    let mut frames = Vec::with_capacity(64);
    let (mut received, mut last) = (0u64, Instant::now());
    while received < count && last.elapsed() < idle {
        let n = port.poll_receive(&mut frames, 64, Some(Duration::from_millis(100)))?;
        if n > 0 {
            received += n as u64;
            last = Instant::now();
        }
        port.recycle(&mut frames);
    }
    let passed = passed
        .get(&0, 0)
        .map(|per_cpu| per_cpu.iter().sum())
        .unwrap_or(0);
    Ok(Seen { received, passed })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: own_program IFACE OBJECT.o PROGRAM [COUNT]";
    let iface = args.next().ok_or(usage)?;
    let object = args.next().ok_or(usage)?;
    let name = args.next().ok_or(usage)?;
    let count = args
        .next()
        .map(|c| c.parse())
        .transpose()?
        .unwrap_or(u64::MAX);
    let elf = std::fs::read(&object).map_err(|e| format!("reading {object}: {e}"))?;
    let seen = receive_through(&iface, &elf, &name, count, Duration::from_secs(10), || {
        println!("{iface}:0 receiving through {name} of {object}")
    })?;
    println!(
        "{} packets reached the socket; the program passed {} to the kernel",
        seen.received, seen.passed
    );
    Ok(())
}
