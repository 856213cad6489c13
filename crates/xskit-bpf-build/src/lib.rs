#![doc = include_str!("../README.md")]

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// One object to build: `bpf/{source}.c` compiled to `$OUT_DIR/{object}.o`.
#[derive(Clone, Copy, Debug)]
pub struct Program<'a> {
    /// The object's name (`$OUT_DIR/{object}.o`).
    pub object: &'a str,
    /// The source file's stem, under the crate's `bpf/` folder.
    pub source: &'a str,
    /// Extra clang arguments (`-D` defines for variants).
    pub args: &'a [&'a str],
}

impl<'a> Program<'a> {
    /// `bpf/{source}.c` to `{object}.o`, with no extra arguments.
    pub const fn new(object: &'a str, source: &'a str) -> Self {
        Program {
            object,
            source,
            args: &[],
        }
    }

    /// The same, compiled with `args` added.
    pub const fn with_args(object: &'a str, source: &'a str, args: &'a [&'a str]) -> Self {
        Program {
            object,
            source,
            args,
        }
    }
}

/// Compiles every program with `clang -O2 -g -target bpf -mcpu=v3` (the `CLANG` variable names
/// another clang), with `defines` (`NAME=VALUE`) passed to each: v3's 32-bit operations and
/// jumps spare the zero extensions v1 needs, fewer instructions a packet (kernels since 5.1
/// take it). Panics with what to install when clang is missing or a program does not compile:
/// a build script has no other way to fail.
pub fn compile(programs: &[Program<'_>], defines: &[(&str, &str)]) {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch_include = format!(
        "-I/usr/include/{}-linux-gnu",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    let defines: Vec<String> = defines.iter().map(|(k, v)| format!("-D{k}={v}")).collect();
    for p in programs {
        let src = format!("bpf/{}.c", p.source);
        println!("cargo:rerun-if-changed={src}");
        let out = out_dir.join(format!("{}.o", p.object));
        let status = Command::new(&clang)
            .args([
                "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3", "-c",
            ])
            .arg(&arch_include)
            .args(&defines)
            .args(p.args.iter())
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
