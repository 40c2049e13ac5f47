#!/usr/bin/env bash
# Debian's own kernel, unmodified: krcore built for it and the test bed booting it.
#
#   scripts/stock-kernel.sh release    the kernel release used (kernel/stock.release, or
#                                      the newest 7.x backports offers, with a warning)
#   scripts/stock-kernel.sh dir        its cache directory (vmlinuz, config,
#                                      Module.symvers, initrd-modules/)
#   scripts/stock-kernel.sh prepare    fetch its packages, make the build root, prepare
#                                      the kernel's Rust crates, check the config
#   scripts/stock-kernel.sh module OUT [test]
#                                      build krcore.ko for it into OUT and check that
#                                      every symbol it needs is exported; `test`: a test
#                                      build, with the test knobs (a site's has none)
#
# Debian's headers package holds no Rust build artifacts, so a Rust module cannot be
# built from it. The kernel's own source package, configured with the package's .config
# and prepared (`make modules_prepare`) by the compiler the kernel names, gives the same
# crates: their hashes, and so the mangled names the stock vmlinux exports, come out
# identical. That compiler is Debian trixie's, so the preparation and the module's build
# run in a trixie root made by debootstrap, cached outside the clone. Nothing here builds
# a kernel.
#
# KRCORE_STOCK_RELEASE picks another release (e.g. 7.2.12+deb13-amd64); KRCORE_CACHE the
# cache (default ~/.cache/krcore).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# debootstrap, chroot and a private mount namespace need root: a user's call runs as
# root through sudo, and what it writes into the clone is handed back to that user.
if [ "$(id -u)" != 0 ] && [ "${1:-}" != release ] && [ "${1:-}" != dir ]; then
  exec sudo --preserve-env=KRCORE_CACHE,KRCORE_STOCK_RELEASE,KRCORE_DEBIAN_MIRROR \
    KRCORE_CACHE="${KRCORE_CACHE:-$HOME/.cache/krcore}" "$0" "$@"
fi
cache_root="${KRCORE_CACHE:-$HOME/.cache/krcore}"
stock_root="$cache_root/stock"
mirror="${KRCORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The release this tree was last tested on.
tested=$(cat "$here/kernel/stock.release")
# What the build root holds: the compilers Debian's kernel names (rustc, bindgen, gcc-14),
# pahole (without it olddefconfig drops BTF and sched_ext, and the bindings would describe
# other layouts) and the kernel build's tools.
root_packages=rustc,rust-src,bindgen,libclang-dev,gcc-14,make,flex,bison,bc,libelf-dev,libssl-dev,xz-utils,cpio,kmod,python3,dwarves
root_key=$(echo "trixie $root_packages" | sha256sum | cut -c1-12)
root="$cache_root/build-root-trixie-$root_key"
# The guest's modules, loaded by /init in this order's dependency closure: the virtio NIC
# and the 9p host root, rxe and the verbs and rdma_cm user interfaces, veth for the
# one-guest network, overlay for the package's test (a writable root over the 9p one).
initrd_wanted=(virtio_net 9pnet_virtio 9p veth overlay rdma_rxe ib_uverbs rdma_ucm)

say() { echo "[stock] $*" >&2; }
die() { echo "stock-kernel.sh: $*" >&2; exit 1; }

# apt on trixie(-backports) with its own sources and state, leaving the machine's alone.
aptdir="$stock_root/apt"
apt_opts=(-o "Dir::Etc::SourceList=$aptdir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache"
  -o Dir::State::status=/dev/null -o APT::Architecture=amd64 -o Debug::NoLocking=1
  -o APT::Sandbox::User=root)
apt_update() {
  [ -n "${apt_updated:-}" ] && return
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
  cat >"$aptdir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie-backports main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
EOF
  [ -f /usr/share/keyrings/debian-archive-trixie-stable.gpg ] \
    || die "Debian's trixie archive key is missing: install a current debian-archive-keyring"
  say "reading trixie-backports' package lists"
  apt-get -qq "${apt_opts[@]}" update >/dev/null \
    || die "apt could not read $mirror trixie-backports (network?)"
  apt_updated=1
}
apt_version() { apt-cache "${apt_opts[@]}" show "$1" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1; }

