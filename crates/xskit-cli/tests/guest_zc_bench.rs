//! Zero-copy against copy on virtio_net, measured in one run of the zero-copy guest (run by
//! `bench/guest-zc.sh`; ignored in the test suite: it measures, it asserts nothing about
//! speed). Under TCG every rate is the emulator's, so only ratios within the run mean
//! anything: each cell runs in each of three rounds (XSKIT_GUEST_ROUNDS), interleaved, and
//! the median counts.
//!
//! - rxdrop, txpush and l2fwd in SKB (generic, copy), DRV (native, copy) and zero-copy;
//! - the generic zero-copy transmit comparison by frame size: copy-mode txpush on virtio_net
//!   (which has IFF_TX_SKB_NO_LINEAR, so the kernel builds each skb around the UMEM page),
//!   zero-copy txpush, and copy-mode txpush on a veth pair in the same guest (which copies);
//! - `xskit fwd` between the guest's two NICs in copy and in zero-copy, host to host.
//!
//! The host's xskit generates flat out from host a where a cell needs traffic in (to the
//! guest's own MAC, or to host c's through the forwarder); it shares the host's two cores with
//! the emulator in every such cell alike. Rates are the guest's own counts for rxdrop (rx) and
//! txpush (tx); for the loops that forward (l2fwd back to a, fwd on to c) they are what reached
//! the host's side of the NIC they transmit on, over the generator's own sending time: the two
//! are measured alike, so that fwd can be read against l2fwd.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use xskit_testbed::{GuestConfig, GuestWire, Host, RunningGuest, WAIT_FOR};

/// One measurement: what runs in the guest, and whether the host sends into it meanwhile.
struct Cell {
    name: String,
    guest: String,
    feed: bool,
}

/// Locally administered MACs no host of the run owns: where the generator's frames come from
/// and, through the forwarder, go to.
const NOBODY_FROM: &str = "02:00:00:00:5e:01";
const NOBODY_TO: &str = "02:00:00:00:5e:02";
/// Rounds unless XSKIT_GUEST_ROUNDS says how many.
const ROUNDS: usize = 3;
const SECONDS: u32 = 4;

fn cells() -> Vec<Cell> {
    let mut cells = Vec::new();
    let d = SECONDS;
    for kind in ["rxdrop", "l2fwd"] {
        for mode in ["skb", "drv", "zc"] {
            cells.push(Cell {
                name: format!("{kind} {mode}"),
                guest: format!("$XSKIT bench {kind} -i eth0 -m {mode} -d {d} --json"),
                feed: true,
            });
        }
    }
    for size in [60, 508, 1496] {
        for mode in ["skb", "drv", "zc"] {
            cells.push(Cell {
                name: format!("txpush {mode} {size}"),
                guest: format!("$XSKIT bench txpush -i eth1 -m {mode} -s {size} -d {d} --json"),
                feed: false,
            });
        }
        cells.push(Cell {
            name: format!("txpush veth {size}"),
            guest: format!("$XSKIT bench txpush -i xva -m drv -s {size} -d {d} --json"),
            feed: false,
        });
    }
    for mode in ["drv", "zc"] {
        cells.push(Cell {
            name: format!("fwd {mode}"),
            guest: format!("$XSKIT fwd -i eth0 -i eth1 -m {mode} -d {d} --json"),
            feed: true,
        });
        // fwd in l2fwd's own pairing: in and back out of one NIC, MACs swapped.
        cells.push(Cell {
            name: format!("fwd-reflect {mode}"),
            guest: format!("$XSKIT fwd -i eth0 --reflect -m {mode} -d {d} --json"),
            feed: true,
        });
    }
    // XSKIT_GUEST_CELLS="l2fwd zc,fwd zc" measures only those (a shorter run while tuning).
    if let Ok(only) = std::env::var("XSKIT_GUEST_CELLS") {
        let only: Vec<&str> = only.split(',').map(str::trim).collect();
        cells.retain(|c| only.contains(&c.name.as_str()));
        assert!(
            !cells.is_empty(),
            "XSKIT_GUEST_CELLS names no cell: {only:?}"
        );
    }
    cells
}

/// The guest's side: for each round and cell, start the cell, say when it is ready (its
/// header on stderr), and print its JSON on one line.
fn script(cells: &[Cell], rounds: usize) -> String {
    let mut s = format!(
        "{WAIT_FOR}\nXSKIT={XSKIT}\nj=$TMPDIR\n\
         ip link set eth0 up; ip link set eth1 up\n\
         ip link add xva type veth peer name xvb; ip link set xva up; ip link set xvb up\n"
    );
    for round in 0..rounds {
        for (k, cell) in cells.iter().enumerate() {
            let id = format!("{round}-{k}");
            s.push_str(&format!(
                "{} > $j/{id}.json 2> $j/{id}.err &\npid=$!\n\
                 until grep -q -e Ctrl-C -e '{}' $j/{id}.err; do kill -0 $pid || break; sleep 0.1; done\n\
                 echo \"READY {id}\"; wait $pid\necho \"RESULT {id} $(tr -d '\\n' < $j/{id}.json)\"\n",
                cell.guest,
                cell.name.split(' ').next().unwrap_or("")
            ));
        }
    }
    s
}

