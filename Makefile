# krcore: one Makefile for the whole job on a fresh Debian 12 machine.
#
#   make demo    boot the test VM, load krcore, show what it sees (the main job)
#   make test    every test: unit, loom, VM integration
#   make bench   benchmarks
#
# Everything the build needs is installed by `make deps`, which the other targets call.

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

# The kernel the test bed boots: Debian's own, unmodified (scripts/stock-kernel.sh), and
# krcore built for it.
KSTOCK = $(shell scripts/stock-kernel.sh dir)
KMOD = $(CURDIR)/target/kmod-stock/krcore.ko
# The test build of it: the test knobs (kmod/shim.h) the multi-guest scenes inject
# faults with. The module a site loads (KMOD, the package's) has none.
KMOD_TEST = $(CURDIR)/target/kmod-stock-test/krcore.ko
# The debug kernel (kernel/debug.config: lockdep, sleep-in-atomic checks, KASAN) and the
# module built for it, from a copy of the sources (a directory holds one tree's objects).
KDIR_DEBUG = $(shell scripts/kernel.sh dir debug)
KMOD_DEBUG_SRC = $(CURDIR)/target/kmod-debug
KMOD_DEBUG = $(KMOD_DEBUG_SRC)/kmod/krcore.ko
CARGO ?= cargo
# Guest runs: the VM runner, with the kernel and module it boots.
VM_STOCK = $(CARGO) run -q --release -p verify -- vm --tcg-single --kernel $(KSTOCK)/vmlinuz --initrd-modules $(KSTOCK)/initrd-modules
# The guest suite, demos and benchmarks load the module a site loads; the multi-guest
# scenes, which inject faults, its test build.
VM = $(VM_STOCK) --module $(KMOD)
VM_TEST = $(VM_STOCK) --module $(KMOD_TEST)
GUEST_SUITE = $(CURDIR)/target/release/guest-suite

.PHONY: all deps deps-tools demo-bins kernel kernel-stock kernel-debug kmod kmod-test deb vm-test-deb kmod-debug module-for-host host python install unit bench-python loom fuzz vm-test vm-test-cluster vm-test-debug stress test demo demo-alone bench bench-cluster bench-cluster-run clean

# How long `make fuzz` (and so `make test`) fuzzes the engine.
FUZZ_SECONDS ?= 60

all: kmod host

deps:
	@scripts/deps.sh

# And the cargo tools the debug kernel and fuzzing need.
deps-tools:
	@scripts/deps.sh tools

# Debian's stock kernel (trixie-backports' newest 7.x, as tested), prepared for module
# builds; no kernel is built.
kernel kernel-stock: deps
	@scripts/stock-kernel.sh prepare

kernel-debug: deps-tools
	@scripts/kernel.sh build debug

# The module: Rust + C shim, built for the stock kernel in its build root.
kmod: kernel-stock
	@scripts/stock-kernel.sh module $(KMOD)

kmod-test: kernel-stock
	@scripts/stock-kernel.sh module $(KMOD_TEST) test

# The module for another kernel tree (docs/using.md, "On a real host"): HOST_KDIR names a
# Linux 6.12 or 7.x build tree with CONFIG_RUST, built by this rustc and LLVM.
module-for-host:
	@test -n "$(HOST_KDIR)" || { echo "usage: make module-for-host HOST_KDIR=/lib/modules/VERSION/build"; exit 2; }
	@echo "[kmod] building against $(HOST_KDIR)"
	@$(MAKE) -s -C $(HOST_KDIR) M=$(CURDIR)/kmod LLVM=1 modules

kmod-debug: kernel-debug
	@echo "[kmod] building against $(KDIR_DEBUG)"
	@mkdir -p $(KMOD_DEBUG_SRC)/kmod $(KMOD_DEBUG_SRC)/abi
	@# The sources only (mtimes kept: an unchanged module is not rebuilt); none left
	@# over from an older layout.
	@find $(KMOD_DEBUG_SRC)/kmod \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) -delete
	@cd kmod && find . \( -name '*.rs' -o -name '*.c' -o -name '*.h' -o -name Kbuild \) \
		-exec cp -p --parents {} $(KMOD_DEBUG_SRC)/kmod/ \;
	@cp -pr abi/src $(KMOD_DEBUG_SRC)/abi/
	@# The debug kernel runs tests only: its module is a test build.
	@$(MAKE) -s -C $(KDIR_DEBUG) M=$(KMOD_DEBUG_SRC)/kmod LLVM=1 KRCORE_TEST_KNOBS=1 modules

# krcore's Debian package for the stock kernel (scripts/deb.sh: the module under
# /lib/modules/RELEASE/updates, modules-load.d, modprobe.d, a udev rule, the tool, the
# C header and krcore.pc).
DEB_DIR = $(CURDIR)/target/deb
deb: kmod host
	@rm -rf $(DEB_DIR)
	@scripts/deb.sh $(KMOD) $(notdir $(KSTOCK)) $(DEB_DIR)

