//! Real traffic through `xskit fwd`: the hosts' own kernel TCP and UDP stacks with their
//! default offloads (partial checksums, TSO super-packets), IPv4 and IPv6, in every mode, with
//! `--xdp-forward`, on two queues, and at MTU 9000. Every byte sent is hashed on both ends.

mod common;

use common::*;

use std::hash::Hasher;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use xskit_testbed::{BridgedOptions, Chain, Host};

/// Deterministic bytes for connection `seed`.
struct Bytes(u64);

impl Bytes {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

fn addr(host: &Host, v6: bool, port: u16) -> SocketAddr {
    let ip = if v6 {
        IpAddr::V6(host.ip6.expect("an IPv6 testbed"))
    } else {
        IpAddr::V4(host.ip)
    };
    SocketAddr::new(ip, port)
}

/// `conns` kernel TCP connections from a to c, `bytes` each; every byte sent is hashed and
/// compared with what c received.
fn tcp_streams(chain: &Chain, v6: bool, conns: usize, bytes: usize) {
    let to = addr(&chain.c, v6, 5201);
    let listener = chain.c.ns.run(|| TcpListener::bind(to)).unwrap().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..conns {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            got.push(std::thread::spawn(move || {
                let (mut h, mut n, mut buf) = (
                    std::collections::hash_map::DefaultHasher::new(),
                    0usize,
                    vec![0u8; 65536],
                );
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => {
                            h.write(&buf[..k]);
                            n += k;
                        }
                        Err(e) => panic!("receiving after {n} bytes: {e}"),
                    }
                }
                (h.finish(), n)
            }));
        }
        let mut out: Vec<(u64, usize)> = got.into_iter().map(|t| t.join().unwrap()).collect();
        out.sort();
        out
    });
    let mut sent: Vec<(u64, usize)> = chain
        .a
        .ns
        .run(|| {
            let senders: Vec<_> = (0..conns)
                .map(|c| {
                    std::thread::spawn(move || {
                        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
                            .expect("connecting through xskit fwd");
                        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
                        let mut gen = Bytes(0x9e37_79b9_7f4a_7c15 ^ (c as u64 + 1));
                        let mut h = std::collections::hash_map::DefaultHasher::new();
                        let mut buf = vec![0u8; 65536];
                        let mut left = bytes;
                        while left > 0 {
                            let k = left.min(buf.len());
                            gen.fill(&mut buf[..k]);
                            h.write(&buf[..k]);
                            s.write_all(&buf[..k]).expect("sending through xskit fwd");
                            left -= k;
                        }
                        (h.finish(), bytes)
                    })
                })
                .collect();
            senders
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        })
        .unwrap();
    sent.sort();
    let received = receiver.join().unwrap();
    assert_eq!(sent, received, "every byte of every stream arrived intact");
}

/// c's kernel UDP counters (`Udp:` in /proc/net/snmp, `Udp6` ones for IPv6), by name.
fn udp_counters(host: &Host, v6: bool) -> Vec<(String, u64)> {
    let (file, prefix) = if v6 {
        ("/proc/net/snmp6", "Udp6")
    } else {
        ("/proc/net/snmp", "Udp:")
    };
    let text = ok(&run(host, "cat", &[file]));
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
    if v6 {
        return lines
            .iter()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap_or(0)))
            .collect();
    }
    let names = lines[0].split_whitespace().skip(1);
    let values = lines[1].split_whitespace().skip(1);
    names
        .zip(values)
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(0)))
        .collect()
}

/// The counters that moved between `before` and `after`.
fn moved(before: &[(String, u64)], after: &[(String, u64)]) -> String {
    after
        .iter()
        .zip(before)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((k, a), (_, b))| format!("{k} +{}", a - b))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fails the test with `shortfall`, the forwarder's own account beside it.
fn fail_with_report(fwd: KillOnDrop, what: &str, shortfall: String) -> ! {
    let report = signal(fwd, "-INT");
    panic!("{what}: {shortfall}\nthe forwarder's report: {report}")
}