/// The rate a cell measured: packets per second from its own report.
fn rate(cell: &Cell, report: &serde_json::Value, delivered: Option<f64>) -> f64 {
    if let Some(pps) = delivered {
        return pps;
    }
    let key = if cell.name.starts_with("rxdrop") {
        "rx_pps"
    } else {
        "tx_pps"
    };
    report[key].as_f64().unwrap_or(0.0)
}

/// The host-side TAP a forwarding cell transmits to (l2fwd reflects to a, fwd forwards to
/// c), or none for a cell measured by its own count.
fn delivered_to(name: &str) -> Option<&'static str> {
    match name.split(' ').next() {
        Some("l2fwd") => Some("xgtap0"),
        Some("fwd") => Some("xgtap1"),
        Some("fwd-reflect") => Some("xgtap0"),
        _ => None,
    }
}

/// The wakeup system calls a cell's loop made per thousand packets it moved: bench's own
/// count, or the sum of fwd's ports' fill and tx wakeups over what they transmitted.
fn wakeups_per_kpacket(cell: &Cell, report: &serde_json::Value) -> f64 {
    let n = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let (wakeups, packets) = if cell.name.starts_with("fwd") {
        let ports = report["counters"]["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ports.iter().fold((0.0, 0.0), |(w, p), port| {
            (
                w + n(port, "fill_wakeups") + n(port, "tx_wakeups"),
                p + n(port, "tx_packets"),
            )
        })
    } else {
        let moved = n(report, "tx_packets").max(n(report, "rx_packets"));
        (n(report, "wakeups"), moved)
    };
    if packets > 0.0 {
        1000.0 * wakeups / packets
    } else {
        0.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs one cell's host side: waits until it is ready, feeds it, and returns what the TAP
/// device it transmits to received from the guest meanwhile, per second of the generator's
/// sending (not of its process, whose start and end send nothing).
fn host_side(a: &Host, c: &Host, running: &RunningGuest<'_>, cell: &Cell, id: &str) -> Option<f64> {
    assert!(
        running.wait_for_output(&format!("READY {id}"), Duration::from_secs(300)),
        "{id}: {}",
        running.output()
    );
    if !cell.feed {
        return None;
    }
    let ns = running.ns().clone();
    let rx = |tap: &str| -> u64 {
        let out = ns
            .command("cat")
            .arg(format!("/sys/class/net/{tap}/statistics/rx_packets"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let tap = delivered_to(&cell.name);
    let before = tap.map(&rx);
    let secs = (SECONDS - 1).to_string();
    // To the guest's own MAC for its sockets (rxdrop, l2fwd: the NIC filters by MAC), to a
    // MAC nobody owns through the forwarder (which makes its NICs promiscuous); from a MAC
    // nobody owns, so that l2fwd's reflections too reach a host that drops them at layer 2:
    // what each loop delivers costs the host's two CPUs, which the emulator needs, alike.
    let mac = if cell.name.starts_with("fwd") {
        NOBODY_TO.to_string()
    } else {
        xskit_testbed::Guest::mac(0)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let dst = c.ip.to_string();
    // The generator on CPU 0, beside whatever of the emulator the scheduler puts there.
    let out = run(
        a,
        "taskset",
        &[
            "-c",
            "0",
            XSKIT,
            "gen",
            "-i",
            &a.ifname,
            "-d",
            &secs,
            "--src-mac",
            NOBODY_FROM,
            "--dst-mac",
            &mac,
            "--dst-ip",
            &dst,
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let sending = report["duration_s"].as_f64().unwrap_or(0.0);
    assert!(
        sending > 0.0,
        "{id}: gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((rx(tap?) - before?) as f64 / sending)
}

#[test]
#[ignore = "a measurement: bench/guest-zc.sh runs it"]
fn zero_copy_against_copy_in_one_guest_run() {
    if !privileged() {
        return;
    }
    let cells = cells();
    let rounds = match std::env::var("XSKIT_GUEST_ROUNDS") {
        Ok(r) => r
            .parse()
            .ok()
            .filter(|&r: &usize| r > 0)
            .unwrap_or_else(|| {
                panic!("XSKIT_GUEST_ROUNDS={r:?}: give a count of rounds, 1 or more")
            }),
        Err(_) => ROUNDS,
    };
    let mut wire = GuestWire::new(
        &GuestConfig::zero_copy(2)
            .queues(1)
            .timeout(Duration::from_secs(3600)),
        1,
    )
    .unwrap();
    let script = script(&cells, rounds);
    let running = wire.guest.spawn(&script).unwrap();
    let mut delivered: BTreeMap<String, f64> = BTreeMap::new();
    for round in 0..rounds {
        for (k, cell) in cells.iter().enumerate() {
            let id = format!("{round}-{k}");
            if let Some(pps) = host_side(&wire.a, &wire.c, &running, cell, &id) {
                delivered.insert(id, pps);
            }
        }
    }
    let run = running.wait().unwrap();
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut wakeups: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..rounds {
        for (k, cell) in cells.iter().enumerate() {
            let id = format!("{round}-{k}");
            let line = run
                .output
                .lines()
                .find_map(|l| l.strip_prefix(&format!("RESULT {id} ")))
                .unwrap_or_else(|| panic!("no result for {id}: {}", run.output));
            let report: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            wakeups
                .entry(&cell.name)
                .or_default()
                .push(wakeups_per_kpacket(cell, &report));
            rates.entry(&cell.name).or_default().push(rate(
                cell,
                &report,
                delivered.get(&id).copied(),
            ));
        }
    }
    let medians: BTreeMap<&str, f64> = rates.iter().map(|(k, v)| (*k, median(v.clone()))).collect();
    print_tables(&medians);
    print_paired(&rates, &wakeups);
    if let Some(path) = std::env::var_os("XSKIT_BENCH_OUT") {
        let json = serde_json::json!({
            "guest_kernel": xskit_testbed::GuestKernel::ZeroCopy.release().unwrap_or_default(),
            "rounds": rounds,
            "seconds": SECONDS,
            "rates": rates,
            "medians": medians,
            "wakeups_per_kpacket": wakeups,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    }
}

/// fwd against l2fwd round by round (each round's cells ran one after the other, so their
/// ratio is free of the drift between rounds), and each forwarding loop's wakeup calls.
fn print_paired(rates: &BTreeMap<&str, Vec<f64>>, wakeups: &BTreeMap<&str, Vec<f64>>) {
    for (kind, mode) in [
        ("fwd", "drv"),
        ("fwd", "zc"),
        ("fwd-reflect", "drv"),
        ("fwd-reflect", "zc"),
    ] {
        let (fwd, l2fwd) = (format!("{kind} {mode}"), format!("l2fwd {mode}"));
        if let (Some(f), Some(l)) = (rates.get(fwd.as_str()), rates.get(l2fwd.as_str())) {
            let paired: Vec<f64> = f.iter().zip(l).map(|(f, l)| f / l.max(1.0)).collect();
            let each: Vec<String> = paired.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "| {fwd} / {l2fwd}, round by round | {} | median {:.2}x |",
                each.join(" "),
                median(paired.clone())
            );
        }
    }
    println!("| loop | wakeup calls per 1,000 packets (median) |");
    println!("|---|---|");
    for (name, per) in wakeups.iter().filter(|(n, _)| delivered_to(n).is_some()) {
        println!("| {name} | {:.1} |", median(per.clone()));
    }
}

fn print_tables(m: &BTreeMap<&str, f64>) {
    let kpps = |k: &str| m.get(k).copied().unwrap_or(0.0) / 1000.0;
    let ratio = |a: &str, b: &str| {
        let (a, b) = (
            m.get(a).copied().unwrap_or(0.0),
            m.get(b).copied().unwrap_or(0.0),
        );
        if b > 0.0 {
            format!("{:.2}x", a / b)
        } else {
            "-".into()
        }
    };
    println!("| loop | skb kpps | drv kpps | zc kpps | zc / drv | zc / skb |");
    println!("|---|---|---|---|---|---|");
    for kind in ["rxdrop", "l2fwd", "txpush"] {
        let key = |mode: &str| match kind {
            "txpush" => format!("txpush {mode} 60"),
            _ => format!("{kind} {mode}"),
        };
        println!(
            "| {kind} | {:.1} | {:.1} | {:.1} | {} | {} |",
            kpps(&key("skb")),
            kpps(&key("drv")),
            kpps(&key("zc")),
            ratio(&key("zc"), &key("drv")),
            ratio(&key("zc"), &key("skb"))
        );
    }
    println!(
        "| fwd | - | {:.1} | {:.1} | {} | - |",
        kpps("fwd drv"),
        kpps("fwd zc"),
        ratio("fwd zc", "fwd drv")
    );
    println!();
    println!("| fwd / l2fwd | drv | zc |");
    println!("|---|---|---|");
    println!(
        "| xskit fwd (eth0 to eth1) against bench l2fwd (eth0 back to eth0) | {} | {} |",
        ratio("fwd drv", "l2fwd drv"),
        ratio("fwd zc", "l2fwd zc")
    );
    println!(
        "| xskit fwd --reflect (eth0 back to eth0) against bench l2fwd (the same) | {} | {} |",
        ratio("fwd-reflect drv", "l2fwd drv"),
        ratio("fwd-reflect zc", "l2fwd zc")
    );
    println!();
    println!("| frame | veth copy kpps | virtio_net copy (page-based skb) kpps | virtio_net zc kpps | copy virtio / veth | zc / copy virtio |");
    println!("|---|---|---|---|---|---|");
    for size in [60, 508, 1496] {
        let k = |mode: &str| format!("txpush {mode} {size}");
        println!(
            "| {size} B | {:.1} | {:.1} | {:.1} | {} | {} |",
            kpps(&k("veth")),
            kpps(&k("drv")),
            kpps(&k("zc")),
            ratio(&k("drv"), &k("veth")),
            ratio(&k("zc"), &k("drv"))
        );
    }
}
