//! Compiles the program that runs `bpf/xskit_bond.h`'s hash over a frame (for the tests that
//! hold it to the Rust one), the header's example (the bond reflector), and the bond's
//! XDP_DROP program for the benchmark.

use xskit_bpf_build::Program;

fn main() {
    println!("cargo:rerun-if-changed=bpf/xskit_bond.h");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    // For dependents' build scripts (DEP_XSKIT_BOND_INCLUDE): where the header is.
    println!("cargo:include={dir}/bpf");
    xskit_bpf_build::compile(
        &[
            Program::new("xskit_bond_hash", "xskit_bond_hash"),
            Program::new("xdp_bond_reflect", "xdp_bond_reflect"),
            Program::new("xdp_bond_drop", "xdp_bond_drop"),
        ],
        &[],
    );
}