/// A UDP socket of `host`'s kernel bound to `to`, which gives up on a read after 3 s, with
/// room for `count` datagrams of `size` bytes at once (each is charged about twice its size):
/// a receiving thread descheduled on a loaded machine must not lose any to a full socket
/// buffer (RcvbufErrors), which the default 208 KiB holds only a dozen of at 8900 bytes.
fn roomy_socket(host: &Host, to: SocketAddr, count: usize, size: usize) -> UdpSocket {
    let rx = host.ns.run(|| UdpSocket::bind(to)).unwrap().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let room = libc::c_int::try_from(count * (size + 4096) * 2).unwrap();
    xskit_os::setsockopt(
        std::os::fd::AsFd::as_fd(&rx),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        &room,
        "setsockopt(SO_RCVBUFFORCE)",
    )
    .unwrap();
    rx
}

/// UDP datagrams from a kernel socket on a to one on c: all arrive, content intact. A
/// shortfall says which datagrams are missing and what c's UDP counters saw meanwhile.
fn udp_datagrams(chain: &Chain, v6: bool, count: usize, size: usize) -> Result<(), String> {
    let to = addr(&chain.c, v6, 5300);
    let rx = roomy_socket(&chain.c, to, count, size);
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while let Ok(n) = rx.recv(&mut buf) {
            got.push(buf[..n].to_vec());
            if got.len() == count {
                break;
            }
        }
        got
    });
    let counters_before = udp_counters(&chain.c, v6);
    let from = addr(&chain.a, v6, 0);
    // Resolve c first: datagrams to an unresolved neighbour wait in a's kernel, which keeps
    // only about 90 of this size and drops the rest if resolution is slow (under load).
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "1", "-W", "3", &to.ip().to_string()],
    ));
    chain
        .a
        .ns
        .run(|| {
            let tx = UdpSocket::bind(from).unwrap();
            let mut gen = Bytes(7);
            let mut buf = vec![0u8; size];
            for i in 0..count {
                gen.fill(&mut buf);
                buf[..4].copy_from_slice(&(i as u32).to_be_bytes());
                tx.send_to(&buf, to).unwrap();
                std::thread::sleep(Duration::from_micros(500));
            }
        })
        .unwrap();
    let got = receiver.join().unwrap();
    if got.len() != count {
        let seen: std::collections::BTreeSet<u32> = got
            .iter()
            .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        let missing: Vec<u32> = (0..count as u32).filter(|i| !seen.contains(i)).collect();
        return Err(format!(
            "{} of {count} datagrams of {size} bytes arrived; missing {missing:?}; \
             c's UDP counters moved: {}",
            got.len(),
            moved(&counters_before, &udp_counters(&chain.c, v6)),
        ));
    }
    let mut gen = Bytes(7);
    let mut want = vec![0u8; size];
    for (i, d) in got.iter().enumerate() {
        gen.fill(&mut want);
        want[..4].copy_from_slice(&(i as u32).to_be_bytes());
        assert_eq!(d, &want, "datagram {i} intact and in order");
    }
    Ok(())
}

fn tcp_case(options: BridgedOptions, fwd_args: &[&str], conns: usize) -> serde_json::Value {
    let chain = Chain::bridged_with(&options).unwrap();
    if fwd_args.contains(&"--xdp-forward") {
        far_ends_take_xdp_frames(&chain);
    }
    let fwd = start_fwd(&chain, &[fwd_args, &["--check"][..]].concat());
    tcp_streams(&chain, false, conns, 16 << 20);
    if options.ipv6 {
        tcp_streams(&chain, true, conns, 16 << 20);
    }
    stop_fwd(fwd)
}

fn v4v6() -> BridgedOptions {
    BridgedOptions {
        queues: 1,
        mtu: None,
        ipv6: true,
    }
}

fn sum(report: &serde_json::Value, field: &str) -> u64 {
    report["counters"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[field].as_u64().unwrap())
        .sum()
}

#[test]
fn kernel_tcp_crosses_in_auto_mode() {
    if !privileged() {
        return;
    }
    let r = tcp_case(v4v6(), &[], 1);
    assert!(
        sum(&r, "checksums_offloaded") > 0,
        "partial checksums seen: {r}"
    );
    // The kernel's segments, their checksums left to the kernel, went rx ring to tx ring.
    assert!(sum(&r, "tx_direct") > 0, "{r}");
}

