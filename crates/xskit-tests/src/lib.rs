//! Integration tests and benchmarks only: see `tests/` and `benches/`. The doc tests here
//! compile the Rust snippets of the repository's README and guide, so that they cannot rot.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct Readme;

#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library.md")]
struct GuideLibrary;

#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/pipeline.md")]
struct GuidePipeline;
