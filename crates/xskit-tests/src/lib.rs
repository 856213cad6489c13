//! Integration tests and benchmarks only: see `tests/` and `benches/`.