# The package installed, loaded through modprobe with its key file, used (the tool's
# devices, a READ) and purged, in a guest booted without krcore (a writable overlay
# over its root).
vm-test-deb: deb
	@echo "[test] the Debian package in a guest: installed, loaded, used, purged"
	@$(CARGO) run -q --release -p verify -- vm --tcg-single --kernel $(KSTOCK)/vmlinuz --initrd-modules $(KSTOCK)/initrd-modules \
	  --timeout 300 -- $(CURDIR)/verify/guest/deb-smoke.sh $$(ls $(DEB_DIR)/*.deb) $(KSTOCK)/initrd-modules

# Host-side binaries the guest runs (over the read-only 9p root): the Rust ones, the C
# example over uring-lib/c/krcore.h, and the Python package (`make python`).
C_EXAMPLE = $(CURDIR)/target/release/c-read-write
# Debian's Python (the guest runs the host's root, so the same one).
PYTHON = /usr/bin/python3
host: deps
	@echo "[host] building the workspace's programs and examples (release; minutes on a fresh clone)"
	@$(CARGO) build -q --release --workspace --bins --examples
	@mkdir -p $(dir $(C_EXAMPLE))
	@$(CC) -O2 -Wall -Wextra -Werror -std=c11 -D_GNU_SOURCE -I abi/include -I uring-lib/c \
		-o $(C_EXAMPLE) uring-lib/c/examples/read_write.c
	@$(MAKE) -s python

# The Python package as users get it: a PyO3 module over krcore-uring, built by
# maturin. Its sdist (the Rust crates it needs inside), a wheel built from that sdist
# unpacked outside this tree, and the wheel installed into a virtual environment
# (Debian's pip installs nowhere else: PEP 668), which also holds maturin. Run with
# $(PYVENV)/bin/python3.
PYDIST = $(CURDIR)/target/python-dist
PYVENV = $(CURDIR)/target/pyvenv
MATURIN = maturin==1.16.0
python: deps
	@test -x $(PYVENV)/bin/python3 || $(PYTHON) -m venv $(PYVENV)
	@$(PYVENV)/bin/pip freeze 2>/dev/null | grep -qx '$(MATURIN)' || $(PYVENV)/bin/pip install -q '$(MATURIN)'
	@rm -rf $(PYDIST) && mkdir -p $(PYDIST)/unpacked
	@cd uring-lib/python && $(PYVENV)/bin/maturin sdist -o $(PYDIST) >/dev/null 2>&1
	@# -m: extracted now, not at the sdist's fixed 2006 times, which cargo would take
	@# for older than its last build in target/pyo3 (a stale wheel).
	@tar -m -xzf $(PYDIST)/krcore-*.tar.gz -C $(PYDIST)/unpacked
	@cd $(PYDIST)/unpacked/krcore-*/ && CARGO_TARGET_DIR=$(CURDIR)/target/pyo3 \
		$(PYVENV)/bin/maturin build --release -i $(PYVENV)/bin/python3 -o $(PYDIST) \
		> $(PYDIST)/build.log 2>&1 || { cat $(PYDIST)/build.log; exit 1; }
	@$(PYVENV)/bin/pip install -q --no-index --no-deps --force-reinstall $(PYDIST)/krcore-*.whl

# The C headers and their pkg-config file, for programs built outside this tree:
# `pkg-config --cflags krcore`, then `#include "krcore.h"`. PREFIX (default /usr/local)
# and DESTDIR as usual.
PREFIX ?= /usr/local
install:
	@install -d $(DESTDIR)$(PREFIX)/include/krcore $(DESTDIR)$(PREFIX)/lib/pkgconfig
	@install -m 0644 abi/include/krcore_abi.h abi/include/krcore_reasons.h uring-lib/c/krcore.h \
		$(DESTDIR)$(PREFIX)/include/krcore/
	@sed 's|@PREFIX@|$(PREFIX)|' uring-lib/c/krcore.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/krcore.pc
	@echo "[install] krcore's C headers in $(DESTDIR)$(PREFIX)/include/krcore, krcore.pc in $(DESTDIR)$(PREFIX)/lib/pkgconfig"

unit: deps
	@echo "[test] unit and property tests"
	@$(CARGO) test -q --workspace
	@echo "[test] rustfmt and clippy find nothing (warnings denied)"
	@$(CARGO) fmt --all --check
	@$(CARGO) clippy -q --workspace --all-targets -- -D warnings
	@echo "[test] docs build without warnings"
	@RUSTDOCFLAGS="-D warnings" $(CARGO) doc -q --no-deps --workspace --all-features
	@# And the library as most depend on it, with its default features only.
	@RUSTDOCFLAGS="-D warnings" $(CARGO) doc -q --no-deps -p krcore-uring
	@echo "[test] the C headers install, and a program builds through pkg-config"
	@d=$$(mktemp -d) && $(MAKE) -s install PREFIX=$$d >/dev/null && \
		$(CC) -O2 -Wall -Wextra -Werror -std=c11 -D_GNU_SOURCE \
		$$(PKG_CONFIG_PATH=$$d/lib/pkgconfig pkg-config --cflags krcore) \
		-o $$d/read_write uring-lib/c/examples/read_write.c && rm -rf $$d

# The build directories of the checks whose programs no guest runs (loom's models, the
# fuzz targets) live in the cache, outside the clone: built with flags of their own,
# their dependencies take minutes, and cargo's fingerprints decide what a fresh clone
# rebuilds.
CARGO_CACHE = $${KRCORE_CACHE:-$$HOME/.cache/krcore}/cargo
loom:
	@echo "[test] loom models"
	@RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CARGO_CACHE)/loom $(CARGO) test -q --profile loom -p verify --test loom