# The release to use: the tested one while it is ready here or offered, else the newest
# 7.x with a warning (backports drops old versions).
release() {
  if [ -n "${KRCORE_STOCK_RELEASE:-}" ]; then echo "$KRCORE_STOCK_RELEASE"; return; fi
  if [ -f "$stock_root/$tested/.ready" ]; then echo "$tested"; return; fi
  if [ -f "$stock_root/fallback" ] && [ -f "$stock_root/$(cat "$stock_root/fallback")/.ready" ]; then
    cat "$stock_root/fallback"; return
  fi
  apt_update
  if [ -n "$(apt_version "linux-binary-$tested")" ]; then echo "$tested"; return; fi
  local newest
  newest=$(apt-cache "${apt_opts[@]}" pkgnames linux-binary-7 \
    | sed -n 's/^linux-binary-\(7\.[0-9]*\.[0-9]*+deb13-amd64\)$/\1/p' | sort -V | tail -1)
  [ -n "$newest" ] || die "trixie-backports offers no linux-binary-7.*+deb13-amd64 (tested: $tested)"
  say "WARNING: $tested, the release this tree was tested on, is no longer offered; using the newest, $newest"
  mkdir -p "$stock_root"
  echo "$newest" >"$stock_root/fallback"
  echo "$newest"
}

# Reads the package lists here, not in release's subshell, when nothing is ready yet.
apt_update_if_unready() {
  [ -n "${KRCORE_STOCK_RELEASE:-}" ] || [ -f "$stock_root/$tested/.ready" ] || apt_update
}

# The release without reading package lists: the one prepared here, else the tested one
# (which `prepare` may yet replace by the newest; make expands `dir` after `prepare`).
release_here() {
  if [ -n "${KRCORE_STOCK_RELEASE:-}" ]; then echo "$KRCORE_STOCK_RELEASE"; return; fi
  if [ ! -f "$stock_root/$tested/.ready" ] && [ -f "$stock_root/fallback" ] \
     && [ -f "$stock_root/$(cat "$stock_root/fallback")/.ready" ]; then
    cat "$stock_root/fallback"; return
  fi
  echo "$tested"
}

# Runs a command in the build root, in a private mount namespace (its /proc and /dev go
# when it ends, however it ends), without the calling make's flags: an outer `make -s`
# would silence the kernel build's own lines, an outer -j hand it a jobserver.
in_root() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
    unshare --mount --propagation private -- /bin/sh -c '
      r=$1; shift
      mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" || exit 1
      exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
    ' sh "$root" "$@"
}

make_root() {
  [ -f "$root/.krcore-ready" ] && return
  command -v debootstrap >/dev/null || die "debootstrap is missing: run 'make deps'"
  say "making the build root (Debian trixie: rustc, bindgen, gcc-14, pahole; a few minutes): $root"
  rm -rf "$root.tmp"
  debootstrap --variant=minbase --include="$root_packages" trixie "$root.tmp" "$mirror" \
    >"$cache_root/debootstrap.log" 2>&1 \
    || { tail -20 "$cache_root/debootstrap.log" >&2; die "debootstrap failed (log: $cache_root/debootstrap.log)"; }
  mv "$root.tmp" "$root"
  touch "$root/.krcore-ready"
}

# The value of a string option in a .config, without its quotes.
config_text() { sed -n "s/^$1=\"\(.*\)\"$/\1/p" "$2"; }

# Whether release $1 is prepared in $2, with the guest modules this script names (they
# are made again from the kept modules package when the list changed).
prepared() {
  [ -f "$2/.ready" ] && [ -f "$root$(cat "$2/tree")/Module.symvers" ] || return 1
  if [ "$(cat "$2/initrd-modules/wanted" 2>/dev/null)" != "${initrd_wanted[*]}" ]; then
    say "the guest's module list changed: making it again"
    initrd_modules "$1" "$2"
  fi
  say "prepared: Linux $1 ($2)"
}

