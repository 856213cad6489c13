#!/usr/bin/env bash
# Fetches Debian's 6.12 kernel for the guest testbed (crates/xskit-testbed/src/guest.rs) into
# ${XSKIT_GUEST_DIR:-/var/cache/xskit/guest}: vmlinuz, and the modules the guest loads,
# decompressed, in load order (modules/order). Nothing is installed into /boot. Run as root;
# scripts/setup.sh runs it. Does nothing when the kernel is already there.
set -euo pipefail
dir="${XSKIT_GUEST_DIR:-/var/cache/xskit/guest}"
if [ -f "$dir/vmlinuz" ] && [ -f "$dir/modules/order" ]; then
    exit 0
fi
# Dependencies first (as modules.dep has them): virtio_net needs net_failover and failover,
# 9p needs netfs and 9pnet, bonding needs tls.
modules=(net/core/failover drivers/net/net_failover drivers/net/virtio_net fs/netfs/netfs
    net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p net/tls/tls drivers/net/bonding/bonding
    drivers/net/veth)
find_package() {
    apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' |
        awk '{print $1}' | sort -V | tail -1
}
pkg=$(find_package)
if [ -z "$pkg" ]; then
    apt-get update -qq
    pkg=$(find_package)
fi
if [ -z "$pkg" ]; then
    echo "guest-kernel: no linux-image-6.12.*+deb12-amd64 package in the apt sources" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "xskit setup: fetching $pkg for the guest testbed"
(cd "$tmp" && apt-get download -q "$pkg" 2>/dev/null)
dpkg-deb -x "$tmp"/*.deb "$tmp/root"
release=$(ls "$tmp/root/lib/modules")
mkdir -p "$dir.new/modules"
cp "$tmp/root/boot/vmlinuz-$release" "$dir.new/vmlinuz"
: >"$dir.new/modules/order"
for m in "${modules[@]}"; do
    name=$(basename "$m").ko
    xz -dc "$tmp/root/lib/modules/$release/kernel/$m.ko.xz" >"$dir.new/modules/$name"
    echo "$name" >>"$dir.new/modules/order"
done
echo "$release" >"$dir.new/release"
rm -rf "$dir"
mv "$dir.new" "$dir"
