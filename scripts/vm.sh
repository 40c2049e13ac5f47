#!/bin/sh
# Runs your own host-built program inside the test VM, with krcore loaded.
#
#   scripts/vm.sh PROGRAM [ARGS...]                 one guest
#   scripts/vm.sh [OPTIONS --] PROGRAM [ARGS...]    with the runner's options
#   scripts/vm.sh [OPTIONS] --role 'a:CMD' --role 'b:CMD'
#                                                   one guest per --role, on one segment
#
# It prepares Debian's stock kernel and builds the module first if they are missing
# (make kmod), then
# calls the VM runner (cargo run -p verify -- vm; `scripts/vm.sh --help` lists its
# options: --timeout, --dmesg, --memory, ...). The command runs in this directory,
# mounted from the host read-only; $TMPDIR is writable. With roles, guest i (in --role order, from 0) has
# address 192.0.2.(11+i), the first guest serves the MetaServer, and every module gets
# the same cluster key, made afresh for the run. Each command sees KRCORE_NODE (its
# role), KRCORE_ADDR (its address) and KRCORE_PEERS ("role=address ...").
set -eu
cd "$(dirname "$0")/.."
make -s kmod >&2
stock="$(scripts/stock-kernel.sh dir)"
meta=192.0.2.1 # the one guest's address: it serves the MetaServer itself
roles=0 nodes= dashes= help=
for arg in "$@"; do
	case "$arg" in
	--role | --role=*) roles=$((roles + 1)) meta=192.0.2.11 ;;
	--nodes | --nodes=*) nodes=given ;;
	--) dashes=given ;;
	-h | --help) help=given ;;
	esac
done
if [ "$roles" != 0 ]; then
	[ -n "$nodes" ] || set -- --nodes "$roles" "$@"
elif [ -z "$dashes" ] && [ -z "$help" ]; then
	set -- -- "$@" # all of it is the program and its arguments
fi
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
exec cargo run -q --release -p verify -- vm --tcg-single --kernel "$stock/vmlinuz" \
	--initrd-modules "$stock/initrd-modules" --module target/kmod-stock/krcore.ko \
	--module-param cm_port=7471 --module-param "cluster_key=$key" \
	--module-param "meta_server=$meta" "$@"
