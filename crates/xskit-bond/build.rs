//! Compiles the program that runs `bpf/xskit_bond.h`'s hash over a frame (for the tests that
//! hold it to the Rust one) and the header's example, the bond reflector.

use xskit_bpf_build::Program;

fn main() {
    println!("cargo:rerun-if-changed=bpf/xskit_bond.h");
    xskit_bpf_build::compile(
        &[
            Program::new("xskit_bond_hash", "xskit_bond_hash"),
            Program::new("xdp_bond_reflect", "xdp_bond_reflect"),
        ],
        &[],
    );
}
