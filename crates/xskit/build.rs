//! Compiles the BPF programs in `bpf/` with clang so they can be embedded in the library.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// (object name, source file, extra clang arguments)
const PROGRAMS: &[(&str, &str, &[&str])] = &[
    ("xsk_redirect", "xsk_redirect", &[]),
    ("xsk_redirect_frags", "xsk_redirect", &["-DXSKIT_FRAGS"]),
    ("xdp_count_drop", "xdp_count_drop", &[]),
    ("xdp_count_drop_frags", "xdp_count_drop", &["-DXSKIT_FRAGS"]),
    ("xdp_live_redirect", "xdp_live_redirect", &[]),
    ("xdp_filter", "xdp_filter", &[]),
    ("xdp_filter_frags", "xdp_filter", &["-DXSKIT_FRAGS"]),
];

fn main() {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch_include = format!(
        "-I/usr/include/{}-linux-gnu",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    for (name, source, defines) in PROGRAMS {
        let src = format!("bpf/{source}.c");
        println!("cargo:rerun-if-changed={src}");
        let out = out_dir.join(format!("{name}.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-c"])
            .arg(&arch_include)
            .args(defines.iter())
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("clang failed to compile {src} ({s}); see the messages above"),
            Err(e) => panic!(
                "cannot run `{clang}` to compile {src}: {e}. Install clang and libbpf-dev \
                 (the README's set-up command does) or point CLANG at a clang binary"
            ),
        }
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
