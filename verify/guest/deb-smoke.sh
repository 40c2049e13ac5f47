#!/bin/sh
# krcore's package installed, loaded, used and purged in a guest as a site would, in a
# writable overlay over the guest's (read-only) root. The guest boots without krcore.
#
#   deb-smoke.sh DEB MODULES_DIR
#
# MODULES_DIR holds the stock kernel's own modules the guest loaded at boot (the
# package's modprobe resolves krcore's dependencies against them, as an installed
# linux-modules package would give it).
set -eu
deb=$(realpath "$1")
mods=$(realpath "$2")
rel=$(uname -r)
say() { echo "[deb] $*"; }
die() { echo "[deb] FAILED: $*"; exit 1; }

ov=/run/krcore/overlay
mkdir -p "$ov/upper" "$ov/work" "$ov/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$ov/upper,workdir=$ov/work" "$ov/root" \
  || die "overlay over the guest root"
for d in proc sys dev run/krcore/tmp; do mount --bind "/$d" "$ov/root/$d"; done
in_root() { chroot "$ov/root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

# The kernel's own modules where its package puts them.
mkdir -p "$ov/root/lib/modules/$rel/kernel"
cp "$mods"/*.ko "$ov/root/lib/modules/$rel/kernel/"
grep -q '^krcore ' /proc/modules && die "krcore is loaded before the package is installed"

say "installing $(basename "$deb")"
in_root dpkg -i "$deb"
in_root dpkg -s "krcore-$rel" | grep -q '^Status: install ok installed' || die "not installed"
[ -f "$ov/root/lib/modules/$rel/updates/krcore.ko" ] || die "no module under updates/"
in_root modinfo -F vermagic krcore | grep -q "^$rel " || die "modinfo does not find krcore for $rel"

# The key, as the site writes it: a root-only file modprobe reads.
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
printf 'options krcore cluster_key=%s\n' "$key" >"$ov/root/etc/modprobe.d/krcore-key.conf"
chmod 0600 "$ov/root/etc/modprobe.d/krcore-key.conf"
# Loaded as systemd-modules-load does at boot: the names in modules-load.d, by modprobe.
for m in $(grep -hv '^#' "$ov/root/usr/lib/modules-load.d/krcore.conf"); do
  in_root modprobe "$m"
done
grep -q '^krcore ' /proc/modules || die "modprobe did not load krcore"
mode=$(stat -c %a /dev/krcore)
[ "$mode" = 660 ] || die "/dev/krcore has mode $mode, not the package's dev_mode=0660"
[ "$(cat /sys/module/krcore/parameters/cluster_key 2>/dev/null)" = "$key" ] \
  || die "the key did not reach the module"
[ "$(stat -c %a /sys/module/krcore/parameters/cluster_key)" = 400 ] \
  || die "the key's parameter file is readable by others than root"
# The udev rule, as udev would apply it (no udevd runs in the guest).
in_root udevadm test --action=add /sys/class/misc/krcore 2>&1 | grep -q 'GROUP.*krcore\|krcore.*GROUP\|group.*krcore' \
  || { in_root udevadm test --action=add /sys/class/misc/krcore 2>&1 | tail -20; die "the udev rule does not give /dev/krcore to group krcore"; }
in_root getent group krcore >/dev/null || die "no group krcore"

say "using it: krcore devices, and a READ"
in_root /usr/bin/krcore devices
in_root "$PWD/target/release/examples/read_write"

say "purging it"
in_root dpkg --purge "krcore-$rel"
grep -q '^krcore ' /proc/modules && die "krcore still loaded after the purge"
[ ! -e "$ov/root/lib/modules/$rel/updates/krcore.ko" ] || die "the module is still installed"
[ ! -e "$ov/root/usr/bin/krcore" ] || die "the tool is still installed"
[ ! -e "$ov/root/etc/modprobe.d/krcore.conf" ] || die "the purge left its parameters file"
in_root getent group krcore >/dev/null && die "the purge left group krcore"
say "installed, loaded, used and purged"