# cargo fuzz needs nightly-only flags (-Zsanitizer); RUSTC_BOOTSTRAP lets the machine's
# stable toolchain accept them, as no other toolchain can be installed here.
# Targets: engine (what applications submit) and wire (what other nodes send).
FUZZ_TARGETS = engine wire
fuzz: deps-tools
	@mkdir -p $(CURDIR)/target
	@for t in $(FUZZ_TARGETS); do \
		echo "[test] fuzzing $$t for $(FUZZ_SECONDS) s (libFuzzer + ASan)"; \
		(cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run --target-dir $(CARGO_CACHE)/fuzz $$t --release -- \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 >$(CURDIR)/target/fuzz-$$t.log 2>&1) \
			|| { tail -60 $(CURDIR)/target/fuzz-$$t.log; echo "[test] fuzzing $$t found a failure (artifact in fuzz/artifacts/$$t/)"; exit 1; }; \
		grep -E "^Done [0-9]+ runs" $(CURDIR)/target/fuzz-$$t.log | sed "s/^/[fuzz $$t] /"; \
	done

vm-test: kmod host
	@echo "[test] integration suite in the VM (TCG unless KVM is usable)"
	@$(VM) --timeout 900 -- $(GUEST_SUITE)

# Several guests on one Ethernet segment (the runner's hub of Unix datagram sockets;
# the multi-guest test bed): RC traffic over rxe between 2, then 3 guests, each with the
# module loaded and its own address; in the 3-guest run one guest is killed mid-run
# and booted again, and reaches its peer after. Then kernel-to-kernel connections: b's
# module connects to a's over rdma_cm, then b removes its device and a unloads, each
# with the connection live; and remote CONNECT: b's applications CONNECT to a's node
# (first contact, then warm), a unloads, and b's next CONNECT fails by name; then c
# keeps sets to two nodes at once, a and b, which both unload. Then the MetaServer and
# one-sided requests across nodes: a serves the MetaServer and exports memory by name,
# b imports it and READs, WRITEs, CASes and FAAs it (bytes checked on both sides); then
# on 3 guests, a serves the MetaServer, b exports, c imports. Then failures: b keeps
# READs in flight to a, has a's guest killed (they fail, each with a completion, within
# the deadline), booted again, and uses its memory anew; the MetaServer's guest killed
# (a lookup then fails Unreachable in bounded time) and booted again (the exporter
# publishes its names again by itself, and they are found); 1,000 CONNECT/DISCONNECT
# cycles from b to a with both kernels' memory flat; and a and b dialing each other at
# once (each dial held 3 s), which must end with one set, dialed by one and adopted by
# the other; then two-sided messages between them (two services, two rings, each
# service receiving only its own messages, bytes and immediates checked, WRITE_IMM
# into memory published by name, and a DISCONNECT whose advertised receives come back
# Cancelled once the peer answered), on 2 guests (one the MetaServer) and on 3 (the
# MetaServer apart); a receive waiting on b ends PeerGone at once when a's module
# unloads (the CM's close, not a deadline); then a server on a that LISTENs and answers peers on b and c it
# never connected to (each peer's message on its own accepted virtual QP), and the
# same server in Python on 2 guests, and the `krcore` tool measuring a `krcore serve`
# (memory by name, SENDs echoed) on 2 guests. Then the cluster's trust: a third guest that is
# not a member (no key) captures a member's proof from the segment and knocks on the
# MetaServer node's listener with crafted requests and the replay, all refused and
# counted; a DEREG_MR with the revocations' table full (16 waiting for a killed node)
# still revokes its export at the importer first; and a device removed during a dial
# to a host that never answers. Last, the
# user-space verbs baseline across nodes: 10
# fresh processes each connect through rdma_cm, every stage timed, and READ a word.
SMOKE = $(CURDIR)/verify/guest/cluster-smoke.sh
CM_ROLES = --role "a:$(SMOKE) listen 1" --role "b:$(SMOKE) dial a"
CONNECT_ROLES = --role "a:$(SMOKE) listen 2" --role "b:$(SMOKE) connect a"
META_ROLES = --role "a:$(SMOKE) export a kv" --role "b:$(SMOKE) import a a kv"
KILL_ROLES = --role "a:$(SMOKE) export a kv" --role "b:$(SMOKE) hammer a a kv"
MUTUAL_ROLES = --role "a:$(SMOKE) mutual b" --role "b:$(SMOKE) mutual a"
MESSAGE_ROLES = --role "a:$(SMOKE) messages b recv 64 a" --role "b:$(SMOKE) messages a send 64 a"
LISTENER_ROLES = --role "a:$(SMOKE) listener serve 1" --role "b:$(SMOKE) listener client a"
# One LISTEN on a serves 64 client processes on each of b and c at once, each checking
# its own echo.
CLIENTS_ROLES = --role "a:$(SMOKE) listener serve 128" --role "b:$(SMOKE) listener client a 64" --role "c:$(SMOKE) listener client a 64"
# The Python server, and one client whose connection outlives its CONNECT's deadline
# (1 s here: it holds 3 s before its hello). A paired CONNECT was refused at twice the
# deadline, telling the server it left, and the echo found no receiver.
HOLD_ROLES = --role "a:$(SMOKE) listener serve-py 1" --role "b:KRCORE_TEST_ARGS=request_timeout_ms=1000 $(SMOKE) listener client a 1 77 3000"
# A server on b and one on c, each holding its own service; a's clients reach both.
SERVICES_ROLES = --role "a:$(SMOKE) listener client b 8 77 && $(SMOKE) listener client c 8 78" --role "b:$(SMOKE) listener serve 8 77" --role "c:$(SMOKE) listener serve 8 78"
# The same with a starting 10 s late: b's first MetaServer connection is refused and
# torn down under the MetaServer link's mutex, then a's set request is answered under
# rdma_cm's handler mutex, then b unloads: lockdep saw a cycle there when the device's
# removal ran under the registry's lock.
MESSAGE_ROLES_LATE = --role "a:sleep 10; $(SMOKE) messages b recv 64 a" --role "b:$(SMOKE) messages a send 64 a"
# The messages on a lossy segment (one in 20 RoCE frames each guest sends lost): the
# transport's retransmissions must not run again what completed behind a lost packet
# (soft-RoCE re-executes local work requests, such as an advert key's registration).
LOSSY_ROLES = --role "a:KRCORE_LOSSY=1 $(SMOKE) messages b recv 64 a" --role "b:KRCORE_LOSSY=1 $(SMOKE) messages a send 64 a"
# Every notice each kernel receives taken twice, then cut short (test_notice_echo).
ECHO = KRCORE_TEST_ARGS=test_notice_echo=1
ECHO_ROLES = --role "a:$(ECHO) $(SMOKE) messages b recv 64" --role "b:$(ECHO) $(SMOKE) messages a send 64"
VANISH_ROLES = --role "a:$(SMOKE) vanish leave b" --role "b:$(SMOKE) vanish stay a"
# A host that is not a member (c, no key) captures b's proof from the segment and knocks
# on a's listener with crafted requests and the replay: all refused, counted on a.
# A host that is no member answers a member's dial (cm-intruder impostor), the member's
# check of its accept held open 3 s: the member's QP must not answer it meanwhile.
IMPOSTOR = KRCORE_TEST_ARGS=test_hold_accept_ms=3000
IMPOSTOR_ROLES = --role "a:$(IMPOSTOR) $(SMOKE) dial-impostor b" --role "b:$(SMOKE) impostor a"
# A host with no key refuses a member's dial with a yield: the dialer must not yield.
YIELDER_ROLES = --role "a:$(SMOKE) dial-yielder b" --role "b:$(SMOKE) yielder a"
# Names have owners: uid 1001's name on b, as its group, another user and itself on c;
# then c's users fill their shares of names (2 a user on c, 4 a node at a).
NAMES_ROLES = --role "a:$(SMOKE) meta 2 max_names_per_node=4" --role "b:$(SMOKE) names a hold secret" --role "c:$(SMOKE) names a check b secret"
TRUST_ROLES = --role "a:$(SMOKE) guard c" --role "b:$(SMOKE) member a c" --role "c:$(SMOKE) intruder a b"
# A host that is no member (c) claims member b's address and floods a's listener with
# bad proofs from it: b's first contacts with a are each admitted meanwhile.
SPOOF_ROLES = --role "a:$(SMOKE) spoofed b" --role "b:$(SMOKE) victim a c" --role "c:$(SMOKE) spoofer a b"
# A host on the path forges the CM's disconnect requests to both ends of a set's
# connections (cm-intruder dreq): the importer's READs over it must all be answered.
DREQ_ROLES = --role "a:$(SMOKE) dreq-importer b c" --role "b:$(SMOKE) dreq-held c" --role "c:$(SMOKE) dreq-forger a b"
# One member's user program, with the key, asks the MetaServer's listener for 64 proved
# connections: its node's part (8) is taken, and another node still publishes.
HOG_ROLES = --role "a:$(SMOKE) hogged-meta b c" --role "b:$(SMOKE) hog a c" --role "c:$(SMOKE) hogged a b"
# The MetaServer on a holds each request 1 s (test_hold_serve_ms): serving runs on
# the module's own queue, and a's unload waits for the request it holds.
SERVING_ROLES = --role "a:$(SMOKE) serving b" --role "b:$(SMOKE) served a"
# b's MetaServer work held 30 s a pass, a PUBLISH waiting: b's CONNECT to a
# is dialed by a free worker at once.
SLOW_META_ROLES = --role "a:$(SMOKE) meta 1" --role "b:$(SMOKE) meta-slow a"
# Two users of b CONNECT 300 times to a's listen: b holds 256 of its 1,024 virtual QPs
# (a client node's quarter), and c is served.
CLIENT_PART_ROLES = --role "a:$(SMOKE) client-part b c" --role "b:$(SMOKE) client-hog a c" --role "c:$(SMOKE) client-other a b"
# a's peer table of 4 (max_peers): uid 1001 pins b's entry, its CONNECT to c is refused
# Quota, and uid 1002's is served.
PINNER_ROLES = --role "a:$(SMOKE) pinner b c" --role "b:$(SMOKE) pinned a 7551 7553" --role "c:$(SMOKE) pinned a 7552 7554"
# The `krcore` tool's two sides: a serves memory by name and an echo, b measures them.
TOOL_ROLES = --role "a:$(SMOKE) tool serve a" --role "b:$(SMOKE) tool measure a a"
# a's revocations table full (16 names revoked, waiting for c, killed): a's DEREG_MR of
# kv, which b imported, still revokes it at b first.
CROWD_ROLES = --role "a:$(SMOKE) crowd b c" --role "b:$(SMOKE) await-revoke a" --role "c:$(SMOKE) bystander a"
# a: its own MetaServer link closed by the tick while the removal's teardown is held (no
# warning); then a's rxe0 deleted 1.5 s into a dial to b, which answers ARP but never the CM.
YANK_ROLES = --role "a:$(SMOKE) held-removal && $(SMOKE) yank dial b" --role "b:$(SMOKE) yank mute a"
# Rights held by the NIC: b's kernel checks nothing (test_unchecked_wire), and WRITEs
# a's read-only export, then a's memory that was never exported: a's NIC refuses both.
FENCE_ROLES = --role "a:$(SMOKE) fenced b" --role "b:$(SMOKE) breach a"
# a's enters bounded at 100 ms (NOPs, a CONNECT to c) while other rings' network work
# waits on b (mute, and a's MetaServer) and on addresses nobody holds.
BOUNDED_ROLES = --role "a:$(SMOKE) bounded b c" --role "b:$(SMOKE) yank mute a" --role "c:$(SMOKE) live a"
# a's peer table holds one set, which only b's importer uses: a's CONNECT to a new node
# is refused TableFull rather than evict it, and b's READs go on.
CHURN_ROLES = --role "a:$(SMOKE) churn" --role "b:$(SMOKE) stay a"
# Scenarios that need no guest killed and no lossy segment share a boot: the runner runs
# them as scenes, one after another, each guest's module reloaded and every guest met
# before each (verify/guest/scene.sh).
PING_ROLES = --role "a:$(SMOKE) serve 1" --role "b:$(SMOKE) ping a"
CYCLES_ROLES = --role "a:$(SMOKE) steady" --role "b:$(SMOKE) cycles a 1000 8"
SELF_ROLES = --role "a:$(SMOKE) listener self 64" --role "b:true"
VERBS_ROLES = --role "a:$(SMOKE) verbs_cm serve 10" --role "b:$(SMOKE) verbs_cm connect a 10"
CONNECT3_ROLES = --role "a:$(SMOKE) listen 2" --role "b:$(SMOKE) listen 2" --role "c:$(SMOKE) connect a b"
META3_ROLES = --role "a:$(SMOKE) meta 2" --role "b:$(SMOKE) export a kv" --role "c:$(SMOKE) import a b kv"
MESSAGE3_ROLES = --role "a:$(SMOKE) meta 2" --role "b:$(SMOKE) messages c recv 64 a" --role "c:$(SMOKE) messages b send 64 a"
TWO_SCENES = $(PING_ROLES) $(CM_ROLES) $(CONNECT_ROLES) $(META_ROLES) $(CYCLES_ROLES) \
	$(MUTUAL_ROLES) $(MESSAGE_ROLES) $(ECHO_ROLES) $(VANISH_ROLES) $(IMPOSTOR_ROLES) $(YIELDER_ROLES) \
	$(SERVING_ROLES) $(SLOW_META_ROLES) $(YANK_ROLES) $(FENCE_ROLES) $(CHURN_ROLES) $(SELF_ROLES) $(HOLD_ROLES) \
	$(TOOL_ROLES) $(VERBS_ROLES)
