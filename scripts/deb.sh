#!/usr/bin/env bash
# Builds krcore's Debian package for one kernel release, as a site installs it:
#
#   scripts/deb.sh KO RELEASE OUTDIR
#
# KO is krcore.ko built for RELEASE (make kmod). The package `krcore-RELEASE` holds:
#   /lib/modules/RELEASE/updates/krcore.ko   found by modprobe after depmod
#   /usr/lib/modules-load.d/krcore.conf      systemd-modules-load loads it at boot
#   /etc/modprobe.d/krcore.conf              its parameters, one file (a conffile)
#   /usr/lib/udev/rules.d/60-krcore.rules    /dev/krcore: group krcore, mode 0660
#   /usr/bin/krcore                          the tool
#   /usr/include/krcore/*.h, krcore.pc       the C header and its pkg-config file
# The cluster key is not in it: the site writes /etc/modprobe.d/krcore-key.conf, mode
# 0600 (`options krcore cluster_key=...`). modprobe reads it as root and hands the
# parameters to the kernel in the load call itself, so the key is in no command line
# and no process list; the module's parameter file is readable by root only.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ko=${1:?usage: deb.sh KO RELEASE OUTDIR}
rel=${2:?usage: deb.sh KO RELEASE OUTDIR}
out=${3:?usage: deb.sh KO RELEASE OUTDIR}
die() { echo "deb.sh: $*" >&2; exit 1; }

[ -f "$ko" ] || die "$ko is missing: run 'make kmod'"
vermagic=$(modinfo -F vermagic "$ko")
[ "${vermagic%% *}" = "$rel" ] || die "$ko was built for ${vermagic%% *}, not $rel"
tool="$here/target/release/krcore"
[ -x "$tool" ] || die "$tool is missing: run 'make host'"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/uring-lib/Cargo.toml" | head -1)
[ -n "$version" ] || die "no version in uring-lib/Cargo.toml"
pkg="krcore-$rel"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -D -m 0644 "$ko" "$stage/lib/modules/$rel/updates/krcore.ko"
install -D -m 0644 /dev/stdin "$stage/usr/lib/modules-load.d/krcore.conf" <<'EOF'
# krcore, loaded at boot by systemd-modules-load; its parameters are in
# /etc/modprobe.d/krcore.conf, the cluster key in /etc/modprobe.d/krcore-key.conf.
krcore
EOF
install -D -m 0644 /dev/stdin "$stage/etc/modprobe.d/krcore.conf" <<'EOF'
# krcore's parameters (`modinfo krcore` lists them all). Every node of a cluster sets the
# same cm_port and meta_server, and the same cluster key in krcore-key.conf beside this
# file (mode 0600, root's: `options krcore cluster_key=HEX`).
softdep krcore pre: rdma_cm
options krcore dev_mode=0660
# options krcore cm_port=18515 meta_server=10.0.0.1
EOF
install -D -m 0644 /dev/stdin "$stage/usr/lib/udev/rules.d/60-krcore.rules" <<'EOF'
# /dev/krcore for the krcore group (the module makes it 0660 with dev_mode=0660).
KERNEL=="krcore", SUBSYSTEM=="misc", GROUP="krcore", MODE="0660"
EOF
install -D -m 0755 "$tool" "$stage/usr/bin/krcore"
install -d "$stage/usr/include/krcore" "$stage/usr/lib/x86_64-linux-gnu/pkgconfig"
install -m 0644 "$here/abi/include/krcore_abi.h" "$here/abi/include/krcore_reasons.h" \
  "$here/uring-lib/c/krcore.h" "$stage/usr/include/krcore/"
sed 's|@PREFIX@|/usr|' "$here/uring-lib/c/krcore.pc.in" \
  >"$stage/usr/lib/x86_64-linux-gnu/pkgconfig/krcore.pc"

install -d "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: amd64
Maintainer: krcore developers <krcore@localhost>
Depends: kmod, linux-image-$rel | linux-binary-$rel
Recommends: rdma-core
Section: kernel
Priority: optional
Description: krcore, a microsecond-scale RDMA control plane, for Linux $rel
 The krcore kernel module (built for Debian's own $rel kernel), the krcore tool,
 and the C header and pkg-config file for programs that use /dev/krcore's rings.
EOF
echo /etc/modprobe.d/krcore.conf >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
  getent group krcore >/dev/null || addgroup --system --quiet krcore
  depmod -a "$rel" || true
  if command -v udevadm >/dev/null && [ -d /run/udev ]; then udevadm control --reload || true; fi
  [ -f /etc/modprobe.d/krcore-key.conf ] || echo "krcore: no cluster key yet; write 'options krcore cluster_key=HEX' (openssl rand -hex 32, the same on every node) to /etc/modprobe.d/krcore-key.conf, mode 0600"
fi
EOF
cat >"$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && grep -q '^krcore ' /proc/modules; then
  rmmod krcore || echo "krcore: still in use; it is unloaded at the next boot"
fi
EOF
cat >"$stage/DEBIAN/postrm" <<EOF
#!/bin/sh
set -e
case "\$1" in
  remove|purge) depmod -a "$rel" 2>/dev/null || true ;;
esac
if [ "\$1" = purge ] && getent group krcore >/dev/null; then
  delgroup --system --quiet krcore || true
fi
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
mkdir -p "$out"
deb="$out/${pkg}_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "[deb] $deb"
