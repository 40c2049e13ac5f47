#!/usr/bin/env bash
# Installs what krcore's build and tests need on Debian 12, and nothing when it is all
# there already (so `make deps` is cheap to call from every target).
#
#   scripts/deps.sh          Debian's packages: enough for the stock kernel, the module
#                            and the programs (make demo)
#   scripts/deps.sh tools    and the cargo tools the debug kernel's build and fuzzing
#                            need (rust-src, bindgen-cli, cargo-fuzz)
set -euo pipefail

# Debian packages: the kernel source and its LLVM toolchain, QEMU, busybox for the
# initramfs, rdma-core for user-space verbs (rdma-sys) and the rxe provider, iproute2's
# `rdma` tool for the guest, python3 with venv and pip for the Python package (maturin
# comes from PyPI into its venv), gcc for the C example, openssl for the tests' keyed
# client's tags.
packages=(
  linux-source-6.12 clang lld llvm libclang-dev bc flex bison libelf-dev libssl-dev
  cpio xz-utils kmod busybox-static qemu-system-x86 iproute2 python3
  python3-venv python3-pip gcc
  rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev pkg-config
  debootstrap debian-archive-keyring udev adduser binutils openssl
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[deps] installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# make unit's lint pass.
for c in clippy rustfmt; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    echo "[deps] adding rustup component $c"
    rustup component add "$c" >/dev/null
  fi
done

[ "${1:-}" = tools ] || exit 0

# The kernel's Rust build needs the standard library's source and bindgen.
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
  echo "[deps] adding rustup component rust-src"
  rustup component add rust-src >/dev/null
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "[deps] installing cargo-fuzz 0.13.2 (a minute or two)"
  cargo install --locked --quiet cargo-fuzz --version 0.13.2
fi
if ! command -v bindgen >/dev/null 2>&1; then
  echo "[deps] installing bindgen-cli 0.73.2 (a few minutes)"
  cargo install --locked --quiet bindgen-cli --version 0.73.2
fi