THREE_SCENES = $(CONNECT3_ROLES) $(META3_ROLES) $(TRUST_ROLES) $(SPOOF_ROLES) $(DREQ_ROLES) $(HOG_ROLES) $(BOUNDED_ROLES) \
	$(CLIENT_PART_ROLES) $(PINNER_ROLES) \
	$(MESSAGE3_ROLES) $(CLIENTS_ROLES) $(NAMES_ROLES) $(SERVICES_ROLES)
vm-test-cluster: kmod-test host
	@echo "[test] multi-guest test bed: 2 and 3 guests on one segment; kernel-to-kernel connections"
	@$(VM_TEST) --timeout 1800 --nodes 2 $(TWO_SCENES)
	@$(VM_TEST) --timeout 1200 --nodes 3 $(THREE_SCENES)
	@$(VM_TEST) --timeout 300 --nodes 3 --role "a:$(SMOKE) serve 2" --role "b:$(SMOKE) reborn a" --role "c:sleep 8; $(SMOKE) cycle b && $(SMOKE) ping a"
	@$(VM_TEST) --timeout 600 --nodes 2 $(KILL_ROLES)
	@$(VM_TEST) --timeout 600 --nodes 3 --role "a:$(SMOKE) meta 2" --role "b:$(SMOKE) export a kv" --role "c:$(SMOKE) failover a b kv"
	@$(VM_TEST) --timeout 300 --nodes 2 --lose-one-in 20 $(LOSSY_ROLES)
	@$(VM_TEST) --timeout 300 --nodes 3 $(CROWD_ROLES)

