//! Compiles the kernel filter in `bpf/`, and sets its rule limit in one place for both sides:
//! the C program gets it as `-DMAX_RULES`, the Rust code as `$OUT_DIR/limits.rs`.

use xskit_bpf_build::Program;

/// Rules the kernel filter holds.
const MAX_RULES: usize = 64;

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("limits.rs"),
        format!("/// Rules the kernel filter holds at most.\npub const MAX_RULES: usize = {MAX_RULES};\n"),
    )
    .expect("writing limits.rs");
    println!("cargo:rerun-if-changed=build.rs");
    // The filter includes the bond's hashes, from wherever xskit-bond is (its build script
    // says, through `links`).
    let bond =
        std::env::var("DEP_XSKIT_BOND_INCLUDE").expect("xskit-bond says where its header is");
    println!("cargo:rerun-if-changed={bond}/xskit_bond.h");
    // And xskit's capture hook, from xskit.
    let xskit = std::env::var("DEP_XSKIT_INCLUDE").expect("xskit says where its header is");
    println!("cargo:rerun-if-changed={xskit}/xskit_capture.h");
    let include = format!("-I{bond}");
    let capture = format!("-I{xskit}");
    let frags = [include.as_str(), capture.as_str(), "-DXSKIT_FRAGS"];
    let max = MAX_RULES.to_string();
    xskit_bpf_build::compile(
        &[
            Program::with_args("xdp_filter", "xdp_filter", &frags[..2]),
            Program::with_args("xdp_filter_frags", "xdp_filter", &frags),
        ],
        &[("MAX_RULES", &max)],
    );
}
