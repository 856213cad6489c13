//! The crate's runnable examples, run: each checks what it prints.

#[path = "../examples/parse_frame.rs"]
mod parse_frame;

#[test]
fn the_parse_frame_example_runs() {
    parse_frame::main().unwrap();
}
