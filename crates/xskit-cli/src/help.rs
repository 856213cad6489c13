//! What the commands' long help and man pages end with: the frame-size convention on the
//! commands that count frames, and examples, as xdp-tools' man pages end with theirs; and the
//! rules file's reference, `xskit fwd --help-rules` and the `xskit-rules(5)` man page.

/// The frame-size convention, under the help of every command that counts frames.
pub(crate) const FRAME_SIZES: &str = "Frame sizes (-s, --packet-size) and lengths count the \
    Ethernet frame WITHOUT its 4-byte FCS, as the UMEM, pcap and tcpdump hold it: RFC 2544's \
    (and xdpsock's and xdp-trafficgen's) 64-byte frame is -s 60 here, as in testpmd's \
    --txpkts.";

/// Commands whose options or output count frame sizes.
const COUNTS_FRAMES: &[&str] = &["demo", "gen", "dump", "bench"];

/// The rules file's reference: one text for the help, the man page and the guide.
pub(crate) const RULES_REFERENCE: &str = include_str!("rules_reference.md");

/// An example: what to type at a shell, and what it does.
pub(crate) type Example = (&'static str, &'static str);

/// Examples per command (a nested command's path joined by a space).
pub(crate) const EXAMPLES: &[(&str, &[Example])] = &[
    (
        "demo",
        &[
            (
                "sudo xskit demo",
                "probes across a testbed it builds, in SKB and DRV mode",
            ),
            (
                "sudo xskit demo -m drv -n 100000 -s 1500",
                "DRV mode only, larger frames",
            ),
        ],
    ),
    (
        "info",
        &[
            (
                "xskit info -i eth0",
                "XDP features, queues, MTU and the attached program",
            ),
            (
                "xskit info -i bond0 --json",
                "a bond's mode and members, as JSON",
            ),
        ],
    ),
    (
        "gen",
        &[
            (
                "sudo xskit gen -i eth0 --dst-mac 02:00:00:00:00:02 -r 1Mpps -d 30s",
                "UDP probes at a million packets a second for 30 seconds",
            ),
            (
                "sudo xskit gen -i eth0 -s 60 --flows 1024 -t 2",
                "RFC 2544's 64-byte frames, 1024 flows, two threads, flat out",
            ),
            (
                "sudo xskit gen -i eth0 --pcap trace.pcapng --loop 3 --topspeed",
                "replay a capture three times as fast as the link takes it",
            ),
        ],
    ),
    (
        "recv",
        &[
            (
                "sudo xskit recv -i eth1 --expect 100000 --max-loss 0.1%",
                "count gen's probes; exit 1 if more than 0.1% are lost",
            ),
            (
                "sudo xskit recv -i eth1 -d 10s -w received.pcap",
                "ten seconds, every packet written to a capture",
            ),
        ],
    ),
    (
        "dump",
        &[
            (
                "sudo xskit dump -i eth0 -c 10 udp port 53",
                "ten DNS packets as the XDP hook sees them",
            ),
            (
                "sudo xskit dump -i eth0 -w - | tshark -r -",
                "pcap on standard output, read by tshark",
            ),
            (
                "sudo xskit dump -i eth0 -w trace.pcap -s 128 -d 1m",
                "the first 128 bytes of each packet for a minute",
            ),
        ],
    ),
    (
        "bench",
        &[
            (
                "sudo xskit bench",
                "every benchmark on a testbed it builds, as a table (the bench-harness feature)",
            ),
            (
                "sudo xskit bench rxdrop -i eth0 -m drv -d 10s",
                "receive and drop on eth0's queue 0 for ten seconds",
            ),
            (
                "sudo xskit bench xdp-redirect -i eth0 --to eth1",
                "the kernel's bound on forwarding in XDP between two devices",
            ),
        ],
    ),
    (
        "zcsend",
        &[
            (
                "xskit zcsend --role receiver --addr 198.51.100.2",
                "the receiving end, listening on that address",
            ),
            (
                "xskit zcsend --role sender --addr 198.51.100.2 -s 65536 -z on",
                "64 KiB writes with MSG_ZEROCOPY to it",
            ),
            (
                "sudo xskit zcsend --table",
                "the MSG_ZEROCOPY paper's table on a testbed",
            ),
        ],
    ),
    (
        "fwd",
        &[
            (
                "sudo xskit fwd -i eth0 -i eth1 --rules rules.toml",
                "a bump in the wire between eth0 and eth1, filtered by the rules",
            ),
            (
                "xskit fwd --explain -i eth0 -i eth1 --rules rules.toml",
                "where each rule is decided, in the kernel or in user space",
            ),
            (
                "sudo xskit fwd -i eth0 -i eth1 --xdp-forward --metrics 127.0.0.1:9464",
                "forward in XDP what the kernel can decide; Prometheus metrics on a port",
            ),
            (
                "sudo xskit fwd -i bond0 -i eth3 --bond bond0=eth1,eth2 --bond-mode 802.3ad",
                "one side an 802.3ad bond of eth1 and eth2",
            ),
            (
                "sudo xskit fwd -i eth0 --reflect",
                "send every packet back, MACs swapped",
            ),
        ],
    ),
    (
        "ctl",
        &[
            (
                "sudo xskit ctl status",
                "the counters of the forwarder running in this network namespace",
            ),
            (
                "sudo xskit ctl rules -i eth0 --json",
                "the rules of the forwarder on eth0, with their counters, as JSON",
            ),
        ],
    ),
    (
        "bond hash",
        &[(
            "xskit bond hash --policy layer3+4 --members 2 trace.pcap",
            "the member a Linux bond sends each packet of a capture on",
        )],
    ),
];

