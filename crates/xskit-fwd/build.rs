//! Compiles the kernel filter in `bpf/`, with the header of its interface with user space
//! (limits, actions, counter slots, tx settings) written from `src/abi.rs`, the one place
//! they are defined.

use xskit_bpf_build::Program;

#[path = "src/abi.rs"]
#[allow(unreachable_pub, dead_code, missing_docs)]
mod abi;

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("xdp_filter_abi.h"), abi::c_header())
        .expect("writing xdp_filter_abi.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/abi.rs");
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
    let abi = format!("-I{}", out.display());
    let frags = [
        include.as_str(),
        capture.as_str(),
        abi.as_str(),
        "-DXSKIT_FRAGS",
    ];
    xskit_bpf_build::compile(
        &[
            Program::with_args("xdp_filter", "xdp_filter", &frags[..3]),
            Program::with_args("xdp_filter_frags", "xdp_filter", &frags),
        ],
        &[],
    );
}