#[test]
fn kernel_tcp_crosses_in_drv_mode() {
    if !privileged() {
        return;
    }
    let r = tcp_case(v4v6(), &["-m", "drv"], 1);
    assert!(sum(&r, "tx_direct") > 0, "{r}");
}

#[test]
fn kernel_tcp_crosses_in_skb_mode_with_tso_super_packets() {
    if !privileged() {
        return;
    }
    let r = tcp_case(v4v6(), &["-m", "skb"], 1);
    assert!(sum(&r, "segmented") > 0, "super-packets were cut: {r}");
    assert_eq!(sum(&r, "oversize_dropped"), 0, "{r}");
}

#[test]
fn kernel_tcp_crosses_with_checksums_summed_in_software() {
    if !privileged() {
        return;
    }
    for mode in ["drv", "skb"] {
        let r = tcp_case(v4v6(), &["-m", mode, "--checksum", "software"], 1);
        assert_eq!(sum(&r, "checksums_offloaded"), 0, "{r}");
        assert!(sum(&r, "checksums_completed") > 0, "{r}");
    }
}

#[test]
fn kernel_tcp_crosses_with_xdp_forward() {
    if !privileged() {
        return;
    }
    for mode in ["drv", "skb"] {
        tcp_case(v4v6(), &["-m", mode, "--xdp-forward"], 1);
    }
}

#[test]
fn kernel_tcp_crosses_on_two_queues() {
    if !privileged() {
        return;
    }
    let options = BridgedOptions {
        queues: 2,
        mtu: None,
        ipv6: false,
    };
    let r = tcp_case(options, &["-m", "drv"], 4);
    assert_eq!(r["workers"], 2, "{r}");
}

#[test]
fn kernel_udp_crosses_in_every_mode() {
    if !privileged() {
        return;
    }
    for mode in ["drv", "skb"] {
        let chain = Chain::bridged_with(&v4v6()).unwrap();
        let fwd = start_fwd(&chain, &["-m", mode]);
        for v6 in [false, true] {
            if let Err(e) = udp_datagrams(&chain, v6, 200, 1000) {
                fail_with_report(fwd, mode, e);
            }
        }
        stop_fwd(fwd);
    }
}

