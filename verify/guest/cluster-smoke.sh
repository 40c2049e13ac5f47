#!/bin/sh
# The multi-guest test bed's smoke test: RC traffic (ibv_rc_pingpong over rxe, RoCE v2)
# between guests on the runner's segment, before anything of krcore's crosses it.
#   cluster-smoke.sh serve N   serve N clients, one after another
#   cluster-smoke.sh ping ROLE ping the guest of ROLE (from KRCORE_PEERS), retrying
#                              while it boots or serves another client (up to 60 s)
set -u
addr_of() {
  for p in $KRCORE_PEERS; do
    [ "${p%%=*}" = "$1" ] && { echo "${p#*=}"; return 0; }
  done
  echo "no role $1 in KRCORE_PEERS=$KRCORE_PEERS" >&2
  return 1
}
case "$1" in
serve)
  for _ in $(seq "$2"); do
    ibv_rc_pingpong -d rxe0 -g 1 -n 10 || exit 1
  done
  ;;
ping)
  peer=$(addr_of "$2") || exit 1
  for _ in $(seq 60); do
    if ibv_rc_pingpong -d rxe0 -g 1 -n 10 "$peer" 2>/dev/null; then
      echo "$KRCORE_NODE ($KRCORE_ADDR) <-> $2 ($peer): 10 RC round trips"
      exit 0
    fi
    sleep 1
  done
  echo "$KRCORE_NODE: no RC round trip with $2 ($peer) in 60 s" >&2
  exit 1
  ;;
*)
  echo "usage: cluster-smoke.sh serve N | ping ROLE" >&2
  exit 2
  ;;
esac
