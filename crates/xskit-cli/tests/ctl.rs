//! `xskit ctl` and the forwarder's control socket: found by its namespace and interfaces,
//! answering status and rules that agree with the forwarder's own counters, closed to other
//! users unless a group is named, and available to a well-behaved client while a thousand
//! others are connected, silent, sending garbage or oversized lines.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use xskit_testbed::{Chain, Host};

const RULES: &str =
    "[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\naction = \"drop\"\n";

/// `xskit ctl ARGS` in `host`'s namespace with runtime directory `run`.
fn ctl(host: &Host, run: &RunDir, args: &[&str]) -> std::process::Output {
    host.ns
        .command(XSKIT)
        .env("XSKIT_RUN_DIR", run.path())
        .arg("ctl")
        .args(args)
        .output()
        .unwrap()
}

/// `xskit ctl ARGS` as user and group 65534 (nobody, nogroup), with `group` as its group.
fn ctl_as_nobody(host: &Host, group: &str, args: &[&str]) -> std::process::Output {
    host.ns
        .command("setpriv")
        .args([
            "--reuid=65534",
            &format!("--regid={group}"),
            "--clear-groups",
        ])
        .arg(XSKIT)
        .arg("ctl")
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn ctl_finds_the_forwarder_and_its_answers_agree_with_the_counters() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("answers");
    let rules = RulesFile::new(RULES);
    let mut fwd = start_fwd_in(&chain, &dir, &["--rules", rules.path()]);
    let (mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    for port in ["7", "9"] {
        let mut args = vec!["gen", "-i", &chain.a.ifname, "--dst-mac", &mac];
        args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", port]);
        args.extend(["-n", "300", "-r", "10000"]);
        ok(&run(&chain.a, XSKIT, &args));
    }
    let counted = fwd.wait(Duration::from_secs(60), |line| {
        rule(line, "drop-7")["packets"] == 300
            && rule(line, "default")["packets"].as_u64() >= Some(300)
    });
    assert!(counted.is_some(), "{}", fwd.last());
    // The next interval line is what the socket answers from.
    fwd.wait(Duration::from_secs(60), |_| true);
    let rules_now = json(&ctl(&chain.m_a, &dir, &["rules", "--json"]));
    let names: Vec<&str> = rules_now["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["drop-7", "default", "unclassifiable"],
        "{rules_now}"
    );
    assert_eq!(rules_now["rules"][0]["packets"], 300, "{rules_now}");
    let by_interface = json(&ctl(
        &chain.m_a,
        &dir,
        &["status", "--json", "-i", &chain.m_a.ifname],
    ));
    let rx = by_interface["counters"]["ports"][0]["rx_packets"]
        .as_u64()
        .unwrap();
    assert!(rx >= 300, "{by_interface}");
    let text = ok(&ctl(&chain.m_a, &dir, &["rules"]));
    assert!(text.contains("drop-7") && text.contains("300"), "{text}");
    // Another namespace's forwarders are not this one's.
    let elsewhere = ctl(&chain.a, &dir, &["status"]);
    assert!(!elsewhere.status.success());
    assert!(
        String::from_utf8_lossy(&elsewhere.stderr).contains("no forwarder's control socket"),
        "{elsewhere:?}"
    );
    // The socket is root's: another user is refused, told what to do.
    let socket = std::fs::read_dir(&dir.0)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let socket = socket.to_str().unwrap();
    let nobody = ctl_as_nobody(&chain.m_a, "65534", &["--socket", socket, "status"]);
    let said = String::from_utf8_lossy(&nobody.stderr);
    assert!(
        !nobody.status.success() && said.contains("permission denied"),
        "{said}"
    );
    assert!(said.contains("--control-group"), "{said}");
    let summary = stop_live_fwd(fwd);
    assert_eq!(rule(&summary, "drop-7")["packets"], 300, "{summary}");
    assert!(
        std::fs::read_dir(&dir.0).unwrap().next().is_none(),
        "the socket went with the forwarder"
    );
}

#[test]
fn a_control_group_may_ask_and_no_one_else() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("group");
    let socket = format!("{}/fwd.sock", dir.path());
    std::fs::create_dir_all(&dir.0).unwrap();
    let fwd = start_fwd_in(
        &chain,
        &dir,
        &["--control", &socket, "--control-group", "nogroup"],
    );
    // The first interval line makes the status answerable.
    let mut fwd = fwd;
    fwd.wait(Duration::from_secs(60), |_| true);
    let member = ctl_as_nobody(
        &chain.m_a,
        "65534",
        &["--socket", &socket, "status", "--json"],
    );
    assert!(member.status.success(), "{member:?}");
    let other = ctl_as_nobody(&chain.m_a, "100", &["--socket", &socket, "status"]);
    assert!(!other.status.success(), "{other:?}");
    stop_live_fwd(fwd);
}