#[test]
fn jumbo_frames_cross_at_mtu_9000() {
    if !privileged() {
        return;
    }
    let options = BridgedOptions {
        queues: 1,
        mtu: Some(9000),
        ipv6: false,
    };
    for mode in ["drv", "skb"] {
        let chain = Chain::bridged_with(&options).unwrap();
        let fwd = start_fwd(&chain, &["-m", mode]);
        let ping = chain
            .a
            .ns
            .command("ping")
            .args(["-c", "3", "-i", "0.2", "-W", "2", "-s", "8000", "-M", "do"])
            .arg(chain.c.ip.to_string())
            .output()
            .unwrap();
        assert!(
            ping.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        tcp_streams(&chain, false, 1, 16 << 20);
        if let Err(e) = udp_datagrams(&chain, false, 100, 8900) {
            fail_with_report(fwd, mode, e);
        }
        probes_of_9000_bytes(&chain, mode);
        let r = stop_fwd(fwd);
        assert_eq!(r["modes"][0], format!("xdp-{mode}"), "{r}");
        assert_eq!(sum(&r, "oversize_dropped"), 0, "{r}");
    }
}

/// 2,000 sequence-numbered 9000-byte probes (multi-buffer frames) from `xskit gen` on a to
/// `xskit recv` on c, checked one by one.
fn probes_of_9000_bytes(chain: &Chain, mode: &str) {
    probes(chain, mode, "9000", &["--frags"]);
}

/// Probes whose UDP checksums the sender left partial (`gen --partial-csum`, as a sender
/// that offloads them to its device leaves them) arrive at c intact: fwd finishes each one
/// in software. (Handed to veth's offload instead, they would reach c's kernel marked
/// partial, which its stack accepts, but an AF_XDP receiver reads the bytes as they are.)
#[test]
fn probes_with_partial_checksums_arrive_finished() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let software = ["-m", "drv", "--checksum", "software"];
    let mut fwd = Live::new(start_fwd_lines(&chain, &software));
    assert!(
        fwd.wait(Duration::from_secs(60), |_| true).is_some(),
        "fwd started"
    );
    let c = &chain.c.ifname;
    let args = [
        "recv",
        "-i",
        c,
        "-m",
        "drv",
        "--json-lines",
        "-I",
        "0.1",
        "-d",
        "60",
    ];
    let mut recv = Live::new(KillOnDrop::new(start(&chain.c, &args)));
    assert!(
        recv.wait(Duration::from_secs(60), |_| true).is_some(),
        "recv started"
    );
    let out = gen_a_to_c(
        &chain,
        &[
            "-m",
            "drv",
            "--json",
            "-n",
            "2000",
            "-r",
            "5000",
            "--partial-csum",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    recv.wait(Duration::from_secs(30), |l| {
        l["counters"]["ports"][0]["valid"].as_u64().unwrap_or(0) >= 2000
    });
    let r = recv.stop();
    // c's kernel, which nobody here wrote, checks the same probes' checksums too.
    let kernel = kernel_takes_partial_probes(&chain);
    let f = fwd.stop();
    if let Err(shortfall) = kernel {
        panic!("c's UDP socket: {shortfall}\nfwd {f}");
    }
    assert_eq!(r["valid"], 2000, "{r}\nfwd {f}");
    assert_eq!(r["corrupt"], 0, "{r}");
    assert!(sum(&f, "checksums_completed") >= 4000, "{f}");
}

/// 2,000 `xskit gen --partial-csum` probes from a through the forwarder to a UDP socket of
/// c's kernel, which verifies each checksum itself (veth's receive offload is turned off:
/// left on, veth tells the stack every packet's checksum was checked) and drops a bad one
/// (InCsumErrors). Err says how many arrived and which of c's UDP counters moved.
fn kernel_takes_partial_probes(chain: &Chain) -> Result<(), String> {
    let c = &chain.c;
    ok(&run(c, "ethtool", &["-K", &c.ifname, "rx", "off"]));
    let rx = roomy_socket(c, addr(c, false, 5300), 2000, 64);
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut got = 0;
        while got < 2000 && rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let before = udp_counters(c, false);
    let args = [
        "-n",
        "2000",
        "-r",
        "5000",
        "--partial-csum",
        "--dst-port",
        "5300",
    ];
    let out = gen_a_to_c(chain, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = receiver.join().unwrap();
    if got == 2000 {
        return Ok(());
    }
    let moved = moved(&before, &udp_counters(c, false));
    Err(format!(
        "{got} of 2000 probes arrived; c's UDP counters: {moved}"
    ))
}

/// `xskit gen` from a to c's MAC and address, with `extra` options.
fn gen_a_to_c(chain: &Chain, extra: &[&str]) -> std::process::Output {
    let (dst_mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    chain
        .a
        .ns
        .command(XSKIT)
        .args(["gen", "-i", &chain.a.ifname])
        .args(["--dst-mac", &dst_mac, "--src-ip", &src, "--dst-ip", &dst])
        .args(extra)
        .output()
        .unwrap()
}

/// 2,000 sequence-numbered probes of `size` bytes from `xskit gen` on a to `xskit recv` on c,
/// checked one by one.
fn probes(chain: &Chain, mode: &str, size: &str, recv_extra: &[&str]) {
    let n = "2000";
    let mut args = vec![
        "recv",
        "-i",
        &chain.c.ifname,
        "-m",
        mode,
        "-n",
        n,
        "-d",
        "20",
        "--json",
    ];
    args.extend_from_slice(recv_extra);
    let receiver = KillOnDrop::new(start(&chain.c, &args));
    let out = gen_a_to_c(
        chain,
        &["-m", mode, "--json", "-s", size, "-n", n, "-r", "5000"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json_of(receiver.take());
    assert_eq!(
        r["valid"], 2000,
        "every {size}-byte probe crossed intact: {r}"
    );
    assert_eq!(r["corrupt"], 0, "{r}");
}

#[test]
fn iperf3_runs_through_fwd() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged_with(&v4v6()).unwrap();
    let fwd = start_fwd(&chain, &[]);
    let server = KillOnDrop::new(
        chain
            .c
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-p", "5202"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("iperf3 (scripts/setup.sh installs it)"),
    );
    wait_listening(&chain.c, "5202");
    let out = chain
        .a
        .ns
        .command("iperf3")
        .args(["-c", &chain.c.ip.to_string(), "-p", "5202", "-t", "2", "-J"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let received = j["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(received > 10 << 20, "iperf3 moved {received} bytes");
    drop(server);
    stop_fwd(fwd);
}

#[test]
fn the_smallest_and_largest_ring_sizes_forward() {
    if !privileged() {
        return;
    }
    for (ring, vector) in [("32", "32"), ("32768", "64")] {
        let chain = Chain::bridged_with(&BridgedOptions {
            queues: 1,
            mtu: None,
            ipv6: false,
        })
        .unwrap();
        let fwd = start_fwd(
            &chain,
            &["-m", "drv", "--ring-size", ring, "--vector", vector],
        );
        tcp_streams(&chain, false, 1, 4 << 20);
        let receiver = recv(&chain.c, &["-m", "drv", "--expect", "2000", "-d", "10"]);
        let out = gen_a_to_c(&chain, &["-m", "drv", "--json", "-n", "2000", "-r", "5000"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = receiver.take().wait_with_output().unwrap();
        let r: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        let f = stop_fwd(fwd);
        let counted = |p: &serde_json::Value| {
            ["socket_rx_dropped", "socket_rx_ring_full", "tx_ring_full"]
                .iter()
                .map(|k| p[k].as_u64().unwrap())
                .sum::<u64>()
        };
        let dropped: u64 = f["counters"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(counted)
            .sum();
        // A 32-entry ring holds 6 ms at this rate: a worker descheduled longer (other tests
        // share the two CPUs) loses packets, but never silently.
        assert_eq!(r["corrupt"], 0, "{r}");
        assert!(
            r["lost"].as_u64().unwrap() <= dropped,
            "ring {ring}: every loss is counted by fwd\nrecv {r}\nfwd {f}"
        );
        if ring != "32" {
            assert_eq!(r["valid"], 2000, "ring {ring}: {r}\nfwd {f}");
        }
        // In copy mode every transmit needs a wakeup call, and each port says how many it made.
        for p in f["counters"]["ports"].as_array().unwrap() {
            let sent = p["tx_packets"].as_u64().unwrap();
            let kicks = p["tx_wakeups"].as_u64().unwrap();
            assert!(
                sent == 0 || kicks > 0,
                "sent {sent} with {kicks} wakeups: {p}"
            );
            assert!(p["fill_wakeups"].is_u64(), "{p}");
        }
    }
}

#[test]
fn xdp_forwarding_counts_what_left_not_verdicts() {
    if !privileged() {
        return;
    }
    for gro in [true, false] {
        let chain = Chain::bridged().unwrap();
        if gro {
            far_ends_take_xdp_frames(&chain);
        }
        let fwd = start_fwd_lines(&chain, &["-m", "drv", "--xdp-forward"]);
        let out = gen_a_to_c(&chain, &["-m", "drv", "-n", "3000", "-r", "20000"]);
        assert!(out.status.success());
        let decided = |port: &serde_json::Value| {
            port["xdp_forwarded"].as_u64().unwrap()
                + port["xdp_partial_checksums"].as_u64().unwrap()
        };
        let r = interrupt_when(fwd, Duration::from_secs(60), |line| {
            decided(&line["counters"]["ports"][0]) >= 3000
        });
        assert_eq!(r["frames"]["unaccounted"], 0, "{r}");
        let (ma, mc) = (&r["counters"]["ports"][0], &r["counters"]["ports"][1]);
        let in_xdp = ma["xdp_forwarded"].as_u64().unwrap();
        // A probe whose correct checksum happens to equal its pseudo-header sum (1 in 65,536)
        // looks partial and crosses through user space instead, counted apart. (a's kernel
        // may add an ARP request of its own, for c's ICMP replies.)
        let partial = ma["xdp_partial_checksums"].as_u64().unwrap();
        assert!(in_xdp + partial >= 3000, "{r}");
        if gro {
            assert!(mc["device_tx_packets"].as_u64().unwrap() >= 3000, "{r}");
            assert_eq!(mc["xdp_forward_undelivered"], 0, "{r}");
        } else {
            // The far end cannot take XDP frames: the verdicts stand, and so do the losses.
            assert_eq!(
                mc["xdp_forward_undelivered"].as_u64().unwrap(),
                in_xdp,
                "{r}"
            );
        }
    }
}
