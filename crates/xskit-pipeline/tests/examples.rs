//! The crate's runnable examples, run: each checks what it prints.

#[path = "../examples/two_stages.rs"]
mod two_stages;

#[test]
fn the_two_stages_example_runs() {
    two_stages::main().unwrap();
}
