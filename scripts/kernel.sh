#!/usr/bin/env bash
# Builds the krcore test kernel (Linux 6.12 from Debian's linux-source-6.12, with Rust and
# rxe) into a cache outside the clone, and reuses it when the key matches.
#
#   scripts/kernel.sh dir [VARIANT]     print the cache directory for the current key
#   scripts/kernel.sh build [VARIANT]   build it unless already built; prints progress
#
# VARIANT is `normal` (the default: kernel/krcore.config) or `debug` (that fragment plus
# kernel/debug.config: lockdep, sleep-in-atomic checks, KASAN; the suite runs on both).
# The key covers everything that changes the built tree: the kernel version, the config
# fragments, this script, and the rustc/clang versions (a Rust module must be built by the
# same rustc as the kernel it loads into).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
variant="${2:-normal}"
case "$variant" in
  normal) fragments=("$here/kernel/krcore.config"); suffix="" ;;
  debug) fragments=("$here/kernel/krcore.config" "$here/kernel/debug.config"); suffix="-debug" ;;
  *) echo "kernel.sh: unknown variant '$variant' (normal or debug)" >&2; exit 1 ;;
esac
tarball=/usr/src/linux-source-6.12.tar.xz
cache_root="${KRCORE_CACHE:-$HOME/.cache/krcore}"

die() { echo "kernel.sh: $*" >&2; exit 1; }

[ -f "$tarball" ] || die "$tarball is missing; run 'make deps' (Debian package linux-source-6.12)"

version=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || echo unknown)
key=$( { cat "${fragments[@]}" "$0"; echo "$version"; rustc --version; clang --version | head -1; } \
       | sha256sum | cut -c1-12)
dir="$cache_root/linux-$version$suffix-$key"

case "${1:-build}" in
  dir) echo "$dir"; exit 0 ;;
  build) ;;
  *) die "usage: kernel.sh dir|build [normal|debug]" ;;
esac

if [ -f "$dir/.krcore-built" ]; then
  echo "[kernel] cached: $dir"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
[ -f "$dir/.krcore-built" ] && { echo "[kernel] cached: $dir"; exit 0; }

start=$(date +%s)
echo "[kernel] building Linux $version, $variant (key $key) into $dir"
echo "[kernel] this takes about 10-15 minutes on 2 cores; progress every 30 s"
# Built in place: a kernel tree has absolute paths baked in, so it is never moved. The
# marker file, written last, says the tree is complete.
rm -rf "$dir"
mkdir -p "$dir"
tar -xJf "$tarball" -C "$dir" --strip-components=1
cd "$dir"

mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make LLVM=1 -s "$@"; }
mk rustavailable >/dev/null || { mk rustavailable || true; die "Rust toolchain not usable for the kernel (see above); run 'make deps'"; }
mk tinyconfig >/dev/null
scripts/kconfig/merge_config.sh -m .config "${fragments[@]}" >/dev/null
mk olddefconfig >/dev/null

# Kconfig drops options whose dependencies are missing without a word: check each one.
missing=0
while IFS= read -r line; do
  case "$line" in CONFIG_*=*) ;; *) continue ;; esac
  grep -qx "$line" .config || { echo "[kernel] option not set after olddefconfig: $line" >&2; missing=1; }
done < <(cat "${fragments[@]}")
[ "$missing" = 0 ] || die "config fragment did not apply"

log="$dir/build.log"
# The build gets its own session, so an interrupted run (Ctrl-C, a killed make) ends it
# rather than leaving it orphaned with the cache lock held; the tree it leaves has no
# marker and is rebuilt next time. Its make sees none of the calling make's flags: an
# outer `make -s` would silence the step lines the progress counts, an outer -j hand it
# a jobserver it does not share.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
  setsid /bin/sh -c 'make LLVM=1 -j"$1" >"$2" 2>&1; echo $? >"$3"' sh "$(nproc)" "$log" "$dir/.rc" 9>&- &
pid=$!
trap 'kill -TERM -- -"$pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null || break
  n=$(grep -c '^  [A-Z]' "$log" || true)
  last=$({ grep '^  [A-Z]' "$log" || true; } | tail -1 | awk '{print $2}')
  echo "[kernel] $(( $(date +%s) - start ))s: ${n:-0} steps done, now at ${last:-start}"
done
wait "$pid" || true
trap - EXIT
rc=$(cat "$dir/.rc" 2>/dev/null || echo "none (killed)")
if [ "$rc" != 0 ]; then
  tail -40 "$log" >&2
  die "kernel build failed (exit $rc); full log: $log"
fi
touch .krcore-built
echo "[kernel] built in $(( $(date +%s) - start ))s: $dir/arch/x86/boot/bzImage"
