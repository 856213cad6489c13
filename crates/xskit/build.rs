//! Compiles the redirect program in `bpf/` so the library can embed it.

use xskit_bpf_build::Program;

fn main() {
    xskit_bpf_build::compile(
        &[
            Program::new("xsk_redirect", "xsk_redirect"),
            Program::with_args("xsk_redirect_frags", "xsk_redirect", &["-DXSKIT_FRAGS"]),
        ],
        &[],
    );
}
