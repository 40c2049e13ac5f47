# krcore: one Makefile for the whole job on a fresh Debian 12 machine.
#
#   make demo    boot the test VM, load krcore, show what it sees (the main job)
#   make test    every test: unit, loom, VM integration
#   make bench   benchmarks
#
# Everything the build needs is installed by `make deps`, which the other targets call.

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

KDIR = $(shell scripts/kernel.sh dir)
BZIMAGE = $(KDIR)/arch/x86/boot/bzImage
KMOD = $(CURDIR)/kmod/krcore.ko
CARGO ?= cargo
# Guest runs: the VM runner, with the kernel and module it boots.
VM = $(CARGO) run -q --release -p verify -- vm --kernel $(BZIMAGE) --module $(KMOD)
GUEST_SUITE = $(CURDIR)/target/release/guest-suite

.PHONY: all deps kernel kmod host unit loom vm-test test demo bench clean

all: kmod host

deps:
	@scripts/deps.sh

kernel: deps
	@scripts/kernel.sh build

# The module: Rust + C shim, built against the cached kernel tree.
kmod: kernel
	@echo "[kmod] building against $(KDIR)"
	@$(MAKE) -s -C $(KDIR) M=$(CURDIR)/kmod LLVM=1 modules

# Host-side binaries the guest runs (over the read-only 9p root).
host: deps
	@$(CARGO) build -q --release --workspace --bins

unit: deps
	@echo "[test] unit and property tests"
	@$(CARGO) test -q --workspace

loom:
	@echo "[test] loom models"
	@RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CURDIR)/target/loom $(CARGO) test -q --profile loom -p verify --test loom

vm-test: kmod host
	@echo "[test] integration suite in the VM (TCG unless KVM is usable)"
	@$(VM) --timeout 900 -- $(GUEST_SUITE)

test: unit loom vm-test

demo: kmod host
	@$(VM) --timeout 600 -- $(CURDIR)/target/release/krcore-demo

bench: deps
	@$(CARGO) bench -q -p krcore-benches

clean:
	@$(CARGO) clean
	@[ ! -d "$(KDIR)" ] || $(MAKE) -s -C $(KDIR) M=$(CURDIR)/kmod LLVM=1 clean
