#!/bin/sh
# The multi-guest test bed's smoke test: RC traffic (ibv_rc_pingpong over rxe, RoCE v2)
# between guests on the runner's segment, and a guest killed and booted again.
#   cluster-smoke.sh serve N        serve N clients, one after another
#   cluster-smoke.sh ping ROLE      ping the guest of ROLE (from KRCORE_PEERS), retrying
#                                   while it boots or serves another client (up to 60 s)
#   cluster-smoke.sh cycle ROLE     have the runner kill ROLE's guest and boot it again
#   cluster-smoke.sh reborn ROLE    first boot: wait to be killed; later boots: ping ROLE
set -u
addr_of() {
  for p in $KRCORE_PEERS; do
    [ "${p%%=*}" = "$1" ] && { echo "${p#*=}"; return 0; }
  done
  echo "no role $1 in KRCORE_PEERS=$KRCORE_PEERS" >&2
  return 1
}
ping_role() {
  peer=$(addr_of "$1") || exit 1
  for _ in $(seq 60); do
    if ibv_rc_pingpong -d rxe0 -g 1 -n 10 "$peer" >/dev/null 2>&1; then
      echo "$KRCORE_NODE ($KRCORE_ADDR, boot $KRCORE_BOOT) <-> $1 ($peer): 10 RC round trips"
      exit 0
    fi
    sleep 1
  done
  echo "$KRCORE_NODE: no RC round trip with $1 ($peer) in 60 s" >&2
  exit 1
}
case "$1" in
serve)
  for _ in $(seq "$2"); do
    ibv_rc_pingpong -d rxe0 -g 1 -n 10 >/dev/null || exit 1
  done
  echo "$KRCORE_NODE served $2 clients"
  ;;
ping) ping_role "$2" ;;
cycle)
  echo "KRCORE-CLUSTER: kill $2"
  sleep 2
  echo "KRCORE-CLUSTER: boot $2"
  ;;
reborn)
  if [ "$KRCORE_BOOT" = 1 ]; then
    echo "$KRCORE_NODE: first boot, waiting to be killed"
    sleep 600
    exit 1
  fi
  ping_role "$2"
  ;;
*)
  echo "usage: cluster-smoke.sh serve N | ping ROLE | cycle ROLE | reborn ROLE" >&2
  exit 2
  ;;
esac
