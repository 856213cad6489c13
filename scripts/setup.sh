#!/usr/bin/env bash
# Installs what a job needs on a fresh Debian machine, builds xskit, and runs the job:
#   scripts/setup.sh bench  -- the main job: xskit bench, the benchmark table on a testbed it
#                              builds itself (rxdrop/txpush/l2fwd in SKB and DRV mode, the
#                              AF_PACKET baselines and the XDP_DROP ceiling)
#   scripts/setup.sh demo   -- xskit demo: probes across a testbed, checked one by one
#   scripts/setup.sh test   -- every test (unit, doc, veth testbed and guest testbed tests;
#                              fetches the guest kernels first, scripts/guest-testbed.sh), the
#                              guide in docs/ (mdBook), then every fuzz target for 30 s
#                              (fuzz/run.sh); it alone installs the test tools and peers
# Run as root: XDP, AF_XDP and network namespaces need it.
set -euo pipefail
cd "$(dirname "$0")/.."

job="${1:-bench}"
case "$job" in bench | demo | test) ;; *)
    echo "usage: $0 bench|demo|test" >&2
    exit 2
    ;;
esac

if [ "$(id -u)" -ne 0 ]; then
    echo "xskit setup: run as root (e.g. sudo $0 $job): it installs packages and builds network namespaces" >&2
    exit 1
fi

# What building xskit and running it need (clang and the libbpf headers build the XDP programs,
# libpcap compiles dump's filters; ip, ping, taskset and ethtool build and drive the testbeds;
# the benchmark's DDoS rows measure xdp-filter, which bpftool fills, beside xskit, while the
# kernel's pings and a download from Python's HTTP server to curl cross the forwarder).
packages=(clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config linux-libc-dev libpcap-dev iproute2 iputils-ping util-linux procps ethtool ca-certificates curl python3 xdp-tools bpftool)
# What only the tests use: the peers and parsers nobody here wrote (iperf3, dpdk-testpmd, tshark,
# Prometheus's parser, libxdp's xsk.h, libcap's headers for bpf-examples' xdpsock), valgrind,
# the guest testbed (QEMU, busybox, cpio, xz, strace for what QEMU writes), g++ for libFuzzer
# and systemd-analyze for the service unit.
if [ "$job" = test ]; then
    packages+=(iperf3 valgrind systemd qemu-system-x86 busybox-static cpio xz-utils dpdk-dev tshark python3-prometheus-client libxdp-dev libcap-dev g++ strace)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "xskit setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "xskit setup: installing the Rust toolchain with rustup"
        curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
fi

# Bash completion and man pages, generated from the command's own definition.
install_docs() {
    mkdir -p /usr/share/bash-completion/completions /usr/local/share/man/man1 /usr/local/share/man/man5
    "$1" completions bash >/usr/share/bash-completion/completions/xskit
    "$1" man /usr/local/share/man/man1
    mv /usr/local/share/man/man1/xskit-rules.5 /usr/local/share/man/man5/
}

case "$job" in
bench | demo)
    # The testbed table comes with the benchmark harness, a feature the binary has only
    # when asked for.
    cargo build --release --locked --bin xskit --features bench-harness
    install_docs ./target/release/xskit
    exec ./target/release/xskit "$job"
    ;;
test)
    # The binary users install by default, without the benchmark harness, builds too.
    cargo build --locked --bin xskit
    install_docs ./target/debug/xskit
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
    # No crate keeps a dependency it does not use.
    command -v cargo-machete >/dev/null || cargo install --locked --quiet cargo-machete --version 0.9.2
    cargo machete
    # The guide in docs/ builds (a chapter missing from it is an error); its Rust snippets
    # and the README's compile as xskit-tests' doc tests.
    command -v mdbook >/dev/null || cargo install --locked --quiet mdbook --version 0.5.4 --no-default-features --features search
    mdbook build docs
    # The guest testbed's kernels (Debian 12's 6.12 for bonding, Linux 7.x for zero-copy) and,
    # where the system's QEMU is older than 10, QEMU from backports.
    bash scripts/guest-testbed.sh
    # Privileged tests fail instead of skipping when this is set.
    export XSKIT_REQUIRE_PRIVILEGES=1
    cargo test --workspace --locked --features xskit-cli/bench-harness -- --test-threads=2
    # Every fuzz target for 30 s (cargo-fuzz, which needs nightly Rust): they keep compiling
    # and running; `bash fuzz/run.sh 600` is the long run.
    # (libFuzzer itself is C++: g++ above builds it.)
    if ! command -v rustup >/dev/null; then
        echo "xskit setup: the fuzz step needs rustup for nightly Rust (https://rustup.rs)" >&2
        exit 1
    fi
    rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
    command -v cargo-fuzz >/dev/null || cargo install --locked --quiet cargo-fuzz --version 0.13.2
    cargo fmt --manifest-path fuzz/Cargo.toml -- --check
    bash fuzz/run.sh 30
    ;;
esac