# The same suite on the debug kernel, then the surface stress program for
# STRESS_SECONDS: any lockdep, KASAN, sleep-in-atomic or list report fails the run (the
# VM runner's log scan).
STRESS = $(CURDIR)/target/release/krcore-stress
STRESS_SECONDS ?= 20
VM_DEBUG = $(CARGO) run -q --release -p verify -- vm --kernel $(KDIR_DEBUG)/arch/x86/boot/bzImage --module $(KMOD_DEBUG)
vm-test-debug: kmod-debug host
	@echo "[test] integration suite and $(STRESS_SECONDS) s of surface stress in the VM on the debug kernel (lockdep, KASAN)"
	@$(VM_DEBUG) --timeout 2400 -- /bin/sh -c '$(GUEST_SUITE) && $(STRESS) $(STRESS_SECONDS) 3 3 1'
	@echo "[test] kernel-to-kernel connections between 2 and 3 guests on the debug kernel"
	@$(VM_DEBUG) --timeout 3000 --nodes 2 $(CM_ROLES) $(CONNECT_ROLES) $(META_ROLES) $(MUTUAL_ROLES) \
		$(MESSAGE_ROLES_LATE) $(LISTENER_ROLES) $(VANISH_ROLES) $(YANK_ROLES) $(FENCE_ROLES) \
		$(ECHO_ROLES) $(IMPOSTOR_ROLES) $(YIELDER_ROLES) $(SERVING_ROLES) $(SLOW_META_ROLES)
	@$(VM_DEBUG) --timeout 1200 --nodes 3 $(BOUNDED_ROLES) $(TRUST_ROLES) $(SPOOF_ROLES) $(DREQ_ROLES) $(HOG_ROLES)
	@$(VM_DEBUG) --timeout 900 --nodes 2 $(KILL_ROLES)
	@$(VM_DEBUG) --timeout 600 --nodes 2 --lose-one-in 20 $(LOSSY_ROLES)
	@$(VM_DEBUG) --timeout 600 --nodes 3 $(CROWD_ROLES)