prepare() {
  local rel d
  apt_update_if_unready
  rel=$(release)
  d="$stock_root/$rel"
  prepared "$rel" "$d" && return
  mkdir -p "$stock_root"
  exec 8>"$stock_root/.lock"
  flock 8
  prepared "$rel" "$d" && return
  local start
  start=$(date +%s)
  apt_update
  local bin_version src_pkg src_version
  bin_version=$(apt_version "linux-binary-$rel")
  [ -n "$bin_version" ] || die "linux-binary-$rel is not offered by trixie-backports"
  src_pkg="linux-source-${rel%.*+*}"
  src_version=$(apt_version "$src_pkg")
  [ -n "$src_version" ] || die "$src_pkg, the source of $rel, is not offered: without it no Rust module can be built for this kernel"
  [ "$src_version" = "$bin_version" ] \
    || die "$src_pkg is at $src_version, the kernel at $bin_version: the crates would not match"
  rm -rf "$d"
  mkdir -p "$d/debs"
  say "fetching Linux $rel ($bin_version): image, modules, headers, source"
  (cd "$d/debs" && apt-get -qq "${apt_opts[@]}" download \
    "linux-binary-$rel=$bin_version" "linux-modules-$rel=$bin_version" \
    "linux-headers-$rel=$bin_version" "$src_pkg=$src_version" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  local x="$d/x"
  mkdir -p "$x"
  for deb in "$d"/debs/linux-binary-*.deb "$d"/debs/linux-headers-*.deb; do dpkg-deb -x "$deb" "$x"; done
  cp "$x/usr/lib/modules/$rel/vmlinuz" "$d/vmlinuz"
  local h="$x/usr/src/linux-headers-$rel"
  cp "$h/.config" "$d/config"
  cp "$h/Module.symvers" "$d/Module.symvers"
  grep -q '^CONFIG_RUST=y' "$d/config" \
    || die "Linux $rel was built without Rust (CONFIG_RUST is not set): krcore needs a kernel built with CONFIG_RUST=y"
  grep -q "override KERNELRELEASE = $rel" "$h/.kernelvariables" \
    || die "the headers' .kernelvariables do not name $rel"

  make_root
  # The compilers the kernel names must be the root's, or the crates' metadata, the
  # mangled names and the C layouts would differ from the running kernel's.
  local want have
  for tool in "RUSTC_VERSION_TEXT:rustc --version" "BINDGEN_VERSION_TEXT:bindgen --version" \
              "CC_VERSION_TEXT:x86_64-linux-gnu-gcc-14 --version"; do
    want=$(config_text "CONFIG_${tool%%:*}" "$d/config")
    have=$(in_root ${tool#*:} 2>/dev/null | head -1)
    [ "$want" = "$have" ] || die "Linux $rel was built by '$want', the build root has '$have': make the root with the compiler of the kernel's own release (delete $root to remake it)"
  done

  local tree_rel="/srv/krcore/linux-$rel" tree="$root/srv/krcore/linux-$rel"
  say "unpacking $src_pkg into the build root (about a minute)"
  rm -rf "$tree"
  mkdir -p "$tree"
  dpkg-deb --fsys-tarfile "$d"/debs/"$src_pkg"_*.deb | tar -xO --wildcards '*/linux-source-*.tar.xz' \
    | tar -xJ -C "$tree" --strip-components=1
  cp "$d/config" "$tree/.config"
  local kmake=(make -C "$tree_rel" CC=x86_64-linux-gnu-gcc-14 HOSTCC=x86_64-linux-gnu-gcc-14 KERNELRELEASE="$rel")
  in_root "${kmake[@]}" -s olddefconfig >/dev/null
  # The prepared config must be the stock one. OPENSSL_SUPPORTS_ML_DSA says what the
  # build host's openssl can sign with, nothing about the kernel's layout.
  local diffs
  diffs=$(diff <(grep -v -e '^#' -e '^$' -e OPENSSL_SUPPORTS_ML_DSA "$d/config" | sort) \
               <(grep -v -e '^#' -e '^$' -e OPENSSL_SUPPORTS_ML_DSA "$tree/.config" | sort) || true)
  [ -z "$diffs" ] || { echo "$diffs" | head -20 >&2; die "olddefconfig changed the stock config (above: < stock, > prepared): the generated bindings would not describe Linux $rel"; }
  say "preparing the kernel's Rust crates (make modules_prepare; about 2-4 minutes on 2 cores)"
  in_root "${kmake[@]}" -j"$(nproc)" modules_prepare >"$d/prepare.log" 2>&1 \
    || { tail -30 "$d/prepare.log" >&2; die "modules_prepare failed (log: $d/prepare.log)"; }
  cp "$d/Module.symvers" "$tree/Module.symvers"

  mkdir -p "$d/modules-deb"
  mv "$d"/debs/linux-modules-*.deb "$d/modules-deb/"
  initrd_modules "$rel" "$d"
  rm -rf "$x" "$d/debs"
  echo "$tree_rel" >"$d/tree"
  touch "$d/.ready"
  say "prepared Linux $rel in $(( $(date +%s) - start ))s: $d"
}

# The guest's modules: the closure of $initrd_wanted under modules.dep, uncompressed,
# with the order to load them in (dependencies first).
initrd_modules() {
  local rel=$1 d=$2 m="$d/x/usr/lib/modules/$1"
  rm -rf "$d/initrd-modules" "$d/x/usr/lib/modules"
  dpkg-deb -x "$d"/modules-deb/linux-modules-*.deb "$d/x"
  # The package's modules.dep is made by depmod at installation.
  depmod -b "$d/x/usr" "$rel" 2>/dev/null || die "depmod failed on Linux $rel's modules"
  mkdir -p "$d/initrd-modules"
  python3 - "$m/modules.dep" "$d/initrd-modules" "${initrd_wanted[@]}" <<'EOF'
import os, sys, lzma
dep_file, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
deps = {}
for line in open(dep_file):
    path, _, rest = line.partition(":")
    deps[path] = rest.split()
by_name = {os.path.basename(p).split(".ko")[0].replace("-", "_"): p for p in deps}
order, seen = [], set()
def visit(p):
    if p in seen:
        return
    seen.add(p)
    for q in deps[p]:
        visit(q)
    order.append(p)
for w in wanted:
    if w not in by_name:
        sys.exit(f"module {w} is not in this kernel's modules.dep")
    visit(by_name[w])
base = os.path.dirname(dep_file)
names = []
for p in order:
    name = os.path.basename(p).split(".ko")[0] + ".ko"
    data = open(os.path.join(base, p), "rb").read()
    if p.endswith(".xz"):
        data = lzma.decompress(data)
    open(os.path.join(out, name), "wb").write(data)
    names.append(name)
open(os.path.join(out, "order"), "w").write("\n".join(names) + "\n")
EOF
  echo "${initrd_wanted[*]}" >"$d/initrd-modules/wanted"
  rm -rf "$d/x/usr/lib/modules"
}

# Builds the module from this tree's kmod/ and abi/ in the build root, and checks its
# undefined symbols against the stock Module.symvers.
# The module for the stock kernel, to OUT; with `test`, a test build (its test knobs,
# Kbuild's KRCORE_TEST_KNOBS), in a build directory of its own.
module() {
  local out=$1 kind=${2:-site} rel d tree_rel knobs=
  rel=$(release)
  d="$stock_root/$rel"
  [ -f "$d/.ready" ] || die "Linux $rel is not prepared: run 'scripts/stock-kernel.sh prepare'"
  tree_rel=$(cat "$d/tree")
  # One build directory per clone, so two clones never share objects.
  local b_rel b
  b_rel="/srv/krcore/build-$(echo "$here" | sha256sum | cut -c1-12)"
  case "$kind" in
    site) ;;
    test) b_rel="$b_rel-test"; knobs=KRCORE_TEST_KNOBS=1 ;;
    *) die "a module is a site's or a test's, not '$kind'" ;;
  esac
  b="$root$b_rel"
  mkdir -p "$b/kmod" "$b/abi"
  exec 7>"$b.lock"
  flock 7
  # The sources only, mtimes kept (an unchanged module is not rebuilt); none left over
  # from an older layout.
  find "$b/kmod" \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) -delete
  (cd "$here/kmod" && find . \( -name '*.rs' -o -name '*.c' -o -name '*.h' -o -name Kbuild \) \
    -exec cp -p --parents {} "$b/kmod/" \;)
  rm -rf "$b/abi/src" && cp -pr "$here/abi/src" "$b/abi/"
  say "building krcore.ko ($kind build) for Linux $rel"
  in_root make -C "$tree_rel" M="$b_rel/kmod" CC=x86_64-linux-gnu-gcc-14 HOSTCC=x86_64-linux-gnu-gcc-14 \
    KERNELRELEASE="$rel" $knobs -j"$(nproc)" modules >"$b/build.log" 2>&1 \
    || { grep -E 'error|warning|Error| --> ' "$b/build.log" | head -40 >&2; die "the module's build failed (log: $b/build.log)"; }
  grep -E '^(warning|error)| --> ' "$b/build.log" >&2 || true
  mkdir -p "$(dirname "$out")"
  cp "$b/kmod/krcore.ko" "$out"
  [ -z "${SUDO_UID:-}" ] || chown "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$(dirname "$out")" "$out"
  local missing
  missing=$(comm -23 <(nm -u "$out" | awk '{print $2}' | sort -u) \
                     <(awk '{print $2}' "$d/Module.symvers" | sort -u) \
            | grep -v -x -e __fentry__ -e __x86_return_thunk -e __x86_indirect_thunk_.* || true)
  [ -z "$missing" ] || { echo "$missing" | head -20 >&2; die "krcore.ko needs symbols Linux $rel does not export (above)"; }
  # A site's module carries no test knob; a test build carries them.
  local knob
  knob=$(/usr/sbin/modinfo -F parm "$out" | cut -d: -f1 | grep -E '^(test_|cm_dial_delay_ms$)' || true)
  case "$kind" in
    site) [ -z "$knob" ] || die "the site's krcore.ko has test knobs: $(echo $knob)" ;;
    test) [ -n "$knob" ] || die "the test build of krcore.ko has no test knobs" ;;
  esac
  say "built $out for Linux $rel; every symbol it needs is exported"
}

case "${1:-}" in
  release) release ;;
  dir) echo "$stock_root/$(release_here)" ;;
  prepare) prepare ;;
  module) [ -n "${2:-}" ] || die "usage: stock-kernel.sh module OUT [test]"; module "$2" "${3:-site}" ;;
  *) die "usage: stock-kernel.sh release|dir|prepare|module OUT [test]" ;;
esac
