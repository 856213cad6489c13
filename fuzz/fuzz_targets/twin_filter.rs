//! The filter's twins held to each other: the same rules and bytes through the C of
//! `xdp_filter.c` (BPF_PROG_TEST_RUN on the loaded program, counters read around each run)
//! and through the Rust of `xskit_fwd::rules`; any difference in verdict, rule or
//! unclassifiability fails with the frame. Needs root: it runs in a network namespace of its
//! own (unshared, so it vanishes with the process), on a veth pair made there.
#![no_main]

use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use xskit::{Interface, Mode, Port, PortConfig, SocketConfig};
use xskit_fwd::filter::{SetRoom, XdpFilter};
use xskit_fwd::rules::{PacketKey, RuleSet, Verdict};

#[path = "shared/rules_menu.rs"]
mod rules_menu;

struct Bench {
    filter: XdpFilter,
    // A socket on queue 0, so a redirect to user space shows as XDP_REDIRECT.
    _port: Port,
}

static BENCH: Mutex<Option<Bench>> = Mutex::new(None);

fn bench() -> Bench {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("a network namespace of its own (run as root): {e}"));
    // No IPv6 here: its neighbour discovery and router solicitations would cross the filter
    // between a test run and the reading of its counters.
    let quiet = [
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ];
    let commands: [(&str, &[&str]); 4] = [
        ("sysctl", &["-q", "-w", quiet[0], quiet[1]]),
        (
            "ip",
            &["link", "add", "xf0", "type", "veth", "peer", "name", "xf1"],
        ),
        ("ip", &["link", "set", "xf0", "up"]),
        ("ip", &["link", "set", "xf1", "up"]),
    ];
    for (program, args) in commands {
        let ok = std::process::Command::new(program)
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{program} {args:?}");
    }
    let iface = Interface::by_name("xf0").unwrap();
    let room = SetRoom {
        sets: rules_menu::SETS.len(),
        partial_blocks: 64,
        trie_entries: 64,
        elements: 64,
        port_sets: 1,
        // The vectors of the longest rule lists the menu draws (80 rules), and more.
        vectors: 8192,
        rule_prefixes: 64,
        ..SetRoom::default()
    };
    let filter = XdpFilter::attach_with_sets(&iface, Mode::Skb, false, room).unwrap();
    let config = PortConfig::default()
        .mode(Mode::Skb)
        .socket(SocketConfig::default());
    let port = Port::open_with(Arc::clone(filter.program()), 0, &config).unwrap();
    filter.set_forward_target(&iface).unwrap();
    Bench {
        filter,
        _port: port,
    }
}

fuzz_target!(|data: &[u8]| {
    let (text, frame) = rules_menu::rules(data);
    // The kernel's test run refuses frames shorter than an Ethernet header.
    if frame.len() < 14 {
        assert!(PacketKey::parse(frame).is_err());
        return;
    }
    let set = RuleSet::from_toml(&text).unwrap();
    let share = set.kernel_share(data.len() % 2 == 1);
    let mut held = BENCH.lock().unwrap();
    let program = &held.get_or_insert_with(bench).filter;
    program.set_sets(set.sets()).unwrap();
    program.set_port_sets(set.port_sets()).unwrap();
    let (rules, default) = share.kernel_rules().unwrap();
    let vectors = set.vectors().map(|v| &**v);
    program.set_rules(&rules, vectors, default).unwrap();
    program
        .set_unclassifiable(share.kernel_unclassifiable())
        .unwrap();
    let n = set.rules().len();
    let before = program.rule_counters().unwrap();
    let undecided = program.undecided_counter().unwrap().packets;
    let unclassified = program.unclassifiable_counter().unwrap().packets;
    let partial = program.partial_checksum_counter().unwrap().packets;
    let verdict = program.program().test_run(frame).unwrap();
    let after = program.rule_counters().unwrap();
    let hit: Vec<usize> = (0..=n)
        .filter(|&i| after[i].packets != before[i].packets)
        .collect();
    let parsed = PacketKey::parse(frame);
    let why = format!("{text}\nframe {frame:02x?}\nkernel verdict {verdict}, counters {hit:?}");
    if program.undecided_counter().unwrap().packets != undecided {
        // IPv6 with extension headers: up to user space, which walks the chain.
        assert!(hit.is_empty() && verdict == 4, "{why}");
        return;
    }
    if program.unclassifiable_counter().unwrap().packets != unclassified {
        // Unreadable, or a later fragment at a rule with ports: user space says so too.
        assert!(
            hit.is_empty() && set.decide(&parsed).0 == n + 1,
            "user space classified it: {parsed:?}\n{why}"
        );
        let want = match set.unclassifiable_verdict() {
            Verdict::Drop => 1,
            Verdict::Pass => 2,
            _ => 4,
        };
        assert_eq!(verdict, want, "{why}");
        return;
    }
    if let Err(e) = parsed {
        panic!("the kernel classified what user space calls {e}\n{why}");
    }
    // Past the kernel's rule, user space may still find it unclassifiable (n + 1).
    let (user, fate) = set.decide(&parsed);
    if program.partial_checksum_counter().unwrap().packets != partial {
        // A forward whose checksum the sender left partial: up to user space to finish it.
        assert!(
            hit.is_empty() && verdict == 4 && fate == Verdict::Forward,
            "{why}"
        );
        return;
    }
    assert_eq!(hit.len(), 1, "one counter moves\n{why}");
    let kernel = hit[0];
    let decided = if kernel == n {
        share.default_decided_in_kernel()
    } else {
        share.decided_in_kernel(kernel)
    };
    match verdict {
        1 => assert!(decided && fate == Verdict::Drop, "dropped\n{why}"),
        2 => assert!(decided && fate == Verdict::Pass, "passed\n{why}"),
        // To the socket (user space decides), or forwarded in XDP.
        4 => assert!(!decided || fate == Verdict::Forward, "redirected\n{why}"),
        other => panic!("verdict {other}\n{why}"),
    }
    if decided {
        assert_eq!(
            user, kernel,
            "user space's rule against the kernel's\n{why}"
        );
    } else {
        assert!(
            user >= kernel,
            "the kernel sent it up past its rule {user}\n{why}"
        );
    }
});
