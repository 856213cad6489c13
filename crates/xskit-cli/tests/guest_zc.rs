//! The zero-copy guest: Linux 7.x under QEMU with virtio NICs that do AF_XDP zero-copy and,
//! as real NICs do, filter unicast frames by destination MAC. Every AF_XDP path of xskit runs
//! there in zero-copy and is counted at both ends: the guest's xskit on its NIC, the host's
//! xskit (or the device's counters) on the TAP device behind it.
//!
//! A boot takes seconds under TCG, so each test puts its steps into one script and steps
//! with the host through markers the script prints and signals the host sends. The tests run
//! one at a time: two emulated guests on the host's two cores starve each other.

mod common;

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use xskit_testbed::{Guest, GuestConfig, GuestWire, Host, Netns, RunningGuest, WAIT_FOR};

/// A guest for a test, or a skip without root (a failure under XSKIT_REQUIRE_PRIVILEGES).
fn guest(config: GuestConfig) -> Option<Guest> {
    if !privileged() {
        return None;
    }
    Some(Guest::new(&config).unwrap_or_else(|e| panic!("guest testbed: {e}")))
}

/// The TAP device behind the guest's first NIC.
const TAP: &str = "xgtap0";
/// How long one step of a guest's script may take under TCG.
const STEP: Duration = Duration::from_secs(120);

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `xskit ARGS` on the host's side of the guest (its namespace).
fn host_xskit(ns: &Netns, args: &[&str]) -> Output {
    ns.command(XSKIT).args(args).output().unwrap()
}

/// Packets the TAP device received from the guest (what the guest's NIC transmitted).
fn tap_rx(ns: &Netns) -> u64 {
    let out = ns
        .command("cat")
        .arg(format!("/sys/class/net/{TAP}/statistics/rx_packets"))
        .output()
        .unwrap();
    text(&out).trim().parse().unwrap()
}

