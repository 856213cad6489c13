//! The guide's dependency list (docs/src/architecture.md) against the crates' manifests: an
//! arrow added in a `Cargo.toml` and not in the guide, or the other way round, fails here.

use std::collections::BTreeSet;
use std::path::Path;

type Edges = BTreeSet<(String, String)>;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// The `[dependencies]` on other workspace crates, for each crate the guide lists.
fn manifest_edges(crates: &BTreeSet<String>) -> Edges {
    let mut edges = Edges::new();
    for name in crates {
        let path = workspace().join("crates").join(name).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let manifest: toml::Table = text.parse().unwrap();
        let deps = manifest.get("dependencies").and_then(|d| d.as_table());
        for dep in deps.into_iter().flat_map(|d| d.keys()) {
            if dep.starts_with("xskit") {
                edges.insert((name.clone(), dep.clone()));
            }
        }
    }
    edges
}

/// The lines `crate -> dep dep ...` of the guide's first `text` block under "# Architecture".
fn readme_edges() -> (BTreeSet<String>, Edges) {
    let guide = std::fs::read_to_string(workspace().join("docs/src/architecture.md")).unwrap();
    let section = &guide[guide
        .find("# Architecture")
        .expect("an Architecture chapter")..];
    let block = section.split("```text\n").nth(1).unwrap();
    let block = &block[..block.find("```").unwrap()];
    let (mut crates, mut edges) = (BTreeSet::new(), Edges::new());
    for line in block.lines() {
        let (from, to) = line.split_once("->").expect("crate -> deps");
        crates.insert(from.trim().to_string());
        for dep in to.split_whitespace() {
            edges.insert((from.trim().to_string(), dep.to_string()));
        }
    }
    (crates, edges)
}

#[test]
fn the_guide_lists_every_dependency_between_crates_and_no_other() {
    let (crates, listed) = readme_edges();
    let actual = manifest_edges(&crates);
    let missing: Vec<_> = actual.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&actual).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "in the manifests, not the guide: {missing:?}; in the guide, not the manifests: {extra:?}"
    );
}

#[test]
fn every_library_crate_is_listed() {
    let (crates, _) = readme_edges();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "xskit-tests" && name != "xskit-bpf-build" {
            assert!(crates.contains(&name), "{name} is not in the guide's list");
        }
    }
}