# The surface stress program alone, longer (STRESS_SECONDS, default 300 here), on the
# debug kernel; STRESS_SEED picks another random sequence.
stress: STRESS_SECONDS = 300
stress: kmod-debug host
	@$(VM_DEBUG) --timeout $$(( $(STRESS_SECONDS) * 3 + 600 )) -- $(STRESS) $(STRESS_SECONDS) 3 3 $${STRESS_SEED:-1}

test: unit loom fuzz vm-test vm-test-cluster vm-test-deb vm-test-debug

# The elastic key-value store on 3 guests: a holds the table (DEMO_KEYS keys)
# and the MetaServer; b and c each launch DEMO_WORKERS short-lived workers per system,
# one every 1 s (c half a second after b), krcore first, then verbs over rdma_cm. Every
# GET's value is checked. bench-report sums the nodes: benches/results/demo.md and
# demo-timeline.svg.
DEMO_KEYS ?= 50000
DEMO_WORKERS ?= 4
DEMO_RUN_MS ?= 6000
DEMO_LOG = $(CURDIR)/target/demo.log
DEMO_COMPUTE = $(DEMO_KEYS) $(DEMO_WORKERS) 1000 $(DEMO_RUN_MS)
# What the demo runs: the runner, the guests' programs and the report, built while the
# stock kernel is prepared (make -j2 below: one mostly waits on the network and dpkg).
demo-bins: deps
	@echo "[host] building the demo's programs (release)"
	@$(CARGO) build -q --release -p verify --bins -p krcore-benches --bin bench-report

