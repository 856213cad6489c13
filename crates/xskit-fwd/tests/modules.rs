//! The crate's modules depend on each other one way: no module reaches, through `crate::`
//! paths outside comments and its own tests, a module that reaches back to it. lib.rs alone
//! gathers the public face, so it is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level module a source file belongs to, or None for lib.rs and test files.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    let is_test = relative.file_name().is_some_and(|f| f == "tests.rs");
    (name != "lib" && !is_test).then(|| name.to_string())
}

/// The modules named by `crate::NAME` in `text`, leaving out comments and a trailing
/// `#[cfg(test)] mod tests`.
fn references(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let mut found = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.insert(name);
            }
        }
    }
    found
}

fn source_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the crate's sources") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each module and the modules it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(file.strip_prefix(src).expect("under src")) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a source file");
        let uses: Vec<String> = references(&text)
            .into_iter()
            .filter(|m| *m != module)
            .collect();
        graph.entry(module).or_default().extend(uses);
    }
    graph
}

/// A path of modules from `from` back to itself, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().expect("never empty");
        for next in graph.get(last).into_iter().flatten() {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if graph.contains_key(next) && seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_reaches_back_to_one_that_uses_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 10, "the modules were found: {graph:?}");
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn a_cycle_is_found_where_there_is_one() {
    let text = |uses: &[&str]| -> BTreeSet<String> {
        references(
            &uses
                .iter()
                .map(|m| format!("use crate::{m}::X;\n"))
                .collect::<String>(),
        )
    };
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), text(&["b"]));
    graph.insert("b".to_string(), text(&["c"]));
    graph.insert("c".to_string(), text(&["a"]));
    assert_eq!(cycle_through(&graph, "a").unwrap(), ["a", "b", "c", "a"]);
    graph.insert(
        "c".to_string(),
        references("// crate::a is only named here\n"),
    );
    assert_eq!(cycle_through(&graph, "a"), None);
}
