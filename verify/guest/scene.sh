# Between two scenes of a multi-guest run (several scenarios sharing one boot): the VM
# runner puts this function into each guest's command, and calls `krcore_scene N` before
# scene N (N >= 2). It puts the guest back as it booted (krcore loaded afresh with the
# run's parameters, rxe0 on eth0, an empty TMPDIR), then meets every other guest, so that scene N starts
# on all of them once each finished scene N - 1. A scene's kernel log starts at its
# "krcore: loaded" line (cluster-smoke.sh's klog).
#
# The meeting: guest "a" of KRCORE_PEERS is the hub. Every other guest listens on port
# 7600 + N, connects to the hub's (retrying), and is released when the hub connects
# back; the hub accepts one connection from each, then connects to each. Each scene its
# own port, so a late handshake of one meeting never lands in the next.
krcore_scene() {
  echo "[scene $1] $KRCORE_NODE: reloading krcore and meeting every guest"
  for _ in $(seq 100); do
    grep -q '^krcore ' /proc/modules || break
    rmmod krcore 2>/dev/null && break
    sleep 0.1
  done
  if grep -q '^krcore ' /proc/modules; then
    echo "[scene $1] $KRCORE_NODE: krcore still in use after 10 s; what holds /dev/krcore:" >&2
    for fd in /proc/[0-9]*/fd/*; do
      [ "$(readlink "$fd" 2>/dev/null)" = /dev/krcore ] || continue
      pid=${fd#/proc/}; pid=${pid%%/*}
      echo "  pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline")" >&2
    done
    return 1
  fi
  # The last scene's files (TMPDIR is the guest's own tmpfs).
  rm -rf "${TMPDIR:?}"/* "${TMPDIR:?}"/.[!.]*
  # shellcheck disable=SC2086 # K=V words, split
  insmod "$KRCORE_KO" $KRCORE_PARAMS || return 1
  [ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev eth0 || return 1
  /usr/bin/python3 - "$1" <<'PY'
import os, socket, sys, time
scene = int(sys.argv[1])
port = 7600 + scene
me = os.environ["KRCORE_NODE"]
peers = dict(p.split("=", 1) for p in os.environ["KRCORE_PEERS"].split())
hub = "a" if "a" in peers else sorted(peers)[0]
until = time.monotonic() + 300
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", port))
srv.listen(len(peers))
srv.settimeout(1)

def knock(addr):
    while True:
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > until:
                sys.exit(f"[scene {scene}] {me}: no meeting with {addr} in 300 s")
            time.sleep(0.05)

def answers(n):
    for _ in range(n):
        while True:
            try:
                srv.accept()[0].close()
                break
            except OSError:
                if time.monotonic() > until:
                    sys.exit(f"[scene {scene}] {me}: not every guest came to the meeting in 300 s")

if me == hub:
    answers(len(peers) - 1)
    for name, addr in peers.items():
        if name != hub:
            knock(addr)
else:
    knock(peers[hub])
    answers(1)
print(f"[scene {scene}] {me}: every guest is here")
PY
}