demo:
	@$(MAKE) -s --no-print-directory -j2 kmod demo-bins
	@echo "[demo] elastic key-value store on 3 guests: $(DEMO_KEYS) keys, $(DEMO_WORKERS) workers per compute node and system"
	@$(VM) --timeout 900 --nodes 3 --role "a:$(SMOKE) demo memory $(DEMO_KEYS) $$(( 2 * ($(DEMO_WORKERS) + 1) ))" \
	  --role "b:$(SMOKE) demo compute a $(DEMO_COMPUTE) 0" --role "c:$(SMOKE) demo compute a $(DEMO_COMPUTE) 500" > $(DEMO_LOG) 2>&1 \
	  || { grep -vE 'demo-record' $(DEMO_LOG) | grep -E '^\[(a|b|c|vm)\] ' | tail -30; echo "[demo] failed (log: $(DEMO_LOG))"; exit 1; }
	@grep -E '^\[(a|b|c)\] (memory node|[a-z]+ worker|[a-z]+: [a-z]+ phase)' $(DEMO_LOG) || true
	@mkdir -p benches/results
	@$(CURDIR)/target/release/bench-report demo $(DEMO_LOG) benches/results

# The same workers one at a time: a holds the table; b launches
# DEMO_ALONE_RUNS rounds of one krcore worker, then one verbs worker, nothing else
# running. Each stage's CPU time and page faults beside its time: benches/results/
# demo-alone.md. DEMO_ALONE_ASLR=0 turns address randomization off in b, so each fresh
# process runs its code where the one before did and QEMU reuses its translations:
# what is left is closer to a real machine's, which translates nothing.
DEMO_ALONE_RUNS ?= 5
DEMO_ALONE_ASLR ?= 2
DEMO_ALONE_LOG = $(CURDIR)/target/demo-alone.log
demo-alone: kmod host
	@echo "[demo] $(DEMO_ALONE_RUNS) lone workers per system on 2 guests"
	@$(VM) --timeout 900 --nodes 2 --role "a:$(SMOKE) demo memory $(DEMO_KEYS) $$(( 2 * $(DEMO_ALONE_RUNS) ))" \
	  --role "b:echo $(DEMO_ALONE_ASLR) > /proc/sys/kernel/randomize_va_space; $(SMOKE) demo rounds a $(DEMO_KEYS) $(DEMO_ALONE_RUNS)" > $(DEMO_ALONE_LOG) 2>&1 \
	  || { grep -vE 'demo-record' $(DEMO_ALONE_LOG) | grep -E '^\[(a|b|vm)\] ' | tail -30; echo "[demo] failed (log: $(DEMO_ALONE_LOG))"; exit 1; }
	@mkdir -p benches/results
	@$(CURDIR)/target/release/bench-report demo --name demo-alone $(DEMO_ALONE_LOG) benches/results

# Native criterion benches (abi engine, uring-lib's user side, io_uring on the host),
# then the in-VM figures (one run: krcore beside verbs, the one-ioctl-per-op path,
# the kernel-direct baseline and io_uring), written under benches/results/ by
# bench-report: native.md, vm-figures.md/.jsonl and SVG plots, dated.
BENCH_LOG = $(CURDIR)/target/figures.log
ICOUNT_LOG = $(CURDIR)/target/figures-icount.log
# What the Python package adds to an operation: 8 B READs one at a time through it and
# through the Rust library (the krcore tool), alternating in one guest run; medians,
# p99s and their ratios (benches/py/python_cost.py).
bench-python: kmod host
	@$(VM) --timeout 600 -- sh -c 'cd $(CURDIR) && $(PYVENV)/bin/python3 benches/py/python_cost.py 4000'