/// `xskit recv` on the TAP device, started and ready (its header printed): it counts what
/// the guest sends, `expect` probes, then prints its JSON report.
fn start_host_recv(ns: &Netns, dir: &Path, expect: u64) -> Child {
    let err = dir.join("host-recv.err");
    let child = ns
        .command(XSKIT)
        .args(["recv", "-i", TAP, "--json", "--idle", "30"])
        .args(["--expect", &expect.to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&err)
        .unwrap_or_default()
        .contains("recv")
    {
        assert!(Instant::now() < deadline, "the host's recv did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// A JSON report the guest wrote into the job share: its last line (the summary, after the
/// interval lines of `--json-lines`).
fn shared_json(share: &Path, name: &str) -> serde_json::Value {
    let path = share.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let err = std::fs::read_to_string(path.with_extension("err")).unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{name}: {e}: {err}"))
}

/// Waits until the interval lines a forwarder in the guest writes (`--json-lines`) to `name`
/// count at least `n` failovers on its first port's bond; panics after [`STEP`].
fn wait_for_failovers(share: &Path, name: &str, n: u64) {
    let deadline = Instant::now() + STEP;
    let failovers = |line: &str| {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        v["counters"]["ports"][0]["bond"]["failovers"].as_u64()
    };
    loop {
        let text = shared_text(share, name);
        if text.lines().filter_map(failovers).any(|f| f >= n) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the forwarder never counted {n} failovers: {}\n{}",
            text.lines().last().unwrap_or(""),
            shared_text(share, &name.replace(".json", ".err"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Boots `guest` with `script`, booting again when its kernel panics before the script starts
/// (rare under TCG, and nothing to do with the test).
fn boot<'a>(guest: &'a mut Guest, script: &str) -> RunningGuest<'a> {
    let script = format!("echo xskit-script-started\n{script}");
    guest
        .spawn_until(&script, "xskit-script-started", STEP)
        .unwrap()
}

/// A `recv --expect` report in which every probe arrived intact.
fn assert_every_probe(r: &serde_json::Value, expected: u64, what: &str) {
    let got = (
        r["valid"].as_u64(),
        r["lost"].as_u64(),
        r["corrupt"].as_u64(),
    );
    assert_eq!(got, (Some(expected), Some(0), Some(0)), "{what}: {r}");
}

fn wait_for(running: &RunningGuest<'_>, marker: &str) {
    wait_for_longer(running, marker, STEP);
}

/// How long one takeover may take in the guest: its successor loads and verifies two
/// filter programs under TCG (about 15 s on an idle host, several times that on a busy one).
const TAKEOVER_STEP: Duration = Duration::from_secs(300);

fn wait_for_longer(running: &RunningGuest<'_>, marker: &str, step: Duration) {
    if !running.wait_for_output(marker, step) {
        let console = running.console();
        let tail: Vec<&str> = console.lines().rev().take(30).collect();
        panic!(
            "the guest's script did not reach {marker:?}; it printed:\n{}\n--- console ---\n{}\n\
             --- what its commands wrote (stderr) ---\n{}",
            running.output(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            xskit_testbed::errors_written(&running.share())
        );
    }
}

/// What a failed ping from `a` to `c` through the guest's first forwarder leaves to read:
/// three more pings with QEMU's writes to the TAPs traced (whether it writes the guest's
/// frames and what the kernel answers), the TAP files QEMU holds, what each NIC's TAP counted
/// and QEMU's view of each queue, that forwarder's last counters, and every forwarder's
/// stderr.
fn guest_side(running: &RunningGuest<'_>, a: &xskit_testbed::Host, c: &str) -> String {
    let share = running.share();
    format!(
        "{}\nthe forwarder's last counters: {}\n{}",
        qemu_side(running, a, c),
        last_line(&shared_text(&share, "killed.json")),
        xskit_testbed::errors_written(&share)
    )
}

/// Three more pings from `a` to `c` with QEMU's writes to the TAPs traced, the TAP files
/// QEMU holds, what each NIC's TAP counted and QEMU's view of each queue: where frames the
/// guest sent went.
fn qemu_side(running: &RunningGuest<'_>, a: &xskit_testbed::Host, c: &str) -> String {
    let share = running.share();
    let trace = QemuTrace::start(&share);
    let again = run(a, "ping", &["-c", "3", "-i", "0.3", "-w", "5", c]);
    let traced = trace.map(QemuTrace::finish);
    format!(
        "three more pings: {}\nQEMU's writes meanwhile: {traced:?}\nQEMU's TAP files:\n{}\n\
         {}\n{}",
        text(&again),
        tun_files(&share),
        running.taps_seen(),
        qemu_view(running),
    )
}

/// The last non-empty line of `text` (a `--json-lines` file's latest counters).
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// The receive variants: every UMEM layout and wakeup style in zero-copy, then auto.
const RECV_VARIANTS: [&str; 8] = [
    "-m zc",
    "-m zc -f 2048",
    "-m zc -u",
    "-m zc -u -f 3000",
    "-m zc -W",
    "-m zc -B",
    "-m zc -p",
    "-m auto",
];
/// The transmit variants.
const GEN_VARIANTS: [&str; 3] = ["-m zc", "-m zc -f 2048 -s 1400", "-m zc -u -f 3000"];
/// Probes per variant.
const PROBES: u64 = 2000;

/// Prints where virtio_net's AF_XDP transmit header is for the device (`XSK-HEADER-DMA`,
/// guest-physical, hex) and where the guest's memory ends (`RAM-END`): the DMA address of a
/// module's static variable, `__pa()` of it (see [`xskit_testbed::GuestKernel::kernel_args`]).
const XSK_HEADER_DMA: &str = r#"echo 0 > /proc/sys/kernel/kptr_restrict
hdr=$(grep -w xsk_hdr /proc/kallsyms | cut -d' ' -f1)
text=$(grep -w _text /proc/kallsyms | cut -d' ' -f1)
base=$(grep 'Kernel code' /proc/iomem | sed 's/^ *//' | cut -d- -f1)
end=$(grep 'System RAM' /proc/iomem | tail -1 | sed 's/^ *//' | cut -d' ' -f1 | cut -d- -f2)
[ -n "$hdr" ] && printf 'XSK-HEADER-DMA %x RAM-END %s\n' $(( 0x${hdr#ffffffff} - 0x${text#ffffffff} + 0x$base )) "$end""#;

/// The header every zero-copy frame is sent behind lies outside the guest's memory, where
/// QEMU reads zeros; inside it, the header is whatever that page holds and the TAP device
/// refuses the frames once it holds something.
fn check_xsk_header_dma(out: &str) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("XSK-HEADER-DMA "))
        .unwrap_or_else(|| {
            panic!("virtio_net has no xsk_hdr: see whether the guest still needs nokaslr\n{out}")
        });
    let hex = |s: &str| u64::from_str_radix(s.trim(), 16).unwrap();
    let (header, end) = line.split_once(" RAM-END ").unwrap();
    eprintln!("virtio_net's transmit header for the device: {header}; guest memory ends at {end}");
    assert!(
        hex(header) > hex(end),
        "virtio_net's transmit header is at {header}, inside the guest's memory (to {end})"
    );
}

/// The guest's side of [`every_socket_path_runs_in_zero_copy_with_every_frame_counted`].
fn socket_paths_script() -> String {
    let recv: Vec<String> = RECV_VARIANTS.iter().map(|v| format!("\"{v}\"")).collect();
    let gen: Vec<String> = GEN_VARIANTS.iter().map(|v| format!("\"{v}\"")).collect();
    format!(
        r#"{WAIT_FOR}
j=/run/xskit-job
ready() {{ until grep -q "$2" "$1" 2>/dev/null; do sleep 0.1; done; }}
ip link set eth0 up
{XSKIT} info -i eth0
{XSK_HEADER_DMA}
k=0
for v in {recv}; do
    {XSKIT} recv -i eth0 $v --expect {PROBES} -d 100 --json > $j/recv-$k.json 2> $j/recv-$k.err &
    ready $j/recv-$k.err recv; echo "RECV $k"; wait; k=$((k + 1))
done
k=0
for v in {gen}; do
    echo "GEN $k"; wait_for go-gen-$k || exit 1
    {XSKIT} gen -i eth0 $v -n {PROBES} -r 5000 --json > $j/gen-$k.json 2> $j/gen-$k.err
    {{ ethtool -S eth0; ip -s -d link show eth0; }} > $j/gen-$k.device 2>&1
    echo "GEN-DONE $k"; k=$((k + 1))
done
{XSKIT} bench rxdrop -i eth0 -m zc -d 8 --json > $j/rxdrop.json 2> $j/rxdrop.err &
ready $j/rxdrop.err rxdrop; echo RXDROP; wait
echo TXPUSH; wait_for go-txpush
{XSKIT} bench txpush -i eth0 -m zc -d 2 --json > $j/txpush.json 2> $j/txpush.err
echo TXPUSH-DONE; wait_for go-l2fwd
{XSKIT} bench l2fwd -i eth0 -m zc -d 8 --json > $j/l2fwd.json 2> $j/l2fwd.err &
ready $j/l2fwd.err l2fwd; echo L2FWD; wait
echo L2FWD-DONE
{XSKIT} recv -i eth0 -m zc -F -d 1 || echo "zc-frags-refused"
{XSKIT} recv -i eth0 -m drv -F -d 1 --json > $j/frags-copy.json && echo "copy-frags-ok"
"#,
        recv = recv.join(" "),
        gen = gen.join(" ")
    )
}

/// Every receive and transmit path of xskit in zero-copy on virtio_net: `recv` in zero-copy
/// with aligned and unaligned chunks of 2 and 4 KiB (and an odd 3000-byte one), need_wakeup
/// off, busy polling and poll(2), and `auto` choosing zero-copy; `gen` in zero-copy with
/// three layouts; `bench rxdrop`, `txpush` and `l2fwd` in zero-copy. The host's xskit counts
/// on the TAP device every probe the guest sends and the guest counts every probe the host
/// sends; the benchmarks are held to the TAP device's counters. Multi-buffer in zero-copy is
/// refused where the device takes one buffer per packet, and works in copy mode.
#[test]
fn every_socket_path_runs_in_zero_copy_with_every_frame_counted() {
    let Some(mut guest) = guest(GuestConfig::zero_copy(1).queues(1)) else {
        return;
    };
    let _one = one_at_a_time();
    let script = socket_paths_script();
    let running = boot(&mut guest, &script);
    let ns = running.ns().clone();
    let n = PROBES.to_string();
    for k in 0..RECV_VARIANTS.len() {
        wait_for(&running, &format!("RECV {k}"));
        let out = host_xskit(&ns, &["gen", "-i", TAP, "-n", &n, "-r", "5000"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // Every variant runs before any is judged: what the later ones saw tells a lost
    // transmission from a lost link.
    let mut missed: Vec<String> = Vec::new();
    for (k, variant) in GEN_VARIANTS.iter().enumerate() {
        // Once a variant missed, the next ones run with QEMU's writes traced.
        let trace = (!missed.is_empty()).then(|| QemuTrace::start(&running.share()));
        let result = host_receives_what_the_guest_sends(&running, k, variant);
        let traced = trace.flatten().map(QemuTrace::finish);
        if let Err(e) = result {
            missed.push(format!("{e}\nQEMU's writes meanwhile: {traced:?}"));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n\n"));
    wait_for(&running, "RXDROP");
    let out = host_xskit(&ns, &["gen", "-i", TAP, "-n", "3000", "-r", "3000"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_for(&running, "TXPUSH");
    let before = tap_rx(&ns);
    running.signal("go-txpush").unwrap();
    wait_for(&running, "TXPUSH-DONE");
    let txpushed = tap_rx(&ns) - before;
    let before = tap_rx(&ns);
    running.signal("go-l2fwd").unwrap();
    wait_for(&running, "L2FWD");
    let out = host_xskit(&ns, &["gen", "-i", TAP, "-n", "3000", "-r", "3000"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_for(&running, "L2FWD-DONE");
    let reflected = tap_rx(&ns) - before;
    check_socket_paths(&running, txpushed, reflected);
    let gen_said = std::fs::read_to_string(running.share().join("gen-0.err")).unwrap_or_default();
    let run = running.wait().unwrap();
    let out = &run.output;
    assert_eq!(run.status, 0, "{out}");
    check_xsk_header_dma(out);
    // The header's wrong address is virtio_net's as a module: info and a zero-copy gen say so.
    assert!(
        out.contains("driver            virtio_net (module)")
            && out.contains("note: virtio_net is a module here"),
        "{out}"
    );
    assert!(
        gen_said.contains("xskit gen: note: virtio_net is a module here"),
        "{gen_said}"
    );
    assert!(
        out.contains("AF_XDP zero-copy  yes") && out.contains("zc max segments   1"),
        "{out}"
    );
    assert!(
        out.contains("takes 1 buffer(s) per packet in zero-copy")
            && out.contains("zc-frags-refused"),
        "multi-buffer in zero-copy is refused, saying why: {out}"
    );
    assert!(
        out.contains("copy-frags-ok"),
        "and works in copy mode: {out}"
    );
}

/// One transmit variant of [`every_socket_path_runs_in_zero_copy_with_every_frame_counted`]:
/// the host's recv is bound before the guest's gen starts, and the guest's gen has finished
/// (its completions are in, so the TAP device has every frame) before the host's report is
/// read. recv ends when every probe has come, or when none has come for a while after the
/// first; frames missing at the TAP device end it at once, with what each side saw.
fn host_receives_what_the_guest_sends(
    running: &RunningGuest<'_>,
    k: usize,
    variant: &str,
) -> Result<(), String> {
    let ns = running.ns();
    wait_for(running, &format!("GEN {k}"));
    let before = tap_rx(ns);
    let recv = KillOnDrop::new(start_host_recv(ns, &running.share(), PROBES));
    running.signal(&format!("go-gen-{k}")).unwrap();
    wait_for(running, &format!("GEN-DONE {k}"));
    let arrived = tap_rx(ns) - before;
    let shared = |ext: &str| {
        std::fs::read_to_string(running.share().join(format!("gen-{k}.{ext}"))).unwrap_or_default()
    };
    if arrived < PROBES {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &recv.id().to_string()])
            .status();
    }
    let link = ns
        .command("ip")
        .args(["-s", "-s", "-d", "link", "show", TAP])
        .output()
        .unwrap();
    let out = recv.take().wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let intact = (
        report["valid"].as_u64(),
        report["lost"].as_u64(),
        report["corrupt"].as_u64(),
    ) == (Some(PROBES), Some(0), Some(0));
    if intact {
        return Ok(());
    }
    Err(format!(
        "{variant}: the host received every probe the guest sent: the TAP device received \
         {arrived} frames; the host's recv: {report} {} {}\nthe TAP device then:\n{}\nthe \
         guest's gen: {} {}\nthe guest's device counters after it:\n{}\nthe guest's \
         script:\n{}\nQEMU's TAP files:\n{}\nQEMU's view:\n{}",
        text(&out),
        std::fs::read_to_string(running.share().join("host-recv.err")).unwrap_or_default(),
        text(&link),
        shared("json"),
        shared("err"),
        shared("device"),
        running.output(),
        tun_files(&running.share()),
        qemu_view(running),
    ))
}

/// What QEMU's monitor says of the guest's network: its clients and their links, and each
/// virtio NIC's status and first transmit queue.
fn qemu_view(running: &RunningGuest<'_>) -> String {
    let ask = |command: &str| {
        running
            .monitor(command)
            .unwrap_or_else(|e| format!("({command}: {e})"))
    };
    let mut out = ask("info network");
    let devices = ask("info virtio");
    let nics = devices
        .lines()
        .filter(|l| l.ends_with("[virtio-net]"))
        .filter_map(|l| l.split_whitespace().next());
    for path in nics {
        out += &ask(&format!("info virtio-status {path}"));
        // Each queue pair's receive and transmit queues (the last is the control queue).
        for queue in 0..4 {
            out += &ask(&format!("info virtio-queue-status {path} {queue}"));
        }
    }
    out
}

/// QEMU's system calls that hand frames to the kernel, traced while a transmit variant
/// runs: whether QEMU writes the guest's frames to the TAP device at all, and what the
/// kernel answers.
struct QemuTrace {
    strace: KillOnDrop,
    file: std::path::PathBuf,
}

impl QemuTrace {
    /// Traces the guest's QEMU (None where strace is missing).
    fn start(share: &Path) -> Option<QemuTrace> {
        let pids = qemu_pids(share);
        let file = share.with_file_name("qemu-writes.trace");
        let strace = std::process::Command::new("strace")
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=write,writev,sendmsg",
                "-e",
                "signal=none",
            ])
            .args(["-o", &file.to_string_lossy()])
            .args(pids.iter().flat_map(|p| ["-p", p]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(QemuTrace {
            strace: KillOnDrop::new(strace),
            file,
        })
    }

    /// How many writes of each kind and result the trace holds, and its first lines.
    fn finish(self) -> String {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.strace.id().to_string()])
            .status();
        let _ = self.strace.take().wait();
        let trace = std::fs::read_to_string(&self.file).unwrap_or_default();
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        for line in trace.lines() {
            let call = line.split_whitespace().nth(1).unwrap_or("");
            let call = call.split(',').next().unwrap_or(call);
            let result = line.rsplit("= ").next().unwrap_or("");
            *kinds.entry(format!("{call} = {result}")).or_default() += 1;
        }
        let head: Vec<&str> = trace.lines().take(12).collect();
        format!("{kinds:?}\n{}", head.join("\n"))
    }
}

/// The guest's QEMU processes (found by its share directory on their command lines).
fn qemu_pids(share: &Path) -> Vec<String> {
    std::process::Command::new("pgrep")
        .args(["-f", &share.to_string_lossy()])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// What the kernel says of every TAP file the guest's QEMU holds (`iff:` names the device it
/// is attached to): a QEMU whose file came loose from the TAP device writes into nothing.
fn tun_files(share: &Path) -> String {
    let mut out = String::new();
    for pid in qemu_pids(share) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let is_tun =
                std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new("/dev/net/tun"));
            if is_tun {
                let name = fd.file_name().to_string_lossy().into_owned();
                let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{name}"))
                    .unwrap_or_default();
                out += &format!("pid {pid} fd {name}: {}\n", info.replace('\n', " "));
            }
        }
    }
    out
}

/// The guest's reports of [`every_socket_path_runs_in_zero_copy_with_every_frame_counted`],
/// against what the host counted.
fn check_socket_paths(running: &RunningGuest<'_>, txpushed: u64, reflected: u64) {
    for (k, variant) in RECV_VARIANTS.iter().enumerate() {
        let r = shared_json(&running.share(), &format!("recv-{k}.json"));
        let what = format!("{variant}: the guest received every probe the host sent");
        assert_every_probe(&r, PROBES, &what);
        assert_eq!(
            r["mode"], "xdp-drv zero-copy",
            "{variant}: zero-copy, auto included: {r}"
        );
    }
    for (k, variant) in GEN_VARIANTS.iter().enumerate() {
        let g = shared_json(&running.share(), &format!("gen-{k}.json"));
        assert_eq!(g["tx_packets"].as_u64(), Some(PROBES), "{variant}: {g}");
        assert_eq!(g["mode"], "tx-only zero-copy", "{variant}: {g}");
    }
    let rxdrop = shared_json(&running.share(), "rxdrop.json");
    assert_eq!(rxdrop["mode"], "xdp-drv zero-copy", "{rxdrop}");
    assert_eq!(rxdrop["rx_packets"].as_u64(), Some(3000), "{rxdrop}");
    let txpush = shared_json(&running.share(), "txpush.json");
    let sent = txpush["tx_packets"].as_u64().unwrap();
    assert!(sent > 1000, "{txpush}");
    assert_eq!(
        txpushed, sent,
        "every frame txpush counts reached the TAP device: {txpush}"
    );
    let l2fwd = shared_json(&running.share(), "l2fwd.json");
    assert_eq!(
        (l2fwd["rx_packets"].as_u64(), l2fwd["tx_packets"].as_u64()),
        (Some(3000), Some(3000)),
        "{l2fwd}"
    );
    assert_eq!(reflected, 3000, "every frame came back to the TAP device");
}

/// Frames of each length in a pcap file (little-endian, as xskit writes it).
fn pcap_lengths(path: &Path) -> std::collections::BTreeMap<u32, u64> {
    let bytes = std::fs::read(path).unwrap();
    let mut counts = std::collections::BTreeMap::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let field = |o: usize| u32::from_le_bytes(bytes[at + o..at + o + 4].try_into().unwrap());
        let (captured, len) = (field(8), field(12));
        *counts.entry(len).or_insert(0) += 1;
        at += 16 + captured as usize;
    }
    counts
}

/// A receiver whose fill ring runs dry under a burst (a ring of 64 frames against the host's
/// generator flat out) loses packets, counted by the kernel as fill-ring-empty, and receives
/// again once it has refilled: the 1,000 probes of another size sent slowly after the burst
/// arrive (all but the few a 32-entry rx ring may lose while the emulator is scheduled out),
/// with need_wakeup on (the default) and off.
#[test]
fn a_fill_ring_that_runs_dry_under_load_refills_without_a_stall() {
    let Some(mut guest) = guest(GuestConfig::zero_copy(1).queues(1)) else {
        return;
    };
    let _one = one_at_a_time();
    let variants = ["", "-W"];
    let script = format!(
        r#"{WAIT_FOR}
j=/run/xskit-job
ip link set eth0 up
k=0
for v in "" "-W"; do
    {XSKIT} recv -i eth0 -m zc $v --ring-size 32 -b 32 --frames 128 -d 100 --json \
        -w $j/dry-$k.pcap > $j/dry-$k.out 2> $j/dry-$k.err &
    pid=$!
    until grep -q recv $j/dry-$k.err; do kill -0 $pid || exit 1; sleep 0.1; done
    echo "DRY $k"; wait_for stop-$k; kill -INT $pid; wait
    mv $j/dry-$k.out $j/dry-$k.json; echo "DRY-DONE $k"; k=$((k + 1))
done
"#
    );
    let running = boot(&mut guest, &script);
    let ns = running.ns().clone();
    for (k, variant) in variants.iter().enumerate() {
        wait_for(&running, &format!("DRY {k}"));
        // More than the guest can take: the TAP device drops what its queue cannot hold, and
        // gen says so with a failing status.
        let handed = tap_handed_on(&ns);
        let burst = host_xskit(&ns, &["gen", "-i", TAP, "-n", "200000", "-s", "60"]);
        assert!(
            text(&burst).contains("sent 200,000 packets"),
            "{}",
            text(&burst)
        );
        // The slow probes come after the burst has left the TAP, not behind it in its queue.
        let drained = xskit_testbed::wait_for(STEP, || {
            (tap_handed_on(&ns) >= handed + 200_000).then_some(())
        });
        assert!(
            drained.is_some(),
            "{variant}: the TAP kept part of the burst"
        );
        let slow = host_xskit(
            &ns,
            &["gen", "-i", TAP, "-n", "1000", "-r", "500", "-s", "200"],
        );
        assert!(slow.status.success(), "{}", text(&slow));
        // Stopped once the receiver's capture (flushed as it runs) holds what the check below
        // asks of the slow probes (or a step passed).
        let pcap = running.share().join(format!("dry-{k}.pcap"));
        xskit_testbed::wait_for(STEP, || {
            let slow = pcap
                .exists()
                .then(|| pcap_lengths(&pcap).get(&200).copied());
            (slow.flatten().unwrap_or(0) >= 950).then_some(())
        });
        running.signal(&format!("stop-{k}")).unwrap();
        wait_for(&running, &format!("DRY-DONE {k}"));
        let r = shared_json(&running.share(), &format!("dry-{k}.json"));
        let empty = r["statistics"]["rx_fill_ring_empty_descs"]
            .as_u64()
            .unwrap();
        assert!(empty > 0, "{variant}: the fill ring ran dry: {r}");
        let lengths = pcap_lengths(&running.share().join(format!("dry-{k}.pcap")));
        // A stalled receiver would take none; a 32-entry rx ring may still drop a few when
        // the emulator is scheduled out for longer than 32 packets take.
        let after = lengths.get(&200).copied().unwrap_or(0);
        assert!(
            after >= 950,
            "{variant}: the probes sent after the burst arrived: {lengths:?} {r}"
        );
        assert!(
            lengths.get(&60).copied().unwrap_or(0) < 200_000,
            "{variant}: the burst overran the receiver: {lengths:?}"
        );
    }
    let run = running.wait().unwrap();
    assert_eq!(run.status, 0, "{}", run.output);
}

/// What the host's TAP has handed on or dropped (its transmit side is the guest's receive):
/// every frame sent into it is one or the other once it has left the TAP's queue.
fn tap_handed_on(ns: &Netns) -> u64 {
    let out = ns
        .command("ip")
        .args(["-j", "-s", "link", "show", "dev", TAP])
        .output()
        .unwrap();
    let link: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tx = &link[0]["stats64"]["tx"];
    tx["packets"].as_u64().unwrap() + tx["dropped"].as_u64().unwrap()
}

/// The guest's side of the forwarding tests: `run_fwd NAME ARGS...` starts `xskit fwd --json`
/// between eth0 and eth1 (report in NAME.json, stderr in NAME.err), prints "FWD NAME" once it
/// forwards, and stops it (SIGINT) when the host signals `stop-NAME`; the device's
/// promiscuity is written down while it runs and after.
const RUN_FWD: &str = r#"j=/run/xskit-job
promiscuity() { ip -d link show $1 | grep -o 'promiscuity [0-9]*'; }
run_fwd() {
    name=$1; shift
    xskit_fwd_args="$*"
    $XSKIT fwd --json "$@" > $j/$name.json 2> $j/$name.err &
    pid=$!
    until grep -q "Ctrl-C stops" $j/$name.err; do
        kill -0 $pid 2>/dev/null || { echo "FWD-FAILED $name"; cat $j/$name.err; return 1; }
        sleep 0.1
    done
    promiscuity eth0 > $j/$name.during
    echo "FWD $name"; wait_for stop-$name; kill -INT $pid; wait $pid; echo "status $?" >> $j/$name.err
    promiscuity eth0 > $j/$name.after
}
"#;

/// The forwarder's report of step `name`, with every frame accounted for.
fn fwd_report(share: &Path, name: &str) -> serde_json::Value {
    let r = shared_json(share, &format!("{name}.json"));
    assert_eq!(r["frames"]["unaccounted"], 0, "{name}: {r}");
    r
}

fn shared_text(share: &Path, name: &str) -> String {
    std::fs::read_to_string(share.join(name)).unwrap_or_default()
}

/// `xskit fwd` as a bump in the wire on virtio_net, between two host namespaces whose kernels
/// (default settings, TCP offloads on) talk through it. With the driver's spare queue pairs
/// (XDP would add receive queues no socket can serve) it refuses, saying how to fix it; with
/// every queue pair in use it forwards, over four queues on one UMEM: without promiscuous
/// mode unicast does not cross (the NIC filters by MAC); with it (the default) ping, iperf3
/// TCP both ways, UDP and an HTTP download checked by SHA-256 cross in zero-copy, with no
/// copy made, and in copy mode; the device's promiscuity is given back at exit.
#[test]
fn kernel_tcp_crosses_fwd_in_zero_copy_on_virtio_net() {
    if !privileged() {
        return;
    }
    let _one = one_at_a_time();
    let mut wire = GuestWire::new(&GuestConfig::zero_copy(2).queues(4), 1).unwrap();
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
{RUN_FWD}
ip link set eth0 up; ip link set eth1 up
$XSKIT fwd -i eth0 -i eth1 -m zc -d 5 > $j/spare.out 2>&1; echo "spare status $?"
$XSKIT bench rxdrop -i eth0 -q 2 -m zc -d 1 > $j/spare-q2.out 2>&1; echo "spare-q2 status $?"
ethtool -L eth0 combined 4; ethtool -L eth1 combined 4
run_fwd nopromisc -i eth0 -i eth1 -m zc --no-promisc
run_fwd zc -i eth0 -i eth1 -m zc --check
run_fwd copy -i eth0 -i eth1 -m drv --check
"#
    );
    let share = wire.guest.share();
    let running = boot(&mut wire.guest, &script);
    wait_for(&running, "FWD nopromisc");
    let ping = run(
        &wire.a,
        "ping",
        &["-c", "3", "-W", "2", &wire.c.ip.to_string()],
    );
    assert!(
        !ping.status.success(),
        "without promiscuous mode the NIC drops unicast for other hosts: {}",
        text(&ping)
    );
    running.signal("stop-nopromisc").unwrap();
    let mut traffic = String::new();
    for step in ["zc", "copy"] {
        wait_for(&running, &format!("FWD {step}"));
        eprintln!("kernel traffic through fwd in {step} mode");
        let crossed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            kernel_traffic_crosses(&wire.a, &wire.c, 3)
        }));
        // Where the frames went, while the forwarder still runs.
        let qemu = crossed
            .is_err()
            .then(|| qemu_side(&running, &wire.a, &wire.c.ip.to_string()));
        running.signal(&format!("stop-{step}")).unwrap();
        match crossed {
            Ok(lines) => traffic += &lines,
            Err(panic) => {
                // What the forwarder saw, once it has stopped and written its report, and
                // what the hosts' interfaces counted.
                let err = format!("{step}.err");
                let deadline = Instant::now() + Duration::from_secs(60);
                while !shared_text(&share, &err).contains("status") && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                eprintln!(
                    "fwd {step} in the guest: {}\n{}",
                    shared_text(&share, &format!("{step}.json")),
                    shared_text(&share, &format!("{step}.err"))
                );
                for host in [&wire.a, &wire.c] {
                    let link = run(host, "ip", &["-s", "-d", "link", "show", &host.ifname]);
                    let neigh = run(host, "ip", &["neigh", "show"]);
                    eprintln!("{}: {}{}", host.ifname, text(&link), text(&neigh));
                }
                eprintln!("{}", qemu.unwrap_or_default());
                std::panic::resume_unwind(panic);
            }
        }
    }
    let run = running.wait().unwrap();
    assert_eq!(run.status, 0, "{}\n{traffic}", run.output);
    eprintln!("{traffic}");
    check_wire_reports(&wire.guest.share());
}

/// The reports of [`kernel_tcp_crosses_fwd_in_zero_copy_on_virtio_net`].
fn check_wire_reports(share: &Path) {
    let spare = shared_text(share, "spare.out");
    assert!(
        spare.contains("eth0 receives on 4 queues")
            && spare.contains("2 of them are its own")
            && spare.contains("ethtool -L eth0 combined 4"),
        "{spare}"
    );
    let spare_q2 = shared_text(share, "spare-q2.out");
    assert!(
        spare_q2.contains("queue 2 of eth0 is one the driver added for XDP"),
        "{spare_q2}"
    );
    let nopromisc = fwd_report(share, "nopromisc");
    assert_eq!(
        nopromisc["promiscuous"],
        serde_json::json!([]),
        "{nopromisc}"
    );
    assert_eq!(
        shared_text(share, "nopromisc.during").trim(),
        "promiscuity 0"
    );
    let ports = &nopromisc["counters"]["ports"];
    assert!(
        ports[1]["tx_packets"].as_u64() > Some(0) && ports[1]["rx_packets"] == 0,
        "broadcast ARP requests crossed, no unicast answer reached fwd: {nopromisc}"
    );
    for (step, zero_copy) in [("zc", true), ("copy", false)] {
        let r = fwd_report(share, step);
        assert_eq!(r["zero_copy"], zero_copy, "{step}: {r}");
        assert_eq!(r["workers"], 4, "{step}: four queues on one UMEM: {r}");
        assert_eq!(r["promiscuous"], serde_json::json!(["eth0", "eth1"]), "{r}");
        for port in r["counters"]["ports"].as_array().unwrap() {
            assert_eq!(port["copies"], 0, "{step}: forwarding copies nothing: {r}");
            assert!(port["tx_packets"].as_u64() > Some(1000), "{step}: {r}");
            // Pings and ARP at least (settled checksums) go rx ring to tx ring.
            assert!(port["tx_direct"].as_u64() > Some(0), "{step}: {r}");
        }
        assert_eq!(
            shared_text(share, &format!("{step}.during")).trim(),
            "promiscuity 1"
        );
        assert_eq!(
            shared_text(share, &format!("{step}.after")).trim(),
            "promiscuity 0"
        );
        assert!(
            shared_text(share, &format!("{step}.err")).contains("status 0"),
            "{step}"
        );
    }
}

/// Probes from host `from` to host `to`'s UDP port `port` (`xskit gen` on `from`'s link).
fn probes(from: &Host, to: &Host, port: u16, extra: &[&str]) {
    let (mac, src, dst) = (mac(to), from.ip.to_string(), to.ip.to_string());
    let port = port.to_string();
    let mut args = vec!["gen", "-i", &from.ifname, "--dst-mac", &mac];
    args.extend_from_slice(&["--src-ip", &src, "--dst-ip", &dst, "--dst-port", &port]);
    args.extend_from_slice(extra);
    ok(&run(from, XSKIT, &args));
}

/// With [`UDP_7_AND_FROM_A_UDP_8`]'s drops, a rate limit (udp 10).
const LIMIT_UDP_10: &str = r#"
[[rule]]
name = "limit-udp-10"
protocol = "udp"
dst_port = 10
action = "rate-limit"
rate = "100pps"
burst = 10
"#;

/// The rules and the rest of the forwarder in zero-copy on virtio_net: drops in the kernel
/// (by destination port and by source), a rate limit's in user space, answers for an address of its own (--respond), a capture
/// that Wireshark reads with each packet's verdict, the frame check after every vector; and
/// --xdp-forward, whose drops stay in the kernel while kernel TCP crosses by descriptor.
#[test]
fn rules_respond_capture_and_xdp_forward_work_in_zero_copy() {
    let Some((_one, mut wire)) = zero_copy_wire() else {
        return;
    };
    let rules = RulesFile::new(&format!("{UDP_7_AND_FROM_A_UDP_8}{LIMIT_UDP_10}"));
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
{RUN_FWD}
ip link set eth0 up; ip link set eth1 up
run_fwd rules -i eth0 -i eth1 -m zc --check --rules {rules} --respond 198.51.100.9 --capture $j/cap.pcapng
run_fwd xdpfwd -i eth0 -i eth1 -m zc --check --rules {rules} --xdp-forward
"#,
        rules = rules.path()
    );
    let running = boot(&mut wire.guest, &script);
    wait_for(&running, "FWD rules");
    let c_recv = KillOnDrop::new(start(&wire.c, &recv_lines(&wire.c.ifname)));
    for (port, n) in [(7, "50"), (8, "30"), (9, "20")] {
        probes(&wire.a, &wire.c, port, &["-n", n, "-r", "1000"]);
    }
    probes(&wire.a, &wire.c, 10, &["-n", "500", "-r", "5000"]);
    let ping = run(
        &wire.a,
        "ping",
        &["-c", "5", "-i", "0.5", "-w", "60", "198.51.100.9"],
    );
    assert!(
        ping.status.success(),
        "fwd answers for its address: {}\n{}",
        text(&ping),
        xskit_testbed::errors_written(&running.share())
    );
    running.signal("stop-rules").unwrap();
    wait_for(&running, "FWD xdpfwd");
    let rules = fwd_report(&running.share(), "rules");
    // recv's program takes every frame at c, the kernel's too: stopped before kernel traffic.
    let at_c = recv_until_valid(c_recv, expected_at_c(&rules, "limit-udp-10"), RECV_LIMIT);
    let traffic = kernel_traffic_crosses(&wire.a, &wire.c, 2);
    probes(&wire.a, &wire.c, 7, &["-n", "40", "-r", "1000"]);
    running.signal("stop-xdpfwd").unwrap();
    let run = running.wait().unwrap();
    assert_eq!(run.status, 0, "{}\n{traffic}", run.output);
    let share = wire.guest.share();
    check_rules_report(&rules, &at_c);
    check_capture(&share.join("cap.pcapng"));
    // Forwarding in XDP from a zero-copy queue would copy each packet into a page virtio_net
    // cannot send: the programs drop by rule, and forward through the sockets, copying nothing.
    let x = fwd_report(&share, "xdpfwd");
    assert_eq!(x["zero_copy"], true, "{x}");
    assert!(
        x["warnings"]
            .to_string()
            .contains("forwarded packets go through the sockets"),
        "{x}"
    );
    for port in x["counters"]["ports"].as_array().unwrap() {
        assert_eq!(port["xdp_forwarded"], 0, "{x}");
        assert_eq!(port["copies"], 0, "{x}");
        assert!(port["tx_packets"].as_u64() > Some(1000), "{x}");
    }
    assert_eq!(x["counters"]["rules"][0]["in_kernel"], 40, "{x}");
}

/// A hundred rules (looked up by their bit vectors), a prefix set from a blocklist file and a
/// limit per source, in zero-copy on virtio_net: the set's drops and the limit's in the
/// kernel, every other probe and the kernel's ping and TCP through to c.
#[test]
fn rule_vectors_sets_and_per_source_limits_work_in_zero_copy() {
    let Some((_one, mut wire)) = zero_copy_wire() else {
        return;
    };
    let list = RulesFile::new(&format!(
        "; in Spamhaus DROP's format\n{}/32 ; SBL1\n203.0.113.0/24 ; SBL2\n",
        wire.a.ip
    ));
    let mut text = format!("[[set]]\nname = \"listed\"\nfile = \"{}\"\n", list.path());
    for i in 0..97 {
        text += &format!(
            "[[rule]]\nname = \"r{i}\"\nprotocol = \"tcp\"\ndst_port = {}\naction = \"drop\"\n",
            20_000 + i
        );
    }
    text += "[[rule]]\nname = \"listed-7\"\nsrc = \"@listed\"\nprotocol = \"udp\"\n\
             dst_port = 7\naction = \"drop\"\n\
             [[rule]]\nname = \"per-source-10\"\nprotocol = \"udp\"\ndst_port = 10\n\
             action = \"rate-limit\"\nrate = \"100pps\"\nburst = 10\nper = \"source\"\n\
             block = \"60s\"\n";
    let rules = RulesFile::new(&text);
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
{RUN_FWD}
ip link set eth0 up; ip link set eth1 up
run_fwd scale -i eth0 -i eth1 -m zc --check --rules {rules}
"#,
        rules = rules.path()
    );
    let running = boot(&mut wire.guest, &script);
    wait_for(&running, "FWD scale");
    // The first crossing, with what the guest's side counted if it never comes.
    let c_ip = wire.c.ip.to_string();
    assert!(
        answers_ping(&wire.a, &c_ip),
        "a never reached c\n{}",
        guest_side(&running, &wire.a, &c_ip)
    );
    // recv's program takes every frame at c, the kernel's too: kernel traffic goes first.
    let traffic = kernel_traffic_crosses(&wire.a, &wire.c, 2);
    let c_recv = KillOnDrop::new(start(&wire.c, &recv_lines(&wire.c.ifname)));
    probes(&wire.a, &wire.c, 7, &["-n", "50", "-r", "1000"]);
    probes(&wire.a, &wire.c, 9, &["-n", "20", "-r", "1000"]);
    probes(&wire.a, &wire.c, 10, &["-n", "500", "-r", "5000"]);
    running.signal("stop-scale").unwrap();
    let run = running.wait().unwrap();
    assert_eq!(run.status, 0, "{}\n{traffic}", run.output);
    let r = fwd_report(&wire.guest.share(), "scale");
    let at_c = recv_until_valid(c_recv, expected_at_c(&r, "per-source-10"), RECV_LIMIT);
    assert_eq!(r["zero_copy"], true, "{r}");
    // The kernel's traffic, both ways, went on by the rule the XDP filter told in front of
    // each packet (the default), not classified again: the metadata survives zero-copy.
    for port in r["counters"]["ports"].as_array().unwrap() {
        assert!(port["rx_told"].as_u64() > Some(0), "{r}");
    }
    let listed = rule(&r, "listed-7");
    assert_eq!(
        (listed["packets"].as_u64(), listed["in_kernel"].as_u64()),
        (Some(50), Some(50)),
        "the set's source was dropped in the kernel: {r}"
    );
    let limited = rule(&r, "per-source-10");
    let dropped = limited["over_rate"].as_u64().unwrap() + limited["blocked"].as_u64().unwrap();
    assert!(
        dropped > 100 && dropped < 500 && limited["sources_blocked"] == 1,
        "the source went over its rate and was blocked: {r}"
    );
    assert_eq!(
        at_c["valid"].as_u64(),
        Some(20 + 500 - dropped),
        "c received the default's 20 and what the limit let by: {at_c} {r}"
    );
    assert_eq!(at_c["corrupt"], 0, "{at_c}");
}

/// c's `recv`, its counts streamed every tenth of a second for [`recv_until_valid`].
fn recv_lines(ifname: &str) -> [&str; 6] {
    ["recv", "-i", ifname, "--json-lines", "-I", "0.1"]
}

/// Long enough for the last probes to cross an emulated guest on a loaded machine.
const RECV_LIMIT: Duration = Duration::from_secs(60);

/// The probes c should count: the default's 20 to port 9, and the 500 to port 10 less what
/// the limiting rule dropped.
fn expected_at_c(r: &serde_json::Value, limiting: &str) -> u64 {
    let limited = rule(r, limiting);
    let dropped = limited["over_rate"].as_u64().unwrap() + limited["blocked"].as_u64().unwrap_or(0);
    20 + 500 - dropped
}

/// The forwarder's counts against what reached c.
fn check_rules_report(r: &serde_json::Value, at_c: &serde_json::Value) {
    assert_eq!(r["zero_copy"], true, "{r}");
    let rule = |i: usize| &r["counters"]["rules"][i];
    assert_eq!(
        (rule(0)["packets"].as_u64(), rule(0)["in_kernel"].as_u64()),
        (Some(50), Some(50)),
        "{r}"
    );
    assert_eq!(
        (rule(1)["packets"].as_u64(), rule(1)["in_kernel"].as_u64()),
        (Some(30), Some(30)),
        "a source prefix is matched in the kernel: {r}"
    );
    let over = rule(2)["over_rate"].as_u64().unwrap();
    assert!(over > 100 && over < 500, "the rate limit dropped some: {r}");
    assert!(r["counters"]["echo_replies"].as_u64() >= Some(3), "{r}");
    assert!(r["counters"]["arp_replies"].as_u64() >= Some(1), "{r}");
    assert_eq!(
        at_c["valid"].as_u64(),
        Some(20 + 500 - over),
        "c received the default's 20 and what the limit let by: {at_c} {r}"
    );
    assert_eq!(at_c["corrupt"], 0, "{at_c}");
}

/// The capture, read by Wireshark's tools: each packet's verdict and rule.
fn check_capture(path: &Path) {
    let path = path.to_str().unwrap();
    let info = wireshark("capinfos", &[path]);
    assert!(info.contains("Number of interfaces in file: 2"), "{info}");
    let count = |filter: &str| {
        wireshark("tshark", &["-r", path, "-Y", filter])
            .lines()
            .count()
    };
    assert_eq!(
        count(r#"udp.dstport == 7 && frame.comment contains "dropped in XDP: rule udp-7 (drop)""#),
        50
    );
    assert_eq!(
        count(r#"udp.dstport == 8 && frame.comment contains "rule from-a-udp-8 (drop)""#),
        30
    );
    assert_eq!(
        count(r#"udp.dstport == 9 && frame.comment contains "the default (forward)""#),
        20
    );
}

/// A bond of two virtio NICs as one side of `xskit fwd` in zero-copy (one UMEM over all three
/// NICs), plugged into side a's switch: in active-backup c reaches a through the primary,
/// through the backup once the primary is down, and through the primary again once it is
/// back (each failover waited for in the forwarder's counters), and balance-xor (in the default mode, auto, which chooses
/// zero-copy and says so) carries kernel TCP, UDP and an HTTP download over both members.
#[test]
fn bonds_of_virtio_nics_forward_and_fail_over_in_zero_copy() {
    if !privileged() {
        return;
    }
    let _one = one_at_a_time();
    let mut wire = GuestWire::new(&GuestConfig::zero_copy(3), 2).unwrap();
    let bond = "--bond bond0=eth0,eth1 -i bond0 -i eth2 --check";
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
{RUN_FWD}
for i in 0 1 2; do ip link set eth$i up; done
(wait_for down; ip link set eth0 down; echo DOWN; wait_for up; ip link set eth0 up; echo UP) &
run_fwd ab {bond} -m zc --bond-mode active-backup --primary eth0 --json-lines -I 0.1
wait
run_fwd xor {bond} --bond-mode balance-xor --xmit-hash layer3+4
"#
    );
    let running = boot(&mut wire.guest, &script);
    let share = running.share();
    wait_for(&running, "FWD ab");
    let a_ip = wire.a.ip.to_string();
    let reaches = |through: &str| {
        assert!(answers_ping(&wire.c, &a_ip), "c never reached a {through}");
    };
    reaches("through the primary, eth0");
    running.signal("down").unwrap();
    wait_for(&running, "DOWN");
    wait_for_failovers(&share, "ab.json", 1);
    reaches("through eth1 once eth0 was down");
    running.signal("up").unwrap();
    wait_for(&running, "UP");
    wait_for_failovers(&share, "ab.json", 2);
    reaches("through eth0 again once it was back");
    running.signal("stop-ab").unwrap();
    wait_for(&running, "FWD xor");
    let (a, c) = (wire.a.clone(), wire.c.clone());
    let crossed = std::panic::catch_unwind(move || kernel_traffic_crosses(&a, &c, 2));
    running.signal("stop-xor").unwrap();
    let run = running.wait().unwrap();
    let traffic = crossed.unwrap_or_else(|e| {
        // What the forwarder saw tells a broken path from a slow one.
        let share = wire.guest.share();
        panic!(
            "{}\nxor's report: {}\nxor's stderr: {}\nthe guest: {}",
            e.downcast_ref::<String>()
                .map_or("kernel traffic failed", |s| s.as_str()),
            shared_text(&share, "xor.json"),
            shared_text(&share, "xor.err"),
            run.output
        )
    });
    assert_eq!(run.status, 0, "{}\n{traffic}", run.output);
    let ab = fwd_report(&share, "ab");
    let b = &ab["counters"]["ports"][0]["bond"];
    assert!(b["failovers"].as_u64() >= Some(2), "away and back: {ab}");
    assert_eq!(ab["zero_copy"], true, "{ab}");
    for m in b["members"].as_array().unwrap() {
        assert!(
            m["tx_packets"].as_u64() > Some(0),
            "both carried traffic: {ab}"
        );
    }
    // The default mode, auto, chooses zero-copy where every NIC offers it.
    let xor = fwd_report(&share, "xor");
    assert_eq!(xor["zero_copy"], true, "{xor}");
    assert!(
        shared_text(&share, "xor.err").contains("zero-copy)"),
        "and says so"
    );
    let members = &xor["counters"]["ports"][0]["bond"]["members"];
    assert!(
        members[0]["tx_packets"].as_u64() > Some(0) && members[1]["tx_packets"].as_u64() > Some(0),
        "flows spread over both members: {xor}"
    );
    for port in xor["counters"]["ports"].as_array().unwrap() {
        assert_eq!(port["copies"], 0, "{xor}");
    }
}

/// What goes wrong under a zero-copy forwarder on virtio_net: a change of queue count is
/// refused by the kernel while the sockets hold the queues, and forwarding goes on; a
/// forwarder killed with SIGKILL leaves no program and no promiscuity behind, and the next
/// one in the same boot forwards; a link that goes down and comes back is reported both
/// times, forwarding resumes, and every frame is accounted for at the end.
#[test]
fn a_zero_copy_forwarder_survives_queue_changes_link_loss_and_sigkill() {
    let Some((_one, mut wire)) = zero_copy_wire() else {
        return;
    };
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
{RUN_FWD}
ip link set eth0 up; ip link set eth1 up
$XSKIT fwd -i eth0 -i eth1 -m zc --json-lines -I 0.5 > $j/killed.json 2> $j/killed.err &
pid=$!
until grep -q "Ctrl-C stops" $j/killed.err; do sleep 0.1; done
echo "FWD killed"; wait_for queues
ethtool -L eth0 combined 1 > $j/ethtool.out 2>&1; echo "ethtool status $?" >> $j/ethtool.out
echo QUEUES-TRIED; wait_for kill
kill -9 $pid; wait $pid
promiscuity eth0 > $j/killed.after; bpftool net > $j/killed.net
noticed() {{ until grep -q "$1" $j/second.err; do sleep 0.1; done; }}
(wait_for down; ip link set eth1 down; noticed "eth1 is down"; ip link set eth1 up
 noticed "eth1 is up again"; echo UP-AGAIN) &
run_fwd second -i eth0 -i eth1 -m zc --check
wait
"#
    );
    let running = boot(&mut wire.guest, &script);
    let ping = |count: &str| {
        let out = run(
            &wire.a,
            "ping",
            // A deadline, not a reply timeout: ping then waits for `count` replies, however
            // long a's first ARP exchange through the emulated guest takes.
            &["-c", count, "-i", "0.3", "-w", "60", &wire.c.ip.to_string()],
        );
        assert!(
            out.status.success(),
            "{}\n{}",
            text(&out),
            guest_side(&running, &wire.a, &wire.c.ip.to_string())
        );
    };
    wait_for(&running, "FWD killed");
    ping("3");
    running.signal("queues").unwrap();
    wait_for(&running, "QUEUES-TRIED");
    ping("3");
    running.signal("kill").unwrap();
    wait_for(&running, "FWD second");
    ping("3");
    running.signal("down").unwrap();
    wait_for(&running, "UP-AGAIN");
    ping("5");
    running.signal("stop-second").unwrap();
    let run = running.wait().unwrap();
    assert_eq!(run.status, 0, "{}", run.output);
    let share = wire.guest.share();
    let ethtool = shared_text(&share, "ethtool.out");
    assert!(
        ethtool.contains("in use by AF_XDP") && ethtool.contains("ethtool status 1"),
        "{ethtool}"
    );
    assert_eq!(shared_text(&share, "killed.after").trim(), "promiscuity 0");
    assert!(
        !shared_text(&share, "killed.net").contains("driver id"),
        "no program left behind: {}",
        shared_text(&share, "killed.net")
    );
    let second = fwd_report(&share, "second");
    let eth1 = &second["counters"]["ports"][1];
    assert_eq!(eth1["link_changes"], 2, "{second}");
    assert_eq!(eth1["link_up"], true, "{second}");
    let err = shared_text(&share, "second.err");
    assert!(
        err.contains("eth1 is down")
            && err.contains("eth1 is up again")
            && err.contains("status 0"),
        "{err}"
    );
}

/// The guest in the wire with one zero-copy NIC on each side, and the turn to boot it (None
/// without root: the test is skipped). Its scripts take one to two minutes on an idle host
/// and several times that on a busy one, where the emulator gets a fraction of a core: the
/// guest is killed at 15 minutes, a limit for a hung guest only (each step has its own).
fn zero_copy_wire() -> Option<(std::sync::MutexGuard<'static, ()>, GuestWire)> {
    if !privileged() {
        return None;
    }
    let one = one_at_a_time();
    let config = GuestConfig::zero_copy(2).timeout(Duration::from_secs(900));
    Some((one, GuestWire::new(&config, 1).unwrap()))
}

/// Packets `host`'s interface received.
fn rx_packets(host: &Host) -> u64 {
    let file = format!("/sys/class/net/{}/statistics/rx_packets", host.ifname);
    let out = host.ns.command("cat").arg(file).output().unwrap();
    text(&out).trim().parse().unwrap_or(0)
}

/// Takeovers in zero-copy on virtio_net, as an upgrade on a VM makes them: three forwarders
/// in a row take over from the one before under a stream of probes from a to c, each given
/// the zero-copy sockets (and their UMEM, a memfd the NICs' DMA reaches) by its predecessor,
/// which exits naming it; every probe arrives once and in order, and the last forwarder
/// accounts for every frame.
#[test]
fn zero_copy_forwarders_take_over_under_a_stream_losing_no_probe() {
    let Some((_one, mut wire)) = zero_copy_wire() else {
        return;
    };
    let script = format!(
        r#"{WAIT_FOR}
XSKIT={XSKIT}
j=/run/xskit-job
says() {{ until grep -q "$2" $j/$1 2>/dev/null; do sleep 0.1; done; }}
ip link set eth0 up; ip link set eth1 up
$XSKIT fwd -i eth0 -i eth1 -m zc --json > $j/fwd-0.json 2> $j/fwd-0.err &
says fwd-0.err "Ctrl-C stops"
echo "FWD-UP at $(cut -d' ' -f1 /proc/uptime) s"; wait_for go || exit 1
for k in 1 2 3; do
    $XSKIT fwd -i eth0 -i eth1 -m zc --takeover --json > $j/fwd-$k.json 2> $j/fwd-$k.err &
    says fwd-$((k - 1)).json handed_to
    echo "TAKEOVER $k at $(cut -d' ' -f1 /proc/uptime) s"
done
wait_for stop || exit 1
kill -INT $!; wait $!; echo "LAST STATUS $?"
"#
    );
    let share = wire.guest.share();
    let running = boot(&mut wire.guest, &script);
    wait_for(&running, "FWD-UP");
    // Rings deep enough for seconds of the stream: a receiver starved of the CPU on a loaded
    // host must not drop what the forwarders delivered.
    let mut recv_args = recv_lines(&wire.c.ifname).to_vec();
    recv_args.extend(["--ring-size", "4096", "--frames", "16384"]);
    let receiver = Receiving::start(
        KillOnDrop::new(start(&wire.c, &recv_args)),
        Duration::from_secs(1200),
    );
    let sender = stream_probes(&wire.a, &wire.c, 9, 200);
    let deadline = Instant::now() + STEP;
    while rx_packets(&wire.c) < 100 {
        assert!(
            Instant::now() < deadline,
            "no probe crossed the first forwarder"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    running.signal("go").unwrap();
    for k in 1..=3 {
        wait_for_longer(&running, &format!("TAKEOVER {k} "), TAKEOVER_STEP);
    }
    let sent = signal(sender, "-INT")["tx_packets"].as_u64().unwrap();
    let r = receiver.until_valid(sent);
    running.signal("stop").unwrap();
    wait_for(&running, "LAST STATUS");
    let run = running.wait().unwrap();
    assert!(run.output.contains("LAST STATUS 0"), "{}", run.output);
    let said = shared_text(&share, "fwd-0.err");
    assert!(
        said.contains("xskit fwd: note: eth0: virtio_net is a module here"),
        "{said}"
    );
    for k in 0..3 {
        let handed = shared_json(&share, &format!("fwd-{k}.json"));
        assert!(handed["handed_to"].as_u64().is_some(), "{k}: {handed}");
        assert_eq!(handed["zero_copy"], true, "{handed}");
    }
    let last = fwd_report(&share, "fwd-3");
    assert_eq!(last["zero_copy"], true, "{last}");
    assert_eq!(
        (r["valid"].as_u64(), &r["lost"], &r["out_of_order"]),
        (Some(sent), &0.into(), &0.into()),
        "every probe crossed three takeovers in zero-copy: {r}"
    );
    eprintln!(
        "three takeovers in zero-copy: {sent} probes, none lost; the longest a probe waited \
         {:.0} ms",
        r["latency_max_us"].as_f64().unwrap_or(0.0) / 1000.0
    );
}