/// Holds COUNT connections to the socket at argv[1] (raising its own open-files limit),
/// checks on two of them that garbage and an oversized line are refused, prints "held", and
/// keeps them until its stdin closes.
const CLIENTS: &str = r#"
import resource, socket, sys
path, count = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    held.append(s)
def answer(s):
    s.settimeout(30)
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data
garbage = socket.socket(socket.AF_UNIX); garbage.connect(path)
garbage.sendall(b"\x00\xffnot json\n")
print("garbage:", answer(garbage).decode(errors="replace").strip(), flush=True)
big = socket.socket(socket.AF_UNIX); big.connect(path)
try:
    big.sendall(b"x" * 70000)
except OSError:
    pass
print("oversized:", answer(big).decode(errors="replace").strip(), flush=True)
print("held", len(held), flush=True)
sys.stdin.read()
"#;

#[test]
fn the_control_socket_answers_while_a_thousand_clients_hold_it_and_others_misbehave() {
    if !privileged() {
        return;
    }
    let chain = Chain::bridged().unwrap();
    let dir = RunDir::new("load");
    std::fs::create_dir_all(&dir.0).unwrap();
    let socket = format!("{}/fwd.sock", dir.path());
    let mut fwd = start_fwd_in(&chain, &dir, &["--control", &socket]);
    fwd.wait(Duration::from_secs(60), |_| true);
    let mut clients = KillOnDrop::new(
        chain
            .m_a
            .ns
            .command("python3")
            .args(["-c", CLIENTS, &socket, "1000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut said = String::new();
    let mut lines = BufReader::new(clients.stdout());
    while !said.contains("held") {
        let mut line = String::new();
        assert!(lines.read_line(&mut line).unwrap() > 0, "{said}");
        said.push_str(&line);
    }
    assert!(said.contains("not a JSON object"), "{said}");
    assert!(said.contains("at most 65536 bytes"), "{said}");
    // A well-behaved client is answered while they are held, and the forwarder forwards.
    let status = Command::new(XSKIT)
        .args(["ctl", "--socket", &socket, "status", "--json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    // Bounded: the oldest silent clients were closed to make room, not all kept.
    let open = std::fs::read_dir(format!("/proc/{}/fd", fwd.id()))
        .unwrap()
        .count();
    assert!(open < 500, "the forwarder holds {open} descriptors");
    ok(&run(
        &chain.a,
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "5", &chain.c.ip.to_string()],
    ));
    drop(clients);
    let summary = stop_live_fwd(fwd);
    assert!(
        summary["counters"]["ports"][0]["rx_packets"].as_u64() >= Some(3),
        "{summary}"
    );
}

/// A `--control` path that cannot be served (a file is there, or another forwarder answers
/// there) is refused before anything is attached, naming the option.
#[test]
fn a_control_path_that_cannot_be_served_is_refused_before_anything_is_attached() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("refused");
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = format!("{}/not-a-socket", dir.path());
    std::fs::write(&file, b"a file").unwrap();
    let (a, c) = (chain.m_a.ifname.as_str(), chain.m_c.ifname.as_str());
    let out = run(
        &chain.m_a,
        XSKIT,
        &["fwd", "-i", a, "-i", c, "--control", &file, "-d", "1"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("--control {file}")) && said.contains("is not a socket"),
        "{said}"
    );
    let link = run(&chain.m_a, "ip", &["-d", "link", "show", "dev", a]);
    assert!(
        !String::from_utf8_lossy(&link.stdout).contains("prog/xdp"),
        "nothing attached"
    );
}

/// Rules that drop UDP port 8, keep drop-7 and forward port 9 by a rule of their own.
const RULES_B: &str = "[[rule]]\nname = \"drop-8\"\nprotocol = \"udp\"\ndst_port = 8\n\
     action = \"drop\"\n[[rule]]\nname = \"drop-7\"\nprotocol = \"udp\"\ndst_port = 7\n\
     action = \"drop\"\n[[rule]]\nname = \"fwd-9\"\nprotocol = \"udp\"\ndst_port = 9\n\
     action = \"forward\"\n";

/// `n` probes from a to c's UDP `port` at `rate` a second, through the forwarder, started.
fn probes_to(chain: &Chain, port: &str, n: &str, rate: &str) -> std::process::Child {
    let (mac, src, dst) = (
        mac(&chain.c),
        chain.a.ip.to_string(),
        chain.c.ip.to_string(),
    );
    let mut args = vec!["gen", "-i", &chain.a.ifname, "--dst-mac", &mac];
    args.extend(["--src-ip", &src, "--dst-ip", &dst, "--dst-port", port]);
    args.extend(["-n", n, "-r", rate]);
    chain
        .a
        .ns
        .command(XSKIT)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The generation of the rules in an interval line.
fn generation(line: &serde_json::Value) -> u64 {
    line["counters"]["rules_generation"].as_u64().unwrap_or(0)
}

/// `ctl apply` of a file with a mistake fails naming the file and line, and says the
/// running rules stand.
fn refuses_a_mistake(chain: &Chain, dir: &RunDir) {
    // A mistake: refused with its file and line, the rules in force as they were.
    let bad = RulesFile::new(
        "[[rule]]\nname = \"x\"\nprotocol = \"udp\"\ndst_port = \"9-x\"\naction = \"drop\"\n",
    );
    let refused = ctl(&chain.m_a, dir, &["apply", bad.path()]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains(bad.path()) && said.contains("line 4") && said.contains("rules stand"),
        "{said}"
    );
}

/// `xskit ctl apply` changes the rules under a stream of probes that both sets forward, and
/// not one is lost; a rule that keeps its name keeps its counts; a file with a mistake is
/// refused naming its line, the running rules untouched.
#[test]
fn ctl_apply_changes_the_rules_whole_and_loses_no_probe() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("apply");
    let (a, b) = (RulesFile::new(RULES), RulesFile::new(RULES_B));
    let mut fwd = start_fwd_in(&chain, &dir, &["--rules", a.path()]);
    ok(&probes_to(&chain, "7", "300", "10000")
        .wait_with_output()
        .unwrap());
    let dropped = fwd.wait(Duration::from_secs(60), |l| {
        rule(l, "drop-7")["packets"] == 300
    });
    assert!(dropped.is_some(), "{}", fwd.last());
    let stream = 10_000u64;
    let receiver = recv(&chain.c, &["-n", &stream.to_string(), "-d", "60"]);
    let sender = probes_to(&chain, "9", &stream.to_string(), "2000");
    let flowing = fwd.wait(Duration::from_secs(60), |l| {
        rule(l, "default")["packets"].as_u64() > Some(1_000)
    });
    assert!(flowing.is_some(), "{}", fwd.last());
    let applied = json(&ctl(&chain.m_a, &dir, &["apply", b.path(), "--json"]));
    assert_eq!(
        (
            &applied["generation"],
            &applied["kept"],
            &applied["added"],
            &applied["removed"]
        ),
        (&2.into(), &1.into(), &2.into(), &0.into()),
        "{applied}"
    );
    let b_runs = fwd.wait(Duration::from_secs(60), |l| {
        generation(l) == 2 && rule(l, "fwd-9")["packets"].as_u64() > Some(500)
    });
    assert!(b_runs.is_some(), "{}", fwd.last());
    assert_eq!(
        rule(fwd.last(), "drop-7")["packets"],
        300,
        "kept its count: {}",
        fwd.last()
    );
    let back = ok(&ctl(&chain.m_a, &dir, &["apply", a.path()]));
    assert!(back.contains("generation 3"), "{back}");
    let sent = sender.wait_with_output().unwrap();
    assert!(sent.status.success(), "{sent:?}");
    let r = json_of(receiver.take());
    assert_eq!(
        r["valid"], stream,
        "every probe of the stream crossed both applies: {r}"
    );
    // B again: port 8 dropped by a rule new again, counted from zero.
    ok(&ctl(&chain.m_a, &dir, &["apply", b.path()]));
    ok(&probes_to(&chain, "8", "100", "10000")
        .wait_with_output()
        .unwrap());
    let eight = fwd.wait(Duration::from_secs(60), |l| {
        generation(l) == 4 && rule(l, "drop-8")["packets"] == 100
    });
    assert!(eight.is_some(), "B drops port 8: {}", fwd.last());
    refuses_a_mistake(&chain, &dir);
    fwd.wait(Duration::from_secs(60), |_| true);
    let status = json(&ctl(&chain.m_a, &dir, &["status", "--json"]));
    assert_eq!(generation(&status), 4, "{status}");
    let summary = stop_live_fwd(fwd);
    let names: Vec<&str> = summary["counters"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["drop-8", "drop-7", "fwd-9", "default"], "{summary}");
    assert_eq!(rule(&summary, "drop-7")["packets"], 300, "{summary}");
}

/// `xskit ctl set` adds a's address to a set a rule drops, takes it out again, lists the
/// set, loads 99,999 elements from a file, and refuses an element that is not one, the
/// set as it was.
#[test]
fn ctl_set_adds_and_removes_elements_while_it_forwards() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("set");
    let rules = RulesFile::new(
        "[[set]]\nname = \"blocked\"\nprefixes = [\"203.0.113.0/24\"]\n\
         [[rule]]\nname = \"listed\"\nsrc = \"@blocked\"\naction = \"drop\"\n",
    );
    let mut fwd = start_fwd_in(&chain, &dir, &["--rules", rules.path()]);
    let a = chain.a.ip.to_string();
    let set = |args: &[&str]| ctl(&chain.m_a, &dir, &[&["set"], args].concat());
    let send = |n: &str| {
        ok(&probes_to(&chain, "9", n, "10000")
            .wait_with_output()
            .unwrap())
    };
    send("100");
    let crossed = fwd.wait(Duration::from_secs(60), |l| {
        rule(l, "default")["packets"].as_u64() >= Some(100)
    });
    assert!(crossed.is_some(), "{}", fwd.last());
    ok(&set(&["add", "blocked", &a]));
    send("200");
    let dropped = fwd.wait(Duration::from_secs(60), |l| {
        rule(l, "listed")["packets"] == 200
    });
    assert!(
        dropped.is_some(),
        "a's probes dropped once it is listed: {}",
        fwd.last()
    );
    let listed = ok(&set(&["list", "blocked"]));
    assert_eq!(listed, format!("{a}/32\n203.0.113.0/24\n"));
    ok(&set(&["del", "blocked", &a]));
    send("50");
    let back = fwd.wait(Duration::from_secs(60), |l| {
        rule(l, "default")["packets"].as_u64() >= Some(150)
    });
    assert!(back.is_some(), "forwarded again: {}", fwd.last());
    assert_eq!(rule(fwd.last(), "listed")["packets"], 200, "{}", fwd.last());
    let refused = set(&["add", "blocked", "198.51.100.7", "nope"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("element 2"),
        "{said}"
    );
    // Every other address: none merge, and the list holds them all and the /24.
    let many = RulesFile::new(
        &(0..99_999u32)
            .map(|i| format!("2001:db8:1::{:x}:{:x}\n", (2 * i) >> 16, (2 * i) & 0xffff))
            .collect::<String>(),
    );
    ok(&set(&["load", "blocked", many.path()]));
    let list = json(&set(&["list", "blocked", "--json"]));
    let elements = list["elements"].as_array().unwrap();
    assert_eq!(elements.len(), 100_000);
    assert_eq!(elements.last().unwrap(), "2001:db8:1::3:d3c/128");
    assert!(!elements.iter().any(|e| *e == format!("{a}/32")));
    let summary = stop_live_fwd(fwd);
    assert_eq!(rule(&summary, "listed")["packets"], 200, "{summary}");
}

/// SIGHUP reads the rules file again and applies it, as `ctl apply` does; a file with a
/// mistake is refused, saying so, and the forwarder goes on with the rules it has.
#[test]
fn sighup_applies_the_rules_file_again() {
    if !privileged() {
        return;
    }
    let chain = Chain::new().unwrap();
    let dir = RunDir::new("hangup");
    let file = RulesFile::new(RULES);
    let (mut fwd, said) =
        start_fwd_saying(&chain, &dir, &["--rules", file.path()], "control socket");
    fwd.wait(Duration::from_secs(60), |_| true);
    let hup = |fwd: &Live| {
        let sent = Command::new("kill")
            .args(["-HUP", &fwd.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    std::fs::write(file.path(), RULES_B).unwrap();
    hup(&fwd);
    let reloaded = fwd.wait(Duration::from_secs(60), |l| {
        generation(l) == 2 && rule(l, "drop-8")["packets"] == 0
    });
    assert!(
        reloaded.is_some(),
        "{}\n{}",
        fwd.last(),
        said.lock().unwrap()
    );
    std::fs::write(file.path(), "[[rule]]\nname = \"x\"\naction = \"nope\"\n").unwrap();
    hup(&fwd);
    let noted = xskit_testbed::wait_for(Duration::from_secs(60), || {
        said.lock()
            .unwrap()
            .contains("refused, the running rules stand")
            .then_some(())
    });
    assert!(noted.is_some(), "{}", said.lock().unwrap());
    let after = fwd.last()["elapsed_s"].as_f64().unwrap();
    let going_on = fwd.wait(Duration::from_secs(60), |line| {
        line["elapsed_s"].as_f64().unwrap() > after
    });
    assert!(going_on.is_some(), "interval lines go on after SIGHUP");
    assert_eq!(generation(fwd.last()), 2, "{}", fwd.last());
    let summary = stop_live_fwd(fwd);
    assert_eq!(summary["command"], "fwd", "{summary}");
}
