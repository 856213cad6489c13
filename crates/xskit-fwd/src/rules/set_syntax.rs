//! A rules file's `[[set]]` tables: each a name and one of a `file` of prefixes, an inline
//! `prefixes` list or a `ports` list, read into [`PrefixSet`]s and [`PortSet`]s before any
//! rule names them.

use std::path::Path;
use std::sync::Arc;

use super::syntax::{check_name, RulesError, SetRepr};
use crate::sets::{
    kernel_bytes, PortSet, PrefixSet, SetOptions, MAX_ELEMENT_TIMEOUT, MAX_SET_FILE_BYTES,
    MAX_SET_KERNEL_BYTES,
};

type Spanned<T> = toml::Spanned<T>;

/// A rules file's sets, each kind in the order declared.
#[derive(Default)]
pub(super) struct Sets {
    pub(super) prefixes: Vec<Arc<PrefixSet>>,
    pub(super) ports: Vec<Arc<PortSet>>,
}

/// Where the sets' `file`s come from.
#[derive(Clone, Copy)]
pub(super) enum SetFiles<'a> {
    /// Read from disk, relative files in this directory (the working directory when `None`).
    Disk(Option<&'a Path>),
    /// Not read: a set that names a file is the running forwarder's set of its name, as it
    /// runs (rules applied over the control socket: the forwarder opens no path on a
    /// caller's behalf).
    Running(&'a [Arc<PrefixSet>]),
}

/// One set as read.
enum Parsed {
    Prefixes(PrefixSet),
    Ports(PortSet),
}

/// The sets of a rules file, their files read from `files`.
pub(super) fn parse_sets(
    text: &str,
    sets: &[Spanned<SetRepr>],
    files: SetFiles<'_>,
) -> Result<Sets, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    if let Some(extra) = sets.get(crate::abi::MAX_SETS) {
        return Err(at(
            extra.span(),
            format!(
                "{} sets; at most {} are supported: merge some",
                sets.len(),
                crate::abi::MAX_SETS
            ),
        ));
    }
    let mut out = Sets::default();
    for spanned in sets {
        let name = &spanned.get_ref().name;
        check_name(name.get_ref())
            .map_err(|m| at(name.span(), m.replace("a rule's", "a set's")))?;
        let taken = out.prefixes.iter().any(|s| s.name() == name.get_ref())
            || out.ports.iter().any(|s| s.name() == name.get_ref());
        if taken {
            return Err(at(
                name.span(),
                format!("a set named {:?} is declared already", name.get_ref()),
            ));
        }
        match parse_set(text, spanned, files)? {
            Parsed::Prefixes(set) => out.prefixes.push(Arc::new(set)),
            Parsed::Ports(set) => out.ports.push(Arc::new(set)),
        }
    }
    check_memory(text, sets, &out.prefixes)?;
    Ok(out)
}