/// A command's long-help ending: the frame-size note where it applies, then its examples.
fn ending(name: &str, examples: &[Example]) -> String {
    let mut text = String::new();
    if COUNTS_FRAMES.contains(&name) {
        text.push_str(FRAME_SIZES);
        text.push_str("\n\n");
    }
    text.push_str("Examples:");
    for (line, what) in examples {
        text.push_str(&format!("\n  {line}\n      {what}"));
    }
    text
}

/// `command` with each command's examples (and the frame-size note) at the end of its long
/// help, and the frame-size note at the end of its short help where it applies.
pub(crate) fn with_examples(mut command: clap::Command) -> clap::Command {
    for (path, examples) in EXAMPLES {
        let text = ending(path, examples);
        let counts_frames = COUNTS_FRAMES.contains(path);
        command = match path.split_once(' ') {
            Some((parent, child)) => command.mut_subcommand(parent, |p| {
                p.mut_subcommand(child, |c| c.after_long_help(text))
            }),
            None => command.mut_subcommand(*path, |c| {
                let c = c.after_long_help(text);
                if counts_frames {
                    c.after_help(FRAME_SIZES)
                } else {
                    c
                }
            }),
        };
    }
    command
}

/// `xskit-rules(5)`: the rules reference as a man page.
pub(crate) fn rules_man_page() -> String {
    let mut roff = String::from(
        ".TH XSKIT-RULES 5\n.SH NAME\nxskit-rules \\- the rules file of xskit fwd\n\
         .SH SYNOPSIS\nxskit fwd \\-i A \\-i B \\-\\-rules FILE\n.SH DESCRIPTION\n",
    );
    let mut in_code = false;
    for line in RULES_REFERENCE.lines() {
        if line.starts_with("```") {
            roff.push_str(if in_code { ".fi\n.RE\n" } else { ".RS\n.nf\n" });
            in_code = !in_code;
        } else if in_code {
            roff.push_str(&roff_text(line));
            roff.push('\n');
        } else if line.is_empty() {
            roff.push_str(".PP\n");
        } else if let Some(item) = line.strip_prefix("- ") {
            roff.push_str(".IP \\(bu 2\n");
            roff.push_str(&roff_text(&item.replace('`', "")));
            roff.push('\n');
        } else {
            roff.push_str(&roff_text(line.trim_start().replace('`', "").as_str()));
            roff.push('\n');
        }
    }
    roff.push_str(".SH SEE ALSO\nxskit-fwd(1)\n");
    roff
}

