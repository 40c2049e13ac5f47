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
for d in proc sys dev run/krcore/tmp; do mkdir -p "$ov/root/$d" && mount --bind "/$d" "$ov/root/$d"; done
in_root() { chroot "$ov/root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

# The booted kernel as its packages would leave it: its modules where they put them, and
# an empty package of its name, since this root (the host's) does not carry them.
mkdir -p "$ov/root/lib/modules/$rel/kernel"
cp "$mods"/*.ko "$ov/root/lib/modules/$rel/kernel/"
stub=/run/krcore/tmp/stub
mkdir -p "$stub/DEBIAN"
printf 'Package: linux-binary-%s\nVersion: 0\nArchitecture: amd64\nMaintainer: krcore tests <krcore@localhost>\nDescription: the booted kernel, which this root does not carry\n' \
  "$rel" >"$stub/DEBIAN/control"
in_root dpkg-deb --build "$stub" /run/krcore/tmp/stub.deb >/dev/null
in_root dpkg -i /run/krcore/tmp/stub.deb >/dev/null
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
! grep -qs "$key" /proc/[0-9]*/cmdline || die "the key is on a command line"
mode=$(stat -c %a /dev/krcore)
[ "$mode" = 660 ] || die "/dev/krcore has mode $mode, not the package's dev_mode=0660"
[ "$(cat /sys/module/krcore/parameters/cluster_key 2>/dev/null)" = "$key" ] \
  || die "the key did not reach the module"
[ "$(stat -c %a /sys/module/krcore/parameters/cluster_key)" = 400 ] \
  || die "the key's parameter file is readable by others than root"
# The module a site loads has no test knobs (shim.h's KRCORE_TEST_PARAM).
knobs=$(cd /sys/module/krcore/parameters && ls | grep -E '^(test_|cm_dial_delay_ms$)' || true)
[ -z "$knobs" ] || die "the packaged module has test knobs: $(echo $knobs)"
# The udev rule, as udev would apply it (no udevd runs in the guest).
rule=$(in_root udevadm test --action=add /sys/class/misc/krcore 2>&1 | grep '60-krcore.rules' || true)
echo "$rule"
echo "$rule" | grep -q 'GROUP' && echo "$rule" | grep -q 'MODE' \
  || die "udev does not apply the package's rule (GROUP and MODE) to /dev/krcore"
[ "$(stat -c %G /dev/krcore)" = krcore ] || echo "[deb] (no udevd here: udevadm test shows the rule, nothing applies it)" 
in_root getent group krcore >/dev/null || die "no group krcore"

say "using it: krcore devices, and a READ"
in_root /usr/bin/krcore devices
in_root "$PWD/target/release/examples/read_write"

say "purging it"
# dpkg keeps /lib/modules/RELEASE, which holds the kernel's modules this test put there.
out=$(in_root dpkg --purge "krcore-$rel" 2>&1) || { echo "$out"; die "dpkg --purge failed"; }
echo "$out" | grep -v 'not empty so not removed'
grep -q '^krcore ' /proc/modules && die "krcore still loaded after the purge"
[ ! -e "$ov/root/lib/modules/$rel/updates/krcore.ko" ] || die "the module is still installed"
[ ! -e "$ov/root/usr/bin/krcore" ] || die "the tool is still installed"
[ ! -e "$ov/root/etc/modprobe.d/krcore.conf" ] || die "the purge left its parameters file"
in_root getent group krcore >/dev/null && die "the purge left group krcore"
say "installed, loaded, used and purged"
