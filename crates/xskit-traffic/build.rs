//! Compiles the benchmark's drop (transmit, redirect) programs and the live-frames generator in `bpf/`.

use xskit_bpf_build::Program;

fn main() {
    xskit_bpf_build::compile(
        &[
            Program::new("xdp_count_drop", "xdp_count_drop"),
            Program::with_args("xdp_count_drop_frags", "xdp_count_drop", &["-DXSKIT_FRAGS"]),
            Program::with_args("xdp_count_tx", "xdp_count_drop", &["-DXSKIT_TX"]),
            Program::with_args(
                "xdp_count_redirect",
                "xdp_count_drop",
                &["-DXSKIT_REDIRECT"],
            ),
            Program::with_args(
                "xdp_count_src_port",
                "xdp_count_drop",
                &["-DXSKIT_SRC_PORT"],
            ),
            Program::new("xdp_live_redirect", "xdp_live_redirect"),
        ],
        &[],
    );
}
