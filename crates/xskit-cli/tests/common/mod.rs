//! Shared helpers for the CLI tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};

use xskit_testbed::{Chain, Host};

pub use xskit_testbed::privileged_or_skip as privileged;

pub const XSKIT: &str = env!("CARGO_BIN_EXE_xskit");

/// Runs `program` with `args` in `host`'s namespace.
pub fn run(host: &Host, program: &str, args: &[&str]) -> Output {
    host.ns.command(program).args(args).output().unwrap()
}

/// The output of a command that must have succeeded (stdout and stderr, to show otherwise).
pub fn ok(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

/// `xskit ARGS` in `host`'s namespace, its stdout and stderr piped.
fn spawn_piped(host: &Host, args: &[&str]) -> Child {
    host.ns
        .command(XSKIT)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts `xskit ARGS` in `host`'s namespace and waits for its header line on stderr (printed
/// once its port is open, or its error).
pub fn start(host: &Host, args: &[&str]) -> Child {
    let mut child = spawn_piped(host, args);
    let mut header = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut header)
        .unwrap();
    assert!(
        !header.starts_with("xskit:") && !header.is_empty(),
        "{args:?}: {header}"
    );
    child
}

/// `xskit ARGS` started in `host`'s namespace with its header line come (its ports are open),
/// the rest of its output kept for [`Logged::finish`].
pub struct Logged {
    child: KillOnDrop,
    stderr: std::thread::JoinHandle<String>,
}

pub fn start_logged(host: &Host, args: &[&str]) -> Logged {
    let mut child = spawn_piped(host, args);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (header_tx, header_rx) = std::sync::mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_line(&mut text);
        let _ = header_tx.send(text.clone());
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let child = KillOnDrop::new(child);
    let header = header_rx.recv().unwrap_or_default();
    assert!(
        !header.starts_with("xskit:") && !header.is_empty(),
        "{args:?}: {header}"
    );
    Logged { child, stderr }
}

impl Logged {
    /// Waits for the command to end; its stdout and stderr, once it has succeeded.
    pub fn finish(self) -> String {
        let out = self.child.take().wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            self.stderr.join().unwrap()
        );
        assert!(out.status.success(), "{text}");
        text
    }

    /// Waits for the command to end by itself, killing it at `limit`; its exit code (None
    /// when killed) and its stderr.
    pub fn ended_within(self, limit: std::time::Duration) -> (Option<i32>, String) {
        let mut child = self.child.take();
        let deadline = std::time::Instant::now() + limit;
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        (status.code(), self.stderr.join().unwrap())
    }
}

