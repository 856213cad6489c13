#!/usr/bin/env bash
# Zero-copy against copy on virtio_net, in one run of the zero-copy guest (Linux 7.x under
# QEMU, crates/xskit-cli/tests/guest_zc_bench.rs): rxdrop, txpush and l2fwd in skb, drv and
# zc; txpush by frame size on virtio_net (copy: skbs built around the UMEM pages) and on a veth
# pair in the same guest (copy: a new skb per frame); xskit fwd in copy and zero-copy. Three
# interleaved rounds, medians. Under TCG the rates are the emulator's: read the ratios.
#
#   sudo bash bench/guest-zc.sh [OUT.json]      # default docs/bench-guest-zc.json
#
# XSKIT_GUEST_ROUNDS=N runs N rounds instead of three; XSKIT_GUEST_CELLS="l2fwd zc,fwd zc"
# measures only the cells named (as the tables name them), for a shorter run.
#
# Needs what scripts/setup.sh test installs (QEMU, busybox, the guest kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/bench-guest-zc.json}
if [ "$(id -u)" -ne 0 ]; then
    echo "guest-zc.sh: run as root (sudo): it builds network namespaces and a guest" >&2
    exit 1
fi
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/guest-testbed.sh
XSKIT_BENCH_OUT="$(realpath -m "$out")" cargo test --release --locked -p xskit-cli \
    --test guest_zc_bench -- --ignored --nocapture --test-threads=1 2>&1 |
    grep -E '^\|' || { echo "guest-zc.sh: the run failed; run the cargo test above to see why" >&2; exit 1; }
echo "(medians of ${XSKIT_GUEST_ROUNDS:-3} rounds; $out has every round)"
