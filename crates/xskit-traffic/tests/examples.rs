//! The crate's runnable examples, run: each checks what it prints.

#[path = "../examples/probe_stream.rs"]
mod probe_stream;

#[test]
fn the_probe_stream_example_runs() {
    probe_stream::main().unwrap();
}