/// Waits until a TCP server in `host`'s namespace listens on `port` (an iperf3 server just
/// started): a client started before would be refused.
pub fn wait_listening(host: &Host, port: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = host
            .ns
            .command("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .unwrap();
        if !out.stdout.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on port {port} in {}",
            host.ns.name()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits for a child and parses the one JSON object it printed.
pub fn json_of(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

pub fn mac(h: &Host) -> String {
    h.mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A child that is killed if the test fails before it is collected, so no process outlives
/// the test (and keeps its namespace alive).
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> Self {
        KillOnDrop(Some(child))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child, no longer guarded.
    pub fn take(mut self) -> Child {
        self.0.take().expect("taken once")
    }

    /// The child's piped stdout, to read while it runs.
    pub fn stdout(&mut self) -> std::process::ChildStdout {
        self.0
            .as_mut()
            .and_then(|c| c.stdout.take())
            .expect("a piped stdout, taken once")
    }
}

/// Stops a `recv` started with `--json-lines` once an interval line counts `valid` probes, or
/// once `limit` has passed (the caller's check then fails with the counts), and returns its
/// summary. The condition is the count itself: frames still on their way are waited for, and
/// no fixed pause guesses how long they take.
pub fn recv_until_valid(
    recv: KillOnDrop,
    valid: u64,
    limit: std::time::Duration,
) -> serde_json::Value {
    interrupt_when(recv, limit, |line| {
        line["counters"]["ports"][0]["valid"].as_u64().unwrap_or(0) >= valid
    })
}

/// A `recv` started with `--json-lines` whose lines are read as they come (a pipe left
/// unread would stop it, and its ring would overflow), until [`Receiving::until_valid`] says
/// how many probes to wait for.
pub struct Receiving {
    valid: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<serde_json::Value>>,
    /// recv's process, killed when this is dropped unfinished (a failed test's panic).
    pid: u32,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .status();
        }
    }
}

impl Receiving {
    /// Starts reading `recv`'s lines; it is stopped at `limit` at the latest.
    pub fn start(recv: KillOnDrop, limit: std::time::Duration) -> Receiving {
        use std::sync::atomic::{AtomicU64, Ordering};
        let valid = std::sync::Arc::new(AtomicU64::new(u64::MAX));
        let wanted = std::sync::Arc::clone(&valid);
        let pid = recv.id();
        let thread = std::thread::spawn(move || {
            interrupt_when(recv, limit, move |line| {
                let got = line["counters"]["ports"][0]["valid"].as_u64().unwrap_or(0);
                got >= wanted.load(Ordering::Relaxed)
            })
        });
        Receiving {
            valid,
            thread: Some(thread),
            pid,
        }
    }

    /// Stops `recv` once it has counted `valid` probes (or at its limit) and returns its
    /// summary.
    pub fn until_valid(mut self, valid: u64) -> serde_json::Value {
        self.valid
            .store(valid, std::sync::atomic::Ordering::Relaxed);
        let thread = self.thread.take().expect("joined once");
        thread.join().expect("the receiving thread")
    }
}

/// Sends SIGINT to a command started with `--json-lines` once `done` holds for one of its
/// interval lines, or once `limit` has passed (the caller's check then fails with the counts),
/// and returns its summary.
pub fn interrupt_when(
    child: KillOnDrop,
    limit: std::time::Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut lines = lines_until(child, limit, done);
    lines.pop().expect("a summary")
}

/// As [`interrupt_when`], but every line the command printed, the summary last.
pub fn lines_until(
    mut child: KillOnDrop,
    limit: std::time::Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let start = std::time::Instant::now();
    let mut stopping = false;
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout()).lines() {
        let line = line.unwrap();
        let object: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let interval = object["interval"] == true;
        if !stopping && interval && (done(&object) || start.elapsed() >= limit) {
            let status = std::process::Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            stopping = true;
        }
        lines.push(object);
        if !interval {
            assert!(child.take().wait().unwrap().success(), "{lines:?}");
            return lines;
        }
    }
    panic!("the command ended without its summary: {lines:?}");
}

/// A command started with `--json-lines`, its lines read as they come, so that a test can
/// wait for what its counters say (a failover, a count reached) and then go on with it running.
pub struct Live {
    child: KillOnDrop,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    last: serde_json::Value,
}

impl Live {
    pub fn new(mut child: KillOnDrop) -> Live {
        let stdout = child.stdout();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let object = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                if tx.send(object).is_err() {
                    break;
                }
            }
        });
        Live {
            child,
            lines,
            last: serde_json::Value::Null,
        }
    }

    /// Waits for an interval line for which `done` holds, for at most `limit`; the last line
    /// seen either way (for the caller's message when it did not come).
    pub fn wait(
        &mut self,
        limit: std::time::Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<&serde_json::Value> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line["interval"] == true && done(&line);
                    self.last = line;
                    if hit {
                        return Some(&self.last);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// The command's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The last line seen.
    pub fn last(&self) -> &serde_json::Value {
        &self.last
    }

    /// The summary of a command that ends by itself (a forwarder that handed over), and
    /// its success.
    pub fn ended(self) -> serde_json::Value {
        let summary = self
            .lines
            .iter()
            .find(|line| line["interval"] != true)
            .expect("the command ended without its summary");
        assert!(self.child.take().wait().unwrap().success(), "{summary}");
        summary
    }

    /// SIGINT, then the summary (the line after the interval lines).
    pub fn stop(self) -> serde_json::Value {
        let status = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.ended()
    }
}

/// Starts `xskit fwd --json-lines -I 0.1` between a chain's two middle interfaces, with
/// `extra` options, for [`interrupt_when`].
pub fn start_fwd_lines(chain: &Chain, extra: &[&str]) -> KillOnDrop {
    start_fwd_printing(chain, &["--json-lines", "-I", "0.1"], extra)
}

/// Starts `xskit fwd` between a chain's two middle interfaces, printing as the `output`
/// options say, with `extra` options.
pub fn start_fwd_printing(chain: &Chain, output: &[&str], extra: &[&str]) -> KillOnDrop {
    let mut args = vec!["fwd", "-i", &chain.m_a.ifname, "-i", &chain.m_c.ifname];
    args.extend_from_slice(output);
    args.extend_from_slice(extra);
    KillOnDrop::new(start(&chain.m_a, &args))
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Deletes `host`'s interface (and its veth peer) under whatever runs on it.
pub fn delete_link(host: &Host) {
    let st = host
        .ns
        .command("ip")
        .args(["link", "del", &host.ifname])
        .status()
        .unwrap();
    assert!(st.success(), "deleting {}", host.ifname);
}

/// A stream of probes from `from` to `to`'s UDP port `port` at `rate` a second, until
/// stopped (SIGINT: its summary says how many it sent).
pub fn stream_probes(from: &Host, to: &Host, port: u16, rate: u64) -> KillOnDrop {
    let (mac, src, dst) = (mac(to), from.ip.to_string(), to.ip.to_string());
    let (port, rate) = (port.to_string(), rate.to_string());
    let mut args = vec!["gen", "-i", &from.ifname, "--dst-mac", &mac, "--json"];
    args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", &port]);
    args.extend(["-n", "100000000", "-r", &rate]);
    KillOnDrop::new(start(from, &args))
}

/// Starts `xskit recv --json` on `host`'s interface, with `extra` options.
pub fn recv(host: &Host, extra: &[&str]) -> KillOnDrop {
    let mut args = vec!["recv", "-i", &host.ifname, "--json"];
    args.extend_from_slice(extra);
    KillOnDrop::new(start(host, &args))
}

/// Starts `xskit fwd --json` between a chain's two middle interfaces, with `extra` options.
pub fn start_fwd(chain: &Chain, extra: &[&str]) -> KillOnDrop {
    start_fwd_printing(chain, &["--json"], extra)
}

/// Sends a signal (`-INT`, `-TERM`) to a command started with `--json`, then reads its
/// summary.
pub fn signal(child: KillOnDrop, sig: &str) -> serde_json::Value {
    let status = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    json_of(child.take())
}

/// SIGINT to a forwarder, then its summary, with every frame accounted for.
pub fn stop_fwd(fwd: KillOnDrop) -> serde_json::Value {
    let report = signal(fwd, "-INT");
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    report
}

/// SIGINT to a forwarder started with `--json-lines`, then its summary, with every frame
/// accounted for.
pub fn stop_live_fwd(fwd: Live) -> serde_json::Value {
    let report = fwd.stop();
    assert_eq!(report["frames"]["unaccounted"], 0, "{report}");
    report
}

/// Turns GRO on at a's and c's interfaces: frames XDP redirects into a veth reach the far
/// end only through GRO or an XDP program there.
pub fn far_ends_take_xdp_frames(chain: &Chain) {
    for h in [&chain.a, &chain.c] {
        let st =
            h.ns.command("ethtool")
                .args(["-K", &h.ifname, "gro", "on"])
                .status()
                .unwrap();
        assert!(st.success());
    }
}

/// A rules file in the temporary directory, removed on drop.
pub struct RulesFile(std::path::PathBuf);

impl RulesFile {
    pub fn new(text: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "xskit-rules-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&p, text).unwrap();
        RulesFile(p)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for RulesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One at a time: tests that take this run alone among those that take it (guests under TCG
/// each keep both of the host's cores busy; two at once starve each other's emulated time).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two drop rules: one the kernel matches exactly (udp 7), one it cannot (a source prefix, so
/// user space decides).
pub const UDP_7_AND_FROM_A_UDP_8: &str = r#"
[[rule]]
name = "udp-7"
protocol = "udp"
dst_port = 7
action = "drop"

[[rule]]
name = "from-a-udp-8"
src = "198.51.100.1/32"
protocol = "udp"
dst_port = 8
action = "drop"
"#;

/// `tshark`/`capinfos` (Wireshark, nobody here wrote it) on a capture.
pub fn wireshark(tool: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} (scripts/setup.sh installs tshark): {e}"));
    assert!(out.status.success(), "{tool} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `iperf3 -J` from `client` to an iperf3 server in `server` (started and stopped here), with
/// `extra` client options; its JSON. The client runs under `timeout` (an iperf3 client whose
/// server died has been seen spinning for ever), and a run iperf3 itself failed in is tried
/// once more, on a fresh server and port, with both outputs in the panic if that fails too.
pub fn iperf3(client: &Host, server: &Host, extra: &[&str]) -> serde_json::Value {
    use std::sync::atomic::{AtomicU16, Ordering};
    static PORT: AtomicU16 = AtomicU16::new(5210);
    let mut failures = Vec::new();
    for _ in 0..2 {
        let port = PORT.fetch_add(1, Ordering::Relaxed).to_string();
        let _server = KillOnDrop::new(
            server
                .ns
                .command("iperf3")
                .args(["-s", "-1", "-p", &port])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("iperf3 (scripts/setup.sh installs it)"),
        );
        wait_listening(server, &port);
        let ip = server.ip.to_string();
        let out = client
            .ns
            .command("timeout")
            .args(["-s", "KILL", "120", "iperf3", "-c", &ip, "-p", &port, "-J"])
            .args(["--connect-timeout", "5000"])
            .args(extra)
            .output()
            .unwrap();
        match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            Ok(j) if out.status.success() && j.get("error").is_none() => return j,
            Ok(j) => failures.push(j.to_string()),
            Err(e) => failures.push(format!(
                "{e} ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            )),
        }
    }
    panic!("iperf3 {extra:?} failed twice: {failures:#?}");
}

/// Whether `from` has an answer to a ping of `ip`, waited for up to a minute and a half: a
/// path through an emulated guest answers however slowly it starts (neighbours resolved, a
/// bond's member taken over), and a path that never answers is a failure.
pub fn answers_ping(from: &Host, ip: &str) -> bool {
    (0..30).any(|_| {
        run(from, "ping", &["-c", "1", "-W", "3", ip])
            .status
            .success()
    })
}

/// Kernel traffic between two hosts with their default settings, through whatever joins
/// them: ping, iperf3 TCP both ways, iperf3 UDP, and an HTTP download (Python's server,
/// curl) checked by SHA-256. Panics naming what did not cross; returns a line per check.
pub fn kernel_traffic_crosses(a: &Host, c: &Host, tcp_seconds: u32) -> String {
    let mut said = String::new();
    // The hosts' neighbour tables run in real time, the path between them may not (an
    // emulated guest, slower still on a loaded host): the first exchange resolves a's ARP
    // entry for c, however long it takes, within a minute and a half.
    let ip = c.ip.to_string();
    assert!(answers_ping(a, &ip), "a never reached c");
    let ping = run(
        a,
        "ping",
        &["-c", "5", "-i", "0.3", "-W", "3", &c.ip.to_string()],
    );
    assert!(
        String::from_utf8_lossy(&ping.stdout).contains(" 0% packet loss"),
        "ping: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    said.push_str("ping: 5 of 5\n");
    let t = tcp_seconds.to_string();
    for reverse in [false, true] {
        let mut args = vec!["-t", t.as_str()];
        if reverse {
            args.push("-R");
        }
        let j = iperf3(a, c, &args);
        let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(
            bytes > 100_000,
            "iperf3 TCP {args:?} moved {bytes} bytes: {j}"
        );
        said.push_str(&format!(
            "iperf3 TCP{}: {bytes} bytes\n",
            if reverse { " -R" } else { "" }
        ));
    }
    let j = iperf3(a, c, &["-u", "-b", "2M", "-t", "2"]);
    let sum = &j["end"]["sum"];
    let (packets, lost) = (
        sum["packets"].as_u64().unwrap_or(0),
        sum["lost_packets"].as_u64().unwrap_or(u64::MAX),
    );
    assert!(
        packets > 100 && lost * 100 <= packets,
        "iperf3 UDP lost {lost} of {packets}: {j}"
    );
    said.push_str(&format!("iperf3 UDP: {lost} of {packets} lost\n"));
    said.push_str(&http_download(a, c));
    said
}

/// `c` serves 2 MiB of random bytes over HTTP (Python's http.server); `a` downloads them with
/// curl; both SHA-256 sums must agree.
pub fn http_download(a: &Host, c: &Host) -> String {
    let dir =
        std::env::temp_dir().join(format!("xskit-http-{}-{}", std::process::id(), c.ns.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let blob: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("blob"), &blob).unwrap();
    let _server = KillOnDrop::new(
        c.ns.command("python3")
            .args(["-m", "http.server", "8080", "--bind", &c.ip.to_string()])
            .arg("--directory")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(c, "8080");
    let url = format!("http://{}:8080/blob", c.ip);
    let got = dir.join("got");
    let out = run(
        a,
        "curl",
        &[
            "-sS",
            "--max-time",
            "120",
            "-o",
            got.to_str().unwrap(),
            &url,
        ],
    );
    assert!(
        out.status.success(),
        "curl could not download {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sum = |p: &std::path::Path| {
        let o = std::process::Command::new("sha256sum")
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let (want, have) = (sum(&dir.join("blob")), sum(&got));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(have, want, "the download's SHA-256");
    format!("http: 2 MiB, sha256 {have}\n")
}

/// Rule `name`'s counts in a forwarder's summary.
pub fn rule<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["counters"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no rule {name}: {report}"))
}

/// A runtime directory of the test's own (`$XSKIT_RUN_DIR`), removed when dropped.
pub struct RunDir(pub std::path::PathBuf);

impl RunDir {
    pub fn new(name: &str) -> RunDir {
        let dir = std::env::temp_dir().join(format!("xskit-run-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        RunDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xskit fwd` between the chain's middle interfaces with `--json-lines -I 0.1`, its runtime
/// directory `run`, and `extra` options; returned once it has said where its control socket
/// is.
pub fn start_fwd_in(chain: &Chain, run: &RunDir, extra: &[&str]) -> Live {
    start_fwd_saying(chain, run, extra, "control socket").0
}

/// As [`start_fwd_in`], returned once it has said `until`, with what it says on stderr kept
/// as it comes.
pub fn start_fwd_saying(
    chain: &Chain,
    run: &RunDir,
    extra: &[&str],
    until: &str,
) -> (Live, std::sync::Arc<std::sync::Mutex<String>>) {
    let mut child = chain
        .m_a
        .ns
        .command(XSKIT)
        .env("XSKIT_RUN_DIR", run.path())
        .args(["fwd", "-i", &chain.m_a.ifname, "-i", &chain.m_c.ifname])
        .args(["--json-lines", "-I", "0.1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains(until) {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{said}");
        said.push_str(&line);
    }
    let kept = std::sync::Arc::new(std::sync::Mutex::new(said));
    let keeping = std::sync::Arc::clone(&kept);
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            let mut kept = keeping.lock().unwrap();
            kept.push_str(&line);
            kept.push('\n');
        }
    });
    (Live::new(KillOnDrop::new(child)), kept)
}
