#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 30), one after the other, from the seeds in
# fuzz/seeds/<target> (never changed: new inputs go to a scratch corpus that is removed).
# A crash stops the run with libFuzzer's report; the input is kept in fuzz/artifacts/<target>/
# (reproduce with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...`).
#   bash fuzz/run.sh [SECONDS] [TARGET...]
# The twin_* targets run the BPF programs in the kernel and need root; without it they are
# skipped, unless XSKIT_REQUIRE_PRIVILEGES is set, which makes that a failure.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-30}"
shift || true
case "$secs" in '' | *[!0-9]*)
    echo "usage: $0 [SECONDS] [TARGET...]" >&2
    exit 2
    ;;
esac
cargo +nightly fuzz build -O
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
    if [[ "$t" == twin_* && "$(id -u)" -ne 0 ]]; then
        if [ -n "${XSKIT_REQUIRE_PRIVILEGES:-}" ]; then
            echo "fuzz: $t needs root (it runs BPF programs in the kernel)" >&2
            exit 1
        fi
        echo "fuzz: $t skipped: it needs root"
        continue
    fi
    mkdir -p "$scratch/$t"
    if ! cargo +nightly fuzz run -O "$t" "$scratch/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
        >"$scratch/$t.log" 2>&1; then
        echo "fuzz: $t FAILED" >&2
        tail -n 60 "$scratch/$t.log" >&2
        exit 1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t ran ${secs} s without a crash ($runs inputs)"
done