/// A line of text made safe for roff: backslashes and hyphens escaped, and no line that
/// starts with a control character.
fn roff_text(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The words of an example as the shell would pass them to xskit.
    fn argv(line: &str) -> Vec<&str> {
        let command = line.split(" | ").next().unwrap();
        let words: Vec<&str> = command.split_whitespace().collect();
        let start = usize::from(words[0] == "sudo");
        words[start..].to_vec()
    }

    #[test]
    fn the_rules_reference_states_the_limits_the_code_holds() {
        let limits = format!(
            "Limits: at most {} rules; a name of 1 to {} characters",
            xskit_fwd::MAX_RULES,
            xskit_fwd::rules::MAX_RULE_NAME_CHARS
        );
        let one_line = RULES_REFERENCE
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(one_line.contains(&limits), "{limits}");
        let mib = xskit_fwd::text_file::MAX_RULES_FILE_BYTES >> 20;
        assert!(one_line.contains(&format!("a file of at most {mib} MiB")));
        use xskit_fwd::rules::{MAX_SET_FILE_BYTES, MAX_SET_KERNEL_BYTES, MAX_SET_PREFIXES};
        let sets = format!(
            "At most {} sets, of at most {} prefixes each, a set file of at most {} MiB, and at \
             most {} MiB of kernel memory",
            xskit_fwd::abi::MAX_SETS,
            crate::opts::thousands(MAX_SET_PREFIXES as u64),
            MAX_SET_FILE_BYTES >> 20,
            crate::opts::thousands(MAX_SET_KERNEL_BYTES >> 20),
        );
        assert!(one_line.contains(&sets), "{sets}");
        use xskit_fwd::rules::{
            DEFAULT_BLOCK_TABLE, DEFAULT_SOURCE_TABLE, MAX_BLOCK_TABLE, MAX_SOURCE_TABLE,
        };
        let n = |v: u32| crate::opts::thousands(u64::from(v));
        for (table, default, max) in [
            ("source_table", DEFAULT_SOURCE_TABLE, MAX_SOURCE_TABLE),
            ("block_table", DEFAULT_BLOCK_TABLE, MAX_BLOCK_TABLE),
        ] {
            let said = format!("{} by default, at most {}", n(default), n(max));
            let at = one_line.find(table).expect(table);
            assert!(one_line[at..].contains(&said), "{table}: {said}");
        }
    }

    #[test]
    fn the_rules_reference_examples_are_rules_files() {
        let examples: Vec<&str> = RULES_REFERENCE
            .split("```toml")
            .skip(1)
            .filter_map(|rest| rest.split("```").next())
            .collect();
        assert_eq!(examples.len(), 2, "the rules and the set with timeouts");
        let rules = xskit_fwd::rules::RuleSet::from_toml(examples[0]).unwrap();
        assert!(!rules.sets().is_empty() && !rules.port_sets().is_empty());
        let timed = xskit_fwd::rules::RuleSet::from_toml(examples[1]).unwrap();
        assert!(timed.sets()[0].counts_elements() && timed.sets()[0].stats().timed == 2);
        let days = xskit_fwd::rules::MAX_ELEMENT_TIMEOUT.as_secs() / 86_400;
        let one_line = RULES_REFERENCE
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(one_line.contains(&format!("(1ms to {days}d,")), "{days}");
    }

    #[test]
    fn every_example_parses_as_the_command_it_illustrates() {
        for (path, examples) in EXAMPLES {
            assert!(!examples.is_empty(), "{path} has no example");
            for (line, what) in *examples {
                let words = argv(line);
                assert_eq!(words[0], "xskit", "{line}");
                let named = path.split(' ').collect::<Vec<_>>();
                assert_eq!(
                    &words[1..=named.len()],
                    &named[..],
                    "{line} is not `{path}`"
                );
                if let Err(e) = crate::Cli::try_parse_from(&words) {
                    panic!("example `{line}` ({what}) does not parse: {e}");
                }
            }
        }
    }

    #[test]
    fn every_command_ends_its_long_help_with_examples() {
        let command = with_examples(<crate::Cli as clap::CommandFactory>::command());
        for sub in command.get_subcommands() {
            let name = sub.get_name();
            if matches!(name, "completions" | "man" | "help") {
                continue;
            }
            let leaves: Vec<&clap::Command> = if sub.has_subcommands() {
                sub.get_subcommands()
                    .filter(|c| c.get_name() != "help")
                    .collect()
            } else {
                vec![sub]
            };
            for leaf in leaves {
                let help = leaf.get_after_long_help().map(|h| h.to_string());
                assert!(
                    help.is_some_and(|h| h.contains("Examples:")),
                    "`{name} {}` has no examples",
                    leaf.get_name()
                );
            }
        }
    }

    #[test]
    fn the_frame_size_note_is_only_where_frames_are_counted() {
        let command = with_examples(<crate::Cli as clap::CommandFactory>::command());
        assert!(command.get_after_help().is_none());
        for sub in command.get_subcommands() {
            let long = sub
                .get_after_long_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert_eq!(
                long.contains("WITHOUT its 4-byte FCS"),
                COUNTS_FRAMES.contains(&sub.get_name()),
                "{}",
                sub.get_name()
            );
        }
    }

    #[test]
    fn the_rules_man_page_is_roff_with_every_key() {
        let page = rules_man_page();
        assert!(page.starts_with(".TH XSKIT-RULES 5\n"));
        for key in [
            "name:",
            "src, dst:",
            "protocol:",
            "src_port, dst_port:",
            "action:",
            "rate:",
        ] {
            assert!(page.contains(&format!(".IP \\(bu 2\n{key}")), "{key}");
        }
        // No text line may start with a roff control character.
        for line in page.lines().filter(|l| !l.starts_with('.')) {
            assert!(!line.starts_with('\''), "{line}");
        }
    }
}
