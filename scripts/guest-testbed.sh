#!/usr/bin/env bash
# Fetches what the guest testbed (crates/xskit-testbed/src/guest.rs) needs beyond Debian
# packages: its kernels, each with the modules the guest loads, decompressed, in load order
# (modules/order), and, on a release whose QEMU is older than 10, QEMU from that release's
# backports suite. Nothing is installed into /boot or /usr and the system's apt state is not
# touched. Run as root; scripts/setup.sh runs it.
#   ${XSKIT_GUEST_DIR:-/var/cache/xskit/guest}        Debian 12's 6.12: the bonding reference
#   ${XSKIT_GUEST_ZC_DIR:-/var/cache/xskit/guest-zc}  the newest Linux 7.x of Debian's
#       trixie-backports suite, whose virtio_net does AF_XDP zero-copy
#   ${XSKIT_GUEST_QEMU_DIR:-/var/cache/xskit/qemu}    QEMU from backports (Debian 12's 7.2
#       completes some of a zero-copy guest's transmits without sending them, at random)
# What is already there is kept.
set -euo pipefail
bond_dir="${XSKIT_GUEST_DIR:-/var/cache/xskit/guest}"
zc_dir="${XSKIT_GUEST_ZC_DIR:-/var/cache/xskit/guest-zc}"
qemu_dir="${XSKIT_GUEST_QEMU_DIR:-/var/cache/xskit/qemu}"

# Dependencies first: virtio_net needs net_failover and failover, 9p needs 9pnet, which needs
# netfs, bonding needs tls.
modules=(net/core/failover drivers/net/net_failover drivers/net/virtio_net fs/netfs/netfs
    net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p net/tls/tls drivers/net/bonding/bonding
    drivers/net/veth)

have() { [ -f "$1/vmlinuz" ] && [ -f "$1/modules/order" ]; }

# install DIR VMLINUZ MODULE_ROOT RELEASE: vmlinuz and the modules into DIR, atomically.
install_kernel() {
    local dir=$1 vmlinuz=$2 root=$3 release=$4
    rm -rf "$dir.new"
    mkdir -p "$dir.new/modules"
    cp "$vmlinuz" "$dir.new/vmlinuz"
    : >"$dir.new/modules/order"
    for m in "${modules[@]}"; do
        name=$(basename "$m").ko
        xz -dc "$root/$m.ko.xz" >"$dir.new/modules/$name"
        echo "$name" >>"$dir.new/modules/order"
    done
    echo "$release" >"$dir.new/release"
    rm -rf "$dir"
    mv "$dir.new" "$dir"
}

fetch_bonding_kernel() {
    find_package() {
        apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' |
            awk '{print $1}' | sort -V | tail -1
    }
    local pkg
    pkg=$(find_package)
    if [ -z "$pkg" ]; then
        apt-get update -qq
        pkg=$(find_package)
    fi
    if [ -z "$pkg" ]; then
        echo "guest-testbed: no linux-image-6.12.*+deb12-amd64 package in the apt sources" >&2
        exit 1
    fi
    echo "xskit setup: fetching $pkg for the guest testbed"
    (cd "$tmp" && apt-get download -q "$pkg" 2>/dev/null)
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/bond"
    local release
    release=$(ls "$tmp/bond/lib/modules")
    install_kernel "$bond_dir" "$tmp/bond/boot/vmlinuz-$release" \
        "$tmp/bond/lib/modules/$release/kernel" "$release"
}

# The Debian mirror this machine already uses (its main suite), so that no host name is
# written here.
debian_mirror() {
    apt-cache policy | awk '$3 ~ /^[a-z]+\/main$/ && $2 ~ /^https?:/ {print $2; exit}'
}

# private_apt SUITE: sets `opts` to apt options reading only SUITE of this machine's Debian
# mirror, with lists and cache under $tmp, and reads the suite's lists.
private_apt() {
    local mirror
    mirror=$(debian_mirror)
    if [ -z "$mirror" ]; then
        echo "guest-testbed: no Debian mirror in the apt sources (apt-cache policy)" >&2
        exit 1
    fi
    local apt="$tmp/apt-$1"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $1 main" \
        >"$apt/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
        -o "Debug::NoDropPrivs=1" -o "APT::Sandbox::User=root")
    apt-get "${opts[@]}" update -qq
    mirror_used=$mirror
}

fetch_zero_copy_kernel() {
    local opts mirror_used
    private_apt trixie-backports
    local version
    version=$(apt-cache "${opts[@]}" search --names-only '^linux-binary-7\.[0-9.]+\+deb13-amd64$' |
        awk '{print $1}' | sort -V | tail -1)
    version=${version#linux-binary-}
    if [ -z "$version" ]; then
        echo "guest-testbed: no linux-binary-7.*+deb13-amd64 in $mirror_used trixie-backports" >&2
        exit 1
    fi
    echo "xskit setup: fetching Linux $version (trixie-backports) for the zero-copy guest"
    mkdir -p "$tmp/zc-debs"
    (cd "$tmp/zc-debs" && apt-get "${opts[@]}" download -q "linux-binary-$version" \
        "linux-modules-$version" 2>/dev/null)
    for deb in "$tmp"/zc-debs/*.deb; do
        dpkg-deb -x "$deb" "$tmp/zc"
    done
    local root="$tmp/zc/usr/lib/modules/$version"
    install_kernel "$zc_dir" "$root/vmlinuz" "$root/kernel" "$version"
}

# The major version of the system's QEMU, 0 when there is none.
system_qemu_major() {
    qemu-system-x86_64 --version 2>/dev/null | awk 'NR == 1 {split($4, v, "."); print v[1] + 0}' |
        grep . || echo 0
}

# QEMU from this release's backports suite, unpacked into $qemu_dir: the emulator, its data
# and the SeaBIOS it expects (the system's iPXE option ROMs serve it as they are).
fetch_qemu() {
    local opts mirror_used codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ -z "$codename" ]; then
        echo "guest-testbed: QEMU $(system_qemu_major) is older than 10 and /etc/os-release names no release to find backports for" >&2
        exit 1
    fi
    private_apt "$codename-backports"
    local pkgs=(qemu-system-x86 qemu-system-data seabios)
    echo "xskit setup: fetching QEMU from $codename-backports for the guest testbed"
    mkdir -p "$tmp/qemu-debs"
    if ! (cd "$tmp/qemu-debs" && apt-get "${opts[@]}" download -q "${pkgs[@]}" 2>/dev/null); then
        echo "guest-testbed: no ${pkgs[*]} in $mirror_used $codename-backports" >&2
        exit 1
    fi
    rm -rf "$qemu_dir.new"
    for deb in "$tmp"/qemu-debs/*.deb; do
        dpkg-deb -x "$deb" "$qemu_dir.new"
    done
    "$qemu_dir.new/usr/bin/qemu-system-x86_64" --version | head -1 >"$qemu_dir.new/version"
    rm -rf "$qemu_dir"
    mv "$qemu_dir.new" "$qemu_dir"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have "$bond_dir" || fetch_bonding_kernel
have "$zc_dir" || fetch_zero_copy_kernel
if [ "$(system_qemu_major)" -lt 10 ] && ! [ -x "$qemu_dir/usr/bin/qemu-system-x86_64" ]; then
    fetch_qemu
fi
