//! Compiles the redirect program and the capture program in `bpf/` so the library can embed
//! them.

use xskit_bpf_build::Program;

fn main() {
    println!("cargo:rerun-if-changed=bpf/xskit_capture.h");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    // For dependents' build scripts (DEP_XSKIT_INCLUDE): where the capture hook's header is.
    println!("cargo:include={dir}/bpf");
    xskit_bpf_build::compile(
        &[
            Program::new("xsk_redirect", "xsk_redirect"),
            Program::with_args("xsk_redirect_frags", "xsk_redirect", &["-DXSKIT_FRAGS"]),
            Program::new("xskit_dump", "xskit_dump"),
            Program::with_args("xskit_dump_frags", "xskit_dump", &["-DXSKIT_FRAGS"]),
        ],
        &[],
    );
}