bench: kmod host
	@echo "[bench] native: abi engine and io_uring (criterion)"
	@$(CARGO) bench -q -p krcore-benches --bench engine --bench ioctl -- --warm-up-time 1 --measurement-time 3 > $(CURDIR)/target/criterion-abi.log 2>&1 \
	  || { tail -30 $(CURDIR)/target/criterion-abi.log; exit 1; }
	@echo "[bench] native: uring-lib's user-side costs (criterion)"
	@$(CARGO) bench -q -p krcore-uring --features bench-support --bench user_side -- --warm-up-time 1 --measurement-time 3 > $(CURDIR)/target/criterion-uring.log 2>&1 \
	  || { tail -30 $(CURDIR)/target/criterion-uring.log; exit 1; }
	@mkdir -p benches/results
	@$(CURDIR)/target/release/bench-report native $(CURDIR)/target/criterion benches/results
	@echo "[bench] in-VM figures (TCG: a few minutes)"
	@rc=0; $(VM) --module-param bench_direct=1 --timeout 1200 -- $(CURDIR)/target/release/krcore-figures > $(BENCH_LOG) || rc=$$?; \
	 grep -E '^\[figures\]|^\[vm\]' $(BENCH_LOG) || true; \
	 [ $$rc = 0 ] || { tail -40 $(BENCH_LOG); echo "[bench] in-VM figures failed (exit $$rc; log: $(BENCH_LOG))"; exit 1; }
	@echo "[bench] instructions per operation: the crossing figures in a guest whose clock counts instructions (QEMU -icount; exact, the same every run)"
	@$(VM) --icount --module-param bench_direct=1 --timeout 600 -- $(CURDIR)/target/release/krcore-figures instructions > $(ICOUNT_LOG) 2>&1 \
	  || { tail -30 $(ICOUNT_LOG); echo "[bench] counted figures failed (log: $(ICOUNT_LOG))"; exit 1; }
	@{ echo "# Instructions per operation (make bench, QEMU -icount shift=0)"; echo; \
	   grep -E '^\[icount\]|^\{"group":"enter-stage"' $(ICOUNT_LOG) | sed 's/^/    /'; } > benches/results/instructions.md
	@grep '^\[icount\]' $(ICOUNT_LOG)
	@$(MAKE) -s bench-cluster-run
	@$(CURDIR)/target/release/bench-report vm $(BENCH_LOG) $(BENCH_CLUSTER_LOG) $(BENCH_CLUSTER3_LOG) benches/results

# The figures across nodes. On 2 guests: b measures against a, which serves
# them and the MetaServer with BENCH_NAMES names published: data plane, MetaServer
# lookups beside a request/reply lookup, connects from 1-8 processes, first contact
# (benches/src/bin/krcore-figures/across.rs). Then on 3 guests: the serverless hand-off
# (a chain of fresh processes on a, b, c in turn passing 4 KiB-1 MiB) and the full
# mesh (N processes per node each connecting to every other node), coordinated by a
# (cluster.rs). `make bench` runs both and reports them with its own; `make
# bench-cluster` alone reports these runs.
BENCH_CLUSTER_LOG = $(CURDIR)/target/figures-cluster.log
BENCH_CLUSTER3_LOG = $(CURDIR)/target/figures-cluster3.log
BENCH_NAMES ?= 10000
bench-cluster-run: kmod host
	@echo "[bench] figures across 2 guests ($(BENCH_NAMES) names in the MetaServer)"
	@rc=0; $(VM) --timeout 1500 --nodes 2 --role "a:$(SMOKE) figures far b $(BENCH_NAMES)" \
	   --role "b:$(SMOKE) figures across a $(BENCH_NAMES)" > $(BENCH_CLUSTER_LOG) 2>&1 || rc=$$?; \
	 grep -E '^\[(a|b)\] \[(figures|far)\]|^\[vm\]' $(BENCH_CLUSTER_LOG) || true; \
	 [ $$rc = 0 ] || { grep -E '^\[(a|b|vm)\] ' $(BENCH_CLUSTER_LOG) | tail -40; echo "[bench] figures across nodes failed (exit $$rc; log: $(BENCH_CLUSTER_LOG))"; exit 1; }
	@echo "[bench] figures across 3 guests: serverless hand-off, full mesh"
	@rc=0; $(VM) --timeout 1500 --nodes 3 --role "a:$(SMOKE) figures cluster b c" \
	   --role "b:$(SMOKE) figures node a" --role "c:$(SMOKE) figures node a" > $(BENCH_CLUSTER3_LOG) 2>&1 || rc=$$?; \
	 grep -E '^\[(a|b|c)\] \[(figures|node)\]|^\[vm\]' $(BENCH_CLUSTER3_LOG) || true; \
	 [ $$rc = 0 ] || { grep -E '^\[(a|b|c|vm)\] ' $(BENCH_CLUSTER3_LOG) | tail -40; echo "[bench] figures across 3 guests failed (exit $$rc; log: $(BENCH_CLUSTER3_LOG))"; exit 1; }
bench-cluster: bench-cluster-run
	@$(CURDIR)/target/release/bench-report vm $(BENCH_CLUSTER_LOG) $(BENCH_CLUSTER3_LOG) $(CURDIR)/target/bench-cluster

clean:
	@$(CARGO) clean
