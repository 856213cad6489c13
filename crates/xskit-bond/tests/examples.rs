//! The crate's runnable examples, run: each checks what it prints.

#[path = "../examples/hash_spread.rs"]
mod hash_spread;

#[test]
fn the_hash_spread_example_runs() {
    hash_spread::main();
}
