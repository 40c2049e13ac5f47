#!/usr/bin/env bash
# Builds krcore's module as it was before issue 10 (one device-wide mutex on every enter,
# completion and connect; waits that spin), against the current test kernel, for the
# before/after figures of `make bench`. Prints the module's path on stdout, or nothing
# when the baseline commit is not in this clone (a shallow one): the bench then skips
# the "before" figures and says so. Cached beside the kernel, keyed by the commit and
# the kernel's own key; progress and build output go to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# The last commit before issue 10's work (issue 9 done, the device mutex in place).
base=43d3d47ce1421f5f64b71af7cb681646c8a2b43e
kdir=$("$here/scripts/kernel.sh" dir)
out="$(dirname "$kdir")/baseline-${base:0:12}-$(basename "$kdir")"
ko="$out/kmod/krcore.ko"

if [ -f "$ko" ]; then
  echo "$ko"
  exit 0
fi
if ! git -C "$here" cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "[baseline] commit ${base:0:12} is not in this clone (shallow?): no before figures" >&2
  exit 0
fi
echo "[baseline] building the module at ${base:0:12} (before per-ring locks) against $kdir" >&2
rm -rf "$out"
mkdir -p "$out"
git -C "$here" archive "$base" kmod abi | tar -x -C "$out"
make -s -C "$kdir" M="$out/kmod" LLVM=1 modules >&2
echo "$ko"