/// A `ports` list: numbers and ranges, as a rule's port keys take them.
fn parse_ports(
    text: &str,
    name: &str,
    list: &[Spanned<toml::Value>],
) -> Result<PortSet, RulesError> {
    let ranges = list
        .iter()
        .map(|v| {
            super::syntax::parse_range(v.get_ref(), "port")
                .map_err(|m| RulesError::at(text, v.span().start, format!("set {name:?}: {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PortSet::from_ranges(name, &ranges))
}

/// One set, from its file or its inline list.
fn parse_set(
    text: &str,
    spanned: &Spanned<SetRepr>,
    files: SetFiles<'_>,
) -> Result<Parsed, RulesError> {
    let at = |span: std::ops::Range<usize>, m: String| RulesError::at(text, span.start, m);
    let r = spanned.get_ref();
    let name = r.name.get_ref();
    let options = set_options(text, r)?;
    match (&r.file, &r.prefixes, &r.ports) {
        (None, None, Some(list)) => parse_ports(text, name, list.get_ref()).map(Parsed::Ports),
        (Some(file), None, None) => {
            let dir = match files {
                SetFiles::Disk(dir) => dir,
                SetFiles::Running(running) => {
                    return running
                        .iter()
                        .find(|s| s.name() == name)
                        .map(|s| Parsed::Prefixes((**s).clone()))
                        .ok_or_else(|| {
                            at(
                                file.span(),
                                format!(
                                    "set {name:?} reads a file, and the running forwarder has \
                                     no set of that name: rules sent to a running forwarder \
                                     take such sets as they run; start it again to add one"
                                ),
                            )
                        })
                }
            };
            let path = match dir {
                Some(dir) => dir.join(file.get_ref()),
                None => file.get_ref().into(),
            };
            let content = crate::text_file::read_bounded(&path, MAX_SET_FILE_BYTES)
                .map_err(|e| at(file.span(), format!("set {name:?}: {e}")))?;
            PrefixSet::parse_with(name, &content, options)
                .map_err(|e| {
                    at(
                        file.span(),
                        format!(
                            "set {name:?}: {}: line {}: {}",
                            path.display(),
                            e.line,
                            e.message
                        ),
                    )
                })
                .map(Parsed::Prefixes)
        }
        (None, Some(list), None) => {
            let items = list.get_ref();
            PrefixSet::from_items_with(
                name,
                items
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i + 1, s.get_ref().as_str())),
                options,
            )
            .map_err(|e| {
                let span = items.get(e.line - 1).map_or(list.span(), |s| s.span());
                at(span, format!("set {name:?}: {}", e.message))
            })
            .map(Parsed::Prefixes)
        }
        _ => Err(at(
            spanned.span(),
            format!(
                "set {name:?} needs one of file = \"PATH\" (one prefix a line), prefixes = \
                 [...] (which may be empty) or ports = [...]"
            ),
        )),
    }
}

/// A prefix set's `timeout` (its elements' default) and `counters`; a port set takes
/// neither. Timeouts count from now, as the set is read.
fn set_options(text: &str, r: &SetRepr) -> Result<SetOptions, RulesError> {
    let name = r.name.get_ref();
    if r.ports.is_some() {
        if let Some(span) = r
            .timeout
            .as_ref()
            .map(|t| t.span())
            .or(r.counters.as_ref().map(|c| c.span()))
        {
            return Err(RulesError::at(
                text,
                span.start,
                format!("set {name:?}: a port set takes no timeout or counters"),
            ));
        }
    }
    let timeout = match &r.timeout {
        Some(t) => Some(
            crate::duration::parse_within(t.get_ref(), "timeout", (MAX_ELEMENT_TIMEOUT, "365d"))
                .map_err(|m| RulesError::at(text, t.span().start, format!("set {name:?}: {m}")))?,
        ),
        None => None,
    };
    Ok(SetOptions {
        timeout,
        counters: r.counters.as_ref().is_some_and(|c| *c.get_ref()),
        now_ns: xskit_os::monotonic_ns(),
    })
}

/// Refuses sets whose kernel tables would take more than [`MAX_SET_KERNEL_BYTES`], before
/// anything is loaded.
fn check_memory(
    text: &str,
    spans: &[Spanned<SetRepr>],
    sets: &[Arc<PrefixSet>],
) -> Result<(), RulesError> {
    let room = crate::set_tables::SetRoom::for_sets(sets, 0);
    let bytes = kernel_bytes(
        room.sets,
        room.partial_blocks,
        room.trie_entries + room.elements,
    );
    if bytes <= MAX_SET_KERNEL_BYTES {
        return Ok(());
    }
    Err(RulesError::at(
        text,
        spans.last().map_or(0, |s| s.span().start),
        format!(
            "the sets would take about {} MiB of kernel memory on each interface, more than \
             the {} MiB xskit allows: merge prefixes (aggregate the list) or split the rules \
             over forwarders",
            bytes >> 20,
            MAX_SET_KERNEL_BYTES >> 20
        ),
    ))
}

#[cfg(test)]
mod tests {
    use crate::rules::{PacketKey, RuleSet};
    use std::path::PathBuf;

    /// The path of a `rules.toml` in a directory of its own, removed with it when dropped.
    struct RulesPath(PathBuf);

    impl std::ops::Deref for RulesPath {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for RulesPath {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    /// A directory of its own holding `files`, and the path of its `rules.toml`.
    fn files(test: &str, files: &[(&str, &str)]) -> RulesPath {
        let dir = std::env::temp_dir().join(format!("xskit-sets-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        RulesPath(dir.join("rules.toml"))
    }

    fn v4(src: [u8; 4]) -> PacketKey {
        let mut k = PacketKey {
            family: 4,
            protocol: 17,
            ..PacketKey::default()
        };
        k.src[..4].copy_from_slice(&src);
        k
    }

    const RULES: &str = "[[set]]\nname = \"drop-list\"\nfile = \"drop.txt\"\n\
                         [[rule]]\nsrc = \"@drop-list\"\naction = \"drop\"\n";

    #[test]
    fn a_set_file_beside_the_rules_file_is_read_and_matched() {
        let path = files(
            "beside",
            &[
                ("rules.toml", RULES),
                (
                    "drop.txt",
                    "; Spamhaus DROP\n192.0.2.0/24 ; SBL1\n198.51.100.7\n",
                ),
            ],
        );
        let rs = RuleSet::from_file(&path).unwrap();
        assert_eq!(rs.sets().len(), 1);
        assert_eq!(rs.sets()[0].stats().prefixes, 2);
        assert_eq!(rs.classify(&v4([192, 0, 2, 200])), Ok(Some(0)));
        assert_eq!(rs.classify(&v4([198, 51, 100, 7])), Ok(Some(0)));
        assert_eq!(rs.classify(&v4([198, 51, 100, 8])), Ok(None));
        // Not IP: no address, so in no set.
        let arp = PacketKey::default();
        assert_eq!(rs.classify(&arp), Ok(None));
    }

    #[test]
    fn a_bad_line_names_the_set_file_and_the_line() {
        let path = files(
            "bad-line",
            &[
                ("rules.toml", RULES),
                ("drop.txt", "192.0.2.0/24\n\n192.0.2.0/33\n"),
            ],
        );
        let e = RuleSet::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("drop.txt: line 3"), "{e}");
        assert!(e.contains("line 3, column 8"), "{e}");
        assert!(e.contains("prefix length"), "{e}");
    }

    #[test]
    fn a_set_file_that_is_not_a_regular_file_is_refused() {
        let path = files("not-regular", &[("rules.toml", RULES)]);
        std::fs::create_dir_all(path.with_file_name("drop.txt")).unwrap();
        let e = RuleSet::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
    }

    #[test]
    fn set_mistakes_are_refused_where_they_are_written() {
        for (text, says) in [
            (
                "[[rule]]\nsrc = \"@none\"\naction = \"drop\"\n",
                "no set is named \"none\"",
            ),
            ("[[set]]\nname = \"s\"\n", "needs one of file"),
            (
                "[[set]]\nname = \"s\"\nprefixes = []\nfile = \"x\"\n",
                "needs one of file",
            ),
            (
                "[[set]]\nname = \"s\"\nprefixes = []\n[[set]]\nname = \"s\"\nprefixes = []\n",
                "declared already",
            ),
            (
                "[[set]]\nname = \"s\"\nprefixes = [\"10.0.0.0/8\", \"x\"]\n",
                "\"x\" is not",
            ),
            (
                "[[set]]\nname = \"\"\nprefixes = []\n",
                "a set's name cannot be empty",
            ),
        ] {
            let e = RuleSet::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        let many: String = (0..=crate::abi::MAX_SETS)
            .map(|i| format!("[[set]]\nname = \"s{i}\"\nprefixes = []\n"))
            .collect();
        let e = RuleSet::from_toml(&many).unwrap_err().to_string();
        assert!(e.contains("at most 16"), "{e}");
    }

    #[test]
    fn a_port_set_matches_the_ports_it_holds() {
        let rs = RuleSet::from_toml(
            "[[set]]\nname = \"reflectors\"\nports = [53, 123, \"1900-1901\", 11211]\n\
             [[rule]]\nprotocol = \"udp\"\nsrc_port = \"@reflectors\"\naction = \"drop\"\n",
        )
        .unwrap();
        assert_eq!(rs.port_sets()[0].len(), 5);
        for (port, rule) in [(53, Some(0)), (1901, Some(0)), (11211, Some(0)), (54, None)] {
            let key = PacketKey {
                src_port: port,
                ..v4([198, 51, 100, 1])
            };
            assert_eq!(rs.classify(&key), Ok(rule), "{port}");
        }
    }

    #[test]
    fn port_and_address_sets_are_named_where_they_belong() {
        let sets = "[[set]]\nname = \"a\"\nprefixes = []\n[[set]]\nname = \"p\"\nports = [53]\n";
        for (rule, says) in [
            ("src = \"@p\"", "set \"p\" holds ports"),
            (
                "protocol = \"udp\"\nsrc_port = \"@a\"",
                "set \"a\" holds addresses",
            ),
            ("protocol = \"udp\"\ndst_port = \"@none\"", "ports = [...]"),
            ("dst_port = \"@p\"", "ports need protocol"),
        ] {
            let text = format!("{sets}[[rule]]\n{rule}\naction = \"drop\"\n");
            let e = RuleSet::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{rule}: {e}");
        }
        let e = RuleSet::from_toml("[[set]]\nname = \"p\"\nports = [53, \"9-1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("set \"p\": port range \"9-1\" is empty"), "{e}");
    }

    #[test]
    fn an_empty_inline_set_matches_nothing() {
        let rs = RuleSet::from_toml(
            "[[set]]\nname = \"later\"\nprefixes = []\n[[rule]]\ndst = \"@later\"\naction = \"drop\"\n",
        )
        .unwrap();
        assert_eq!(rs.classify(&v4([198, 51, 100, 1])), Ok(None));
    }

    #[test]
    fn timeouts_and_counters_are_read_and_refused_where_they_do_not_belong() {
        let rs = RuleSet::from_toml(
            "[[set]]\nname = \"t\"\ntimeout = \"10m\"\ncounters = true\n\
             prefixes = [\"198.51.100.0/24\", \"198.51.100.7 timeout 1h\"]\n\
             [[set]]\nname = \"plain\"\nprefixes = [\"192.0.2.0/24\"]\n",
        )
        .unwrap();
        let (t, plain) = (&rs.sets()[0], &rs.sets()[1]);
        assert!(t.is_tracked() && t.counts_elements() && !plain.is_tracked());
        assert_eq!(t.stats().timed, 2);
        let lives: Vec<u64> = t.elements().iter().filter_map(|e| e.expires_ns).collect();
        assert_eq!(
            lives[1] - lives[0],
            50 * 60 * 1_000_000_000,
            "1h against the set's 10m"
        );
        assert!(t.contains(4, u128::from(0xc633_6407u32) << 96));
        for (text, says) in [
            (
                "[[set]]\nname = \"p\"\nports = [53]\ncounters = true\n",
                "a port set takes no timeout or counters",
            ),
            (
                "[[set]]\nname = \"s\"\ntimeout = \"soon\"\nprefixes = []\n",
                "set \"s\": \"soon\" is not a time",
            ),
            (
                "[[set]]\nname = \"s\"\nprefixes = [\"10.0.0.0/8 timeout 0s\"]\n",
                "timeout \"0s\" must be 1ms to 365d",
            ),
        ] {
            let e = RuleSet::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
