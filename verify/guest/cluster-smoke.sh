#!/bin/sh
# The multi-guest test bed's smoke test: RC traffic (ibv_rc_pingpong over rxe, RoCE v2)
# between guests on the runner's segment, and a guest killed and booted again.
#   cluster-smoke.sh serve N        serve N clients, one after another
#   cluster-smoke.sh ping ROLE      ping the guest of ROLE (from KRCORE_PEERS), retrying
#                                   while it boots or serves another client (up to 60 s)
#   cluster-smoke.sh cycle ROLE     have the runner kill ROLE's guest and boot it again
#   cluster-smoke.sh reborn ROLE    first boot: wait to be killed; later boots: ping ROLE
#   cluster-smoke.sh listen N       reload the module listening for peer kernels (rdma_cm,
#                                   port 7471); wait until it accepted N connections (60 s),
#                                   then unload it with them live
#   cluster-smoke.sh dial ROLE      reload the module listening and naming ROLE's guest as
#                                   its peer: the kernel connects to ROLE's kernel once its
#                                   pool is ready; retried while ROLE's module is not
#                                   listening yet (up to 60 s); then remove rxe0 with the
#                                   connection live, and unload
#   cluster-smoke.sh connect ROLE.. reload the module listening; CONNECT to each ROLE's
#                                   node 200 times (the first makes the node's set to it,
#                                   retried while ROLE's module is not listening yet); once
#                                   each ROLE's module is gone, a CONNECT to it fails by
#                                   name, in bounded time; then remove rxe0 and unload
#   cluster-smoke.sh mutual ROLE    reload listening; CONNECT to ROLE's node 200 times while
#                                   ROLE does the same to this one (both first contacts
#                                   together: a barrier between the two nodes once both
#                                   pools are up, and each dial held 3 s); one set must join the
#                                   two, dialed here or adopted, once, the lower address
#                                   having refused the higher's attempt; unload
#   cluster-smoke.sh cycles ROLE N [PROCS]
#                                   reload listening; CONNECT to ROLE's node 10 times (its set
#                                   made), then N CONNECT/DISCONNECT cycles: kernel memory
#                                   (slab + vmalloc) must stay flat across them; with PROCS,
#                                   then PROCS processes x N cycles at once, each CONNECT an
#                                   endpoint (pairing ports 7000 + i, nobody pairing back):
#                                   none may fail
#   cluster-smoke.sh steady         reload listening; once a peer's set is accepted, kernel
#                                   memory must stay flat over the next 10 s (the peer's
#                                   cycles run then); unload once it left, which must
#                                   show here with nobody waiting (200 s)
#   cluster-smoke.sh meta N [PARAM...]
#                                   reload serving the MetaServer (naming this node), with
#                                   the module parameters PARAM; wait
#                                   until N other nodes connected to it and left (150 s)
#   cluster-smoke.sh export META NAME
#                                   reload with META's node as the MetaServer (this node's
#                                   own when META is this role); publish 64 KiB as NAME,
#                                   wait for an importer to finish, revoke it, unload
#   cluster-smoke.sh hammer META ROLE NAME
#                                   as import, but keep READs in flight, have ROLE's guest
#                                   killed, check they fail in bounded time (and the set
#                                   QP's failure is logged), have it booted again, then
#                                   import and READ anew
#   cluster-smoke.sh names META hold NAME
#                                   as uid 1001 (group 100), publish NAME (mode 0640) and
#                                   NAME-p (0600) until the owner elsewhere is done
#   cluster-smoke.sh names META check ROLE NAME
#                                   from ROLE's NAME, as a user of its group, another user
#                                   and its owner: each gets what the mode grants (see
#                                   verify/src/bin/name-owners.rs); then users fill their
#                                   shares of names, per user and (at META) per node
#   cluster-smoke.sh failover META ROLE NAME
#                                   import NAME from ROLE; have META's guest (the
#                                   MetaServer) killed: with a fresh module, NAME cannot be
#                                   found (Unreachable, in bounded time); have it booted
#                                   again: with a fresh module, NAME is found (ROLE
#                                   published it again by itself), used, and done
#   cluster-smoke.sh tool serve META
#                                   reload with META's node as the MetaServer; `krcore
#                                   serve` publishes perf-target and echoes service 7100
#                                   for two peers; unload
#   cluster-smoke.sh tool measure META ROLE
#                                   reload with META's node as the MetaServer; the `krcore`
#                                   tool against ROLE's `krcore serve`: READ latency and
#                                   WRITE bandwidth on its published memory, the
#                                   Python package on it, krcore entries inside io_uring
#                                   (uring-lib/examples/in_io_uring.rs) on it, SEND
#                                   latency and bandwidth through its echo; unload
#   cluster-smoke.sh import META ROLE NAME
#                                   reload with META's node as the MetaServer; CONNECT to
#                                   ROLE's node, import NAME, READ/WRITE/CAS/FAA it with
#                                   the bytes checked, unload
#   cluster-smoke.sh messages ROLE recv|send N [META]
#                                   reload listening; two-sided messages with ROLE's node
#                                   (uring-lib/examples/messages.rs: two services, two
#                                   rings, N messages each way checked, a DISCONNECT with
#                                   receives advertised); with META's node as the
#                                   MetaServer (this node's own when META is this role),
#                                   N WRITE_IMMs into memory published by name too;
#                                   unload once ROLE is done. With KRCORE_LOSSY set (a
#                                   run on a lossy segment, the runner's --lose-one-in),
#                                   the transport must have repaired losses here
#   cluster-smoke.sh listener serve N [SERVICE]
#                                   reload; a ring LISTENs on SERVICE (77) and answers
#                                   the first message of each of N connecting virtual
#                                   QPs from any node (several processes per node) on
#                                   the virtual QP it accepted for it, never CONNECTing
#                                   (uring-lib/examples/listener.rs); unload once done
#   cluster-smoke.sh listener serve-py N
#                                   the same server in Python (uring-lib/python/examples/
#                                   listener.py, the krcore package's listen and accept)
#   cluster-smoke.sh listener client ROLE [PROCS [SERVICE [HOLD_MS]]]
#                                   reload; CONNECT to ROLE's node for SERVICE (77), say
#                                   hello with this node's address and the CONNECT's
#                                   port, check the echo: PROCS processes at once (1),
#                                   each checking its own, HOLD_MS after its CONNECT
#                                   (0); unload
#   cluster-smoke.sh listener self N
#                                   reload; the server of `serve N` and N client
#                                   processes of this node's own, at once
#   cluster-smoke.sh guard ROLE     a member serving the MetaServer, knocked on by ROLE (a
#                                   host that is not a member): once ROLE is done, this
#                                   node's counters must show the proofs it refused, a
#                                   dial admitted at once (the member's to the
#                                   MetaServer) and one whose clock was ahead answered
#                                   with a challenge (its CONNECT)
#   cluster-smoke.sh member META ROLE
#                                   a member: once ROLE listens to the segment, CONNECT to
#                                   META's node (a proof crosses the segment, admitted at
#                                   once), then set this node's clock a minute ahead,
#                                   reload and CONNECT again (a proof, then another
#                                   answering the challenge its time earned); unload
#   cluster-smoke.sh intruder META ROLE
#                                   no member (no key): capture ROLE's proof from the
#                                   segment, then knock on META's listener with crafted
#                                   requests and the captured one replayed (cm-intruder):
#                                   every one must be refused
#   cluster-smoke.sh spoofed VICTIM
#                                   a member listening while a stranger claims VICTIM's
#                                   address: once VICTIM is done, its bad proofs must have
#                                   been read and refused; unload
#   cluster-smoke.sh victim ROLE SPOOFER
#                                   a member whose address SPOOFER claims: once its flood
#                                   runs, 5 first contacts with ROLE's node (the module
#                                   reloaded before each) must each be admitted; unload
#   cluster-smoke.sh spoofer ROLE VICTIM
#                                   no member: with VICTIM's address added to eth0 (ARP
#                                   neither answered nor sent from it), 20 s of bad proofs
#                                   to ROLE's listener from that address (cm-intruder spoof)
#   cluster-smoke.sh crowd IMPORTER BYSTANDER
#                                   serve the MetaServer; publish kv and 16 more names;
#                                   once IMPORTER imported kv and BYSTANDER has a set to
#                                   this node, have BYSTANDER killed, close the 16 (their
#                                   revocations fill the table, waiting for it) and
#                                   deregister kv at once (remote_memory crowd)
#   cluster-smoke.sh await-revoke META
#                                   import META's kv; READ it until a READ fails: it must
#                                   fail BadDescriptor (revoked here), never on the wire
#   cluster-smoke.sh hogged-meta HOG VICTIM
#                                   serve the MetaServer; while HOG's node holds all it
#                                   may of this listener and VICTIM publishes, some of
#                                   HOG's must have been refused as past its part
#   cluster-smoke.sh hog META VICTIM
#                                   no module: a member's user program with the key
#                                   (cm-intruder hog) asks META's listener for 64 proved
#                                   MetaServer connections and holds them: 8 at most are
#                                   taken (the node's part), while VICTIM publishes
#   cluster-smoke.sh hogged META HOG
#                                   while HOG holds its connections, publish two names at
#                                   META: both must be published
#   cluster-smoke.sh bystander META make a set to META's node; wait to be killed
#   cluster-smoke.sh churn          serve the MetaServer with a peer table of one entry
#                                   (max_peers=1); publish kv; once an importer uses it
#                                   (bound_there in the peers file), CONNECT to a node
#                                   nobody answers at: refused TableFull, the importer's
#                                   set kept (remote_memory churn)
#   cluster-smoke.sh stay META      import META's kv and READ it through META's churn:
#                                   every READ answered (remote_memory stay)
#   cluster-smoke.sh fenced ROLE    serve the MetaServer; publish memory read-only, and
#                                   tell where memory that is never exported lies, with
#                                   its rkey (remote_memory fenced); once ROLE is done,
#                                   neither may have changed (test_unchecked_wire)
#   cluster-smoke.sh breach META    a member kernel that checks nothing
#                                   (test_unchecked_wire): READ META's read-only memory,
#                                   WRITE it, then WRITE the memory never exported with
#                                   its own rkey, then the MetaServer's region with its
#                                   rkey: META's NIC must refuse all three
#   cluster-smoke.sh dial-impostor ROLE
#                                   CONNECT to ROLE's node, an impostor (no key): the
#                                   CONNECT must fail, and this kernel's QP must never
#                                   answer the impostor (KRCORE_TEST_ARGS holds the
#                                   accept's check open: test_hold_accept_ms)
#   cluster-smoke.sh dial-yielder ROLE
#                                   CONNECT to ROLE's node, which refuses with a yield no
#                                   key proved: the CONNECT fails and this kernel never
#                                   yields (its dial goes on as after any refusal)
#   cluster-smoke.sh yielder ROLE   no module: refuse every request for 60 s with an
#                                   unproved yield (cm-intruder yielder)
#   cluster-smoke.sh dreq-held FORGER
#                                   serve the MetaServer and publish kv (remote_memory
#                                   hold); once FORGER forged DREQs to both ends of the
#                                   importer's set, let the importer finish: its READs must
#                                   all have been answered, and this kernel must have kept
#                                   the set (its log says the DREQ came unproved)
#   cluster-smoke.sh dreq-importer META FORGER
#                                   once FORGER listens to the segment, import META's kv
#                                   and READ it until META says done (remote_memory stay):
#                                   every READ answered through the forged DREQs
#   cluster-smoke.sh dreq-forger IMPORTER EXPORTER
#                                   no module: listen to the segment and forge a DREQ to
#                                   each end of every set connection made (cm-intruder
#                                   dreq), then tell EXPORTER
#   cluster-smoke.sh impostor ROLE  no module: accept ROLE's dial as a listener would,
#                                   proving no key, and READ from its QP at once
#                                   (cm-intruder impostor): it must not answer
#   cluster-smoke.sh bounded SILENT LIVE
#                                   reload with SILENT's node (muted: yank mute) as the
#                                   MetaServer; while other rings' PUBLISH and CONNECTs wait
#                                   on silent nodes (running, left by a closed ring, left
#                                   by an interrupted enter), this user's enters bounded
#                                   at 100 ms (NOPs, a CONNECT to LIVE) return within the
#                                   bound, and the CONNECT completes (net-bound)
#   cluster-smoke.sh live ROLE      a member up while ROLE's bounded run needs one
#   cluster-smoke.sh held-removal   serve the MetaServer, registered over this node's own
#                                   link; unload with each connection's teardown held 1 s
#                                   past its breaking (test_hold_teardown_ms) while the
#                                   tick's probe (every 100 ms) finds the link broken and
#                                   closes it: no warning (its CQ freed under a live QP)
#   cluster-smoke.sh yank dial|mute ROLE
#                                   mute: delete rxe0, so this host answers ARP but never
#                                   the CM. dial: CONNECT to ROLE's node (a dial that gets
#                                   no answer) and delete rxe0 1.5 s into it: the removal
#                                   must not wait for the dial, the CONNECT must fail, and
#                                   the kernel log must hold no warning
#   cluster-smoke.sh verbs_cm serve N
#                                   user-space verbs over rdma_cm (the baseline):
#                                   serve 64 KiB to N clients, until they left (300 s)
#   cluster-smoke.sh verbs_cm connect ROLE N
#                                   N fresh processes each connect to ROLE's server (every
#                                   stage timed) and READ 8 bytes; the medians are printed
#   cluster-smoke.sh figures far ROLE NAMES
#                                   make bench's far node (the MetaServer): serves ROLE's
#                                   figures across nodes (krcore-figures far) until done
#   cluster-smoke.sh figures across ROLE NAMES
#                                   make bench's measuring node: the figures across nodes
#                                   against ROLE (krcore-figures across), printed as a
#                                   FIGURES block for bench-report
#   cluster-smoke.sh figures cluster ROLE..
#                                   make bench's three-guest coordinator (the MetaServer):
#                                   the serverless hand-off and the full mesh over this
#                                   node and each ROLE's (krcore-figures cluster), printed
#                                   as a FIGURES block
#   cluster-smoke.sh figures node META
#                                   a node daemon of the three-guest figures (krcore-figures
#                                   node) with META's node as the MetaServer, until the
#                                   coordinator ends it
#   cluster-smoke.sh meta-slow ROLE reload naming ROLE's node as the MetaServer; with the
#                                   work on it held 30 s a pass and a PUBLISH waiting, a
#                                   CONNECT to ROLE's node must still be made at once
#   cluster-smoke.sh demo memory KEYS CLIENTS
#                                   the elastic key-value demo's memory node (make demo):
#                                   reload serving the MetaServer; build a table of KEYS
#                                   keys, publish it, serve it over rdma_cm until CLIENTS
#                                   verbs connections left (600 s); unload
#   cluster-smoke.sh demo compute ROLE KEYS WORKERS JOIN_MS RUN_MS OFFSET_MS
#                                   a compute node: reload with ROLE's node as the
#                                   MetaServer; launch krcore, then verbs workers against
#                                   ROLE's table (target/release/krcore-demo); unload
#   cluster-smoke.sh demo rounds ROLE KEYS N
#                                   as compute, the module loaded once, N times with one
#                                   worker per system, alone (make demo-alone); unload
set -u
VERBS_CM=$(dirname "$0")/../../target/release/verbs-cm
DEMO=$(dirname "$0")/../../target/release/krcore-demo
FIGURES=$(dirname "$0")/../../target/release/krcore-figures
MESSAGES=$(dirname "$0")/../../target/release/examples/messages
LISTENER=$(dirname "$0")/../../target/release/examples/listener
IN_IO_URING=$(dirname "$0")/../../target/release/examples/in_io_uring
ROOT=$(dirname "$0")/../..
CONNECT_PEER=$(dirname "$0")/../../target/release/examples/connect_peer
REMOTE_MEMORY=$(dirname "$0")/../../target/release/examples/remote_memory
NAME_OWNERS=$(dirname "$0")/../../target/release/name-owners
ELASTIC_WORKER=$(dirname "$0")/../../target/release/examples/elastic_worker
KRCORE_TOOL=$(dirname "$0")/../../target/release/krcore
INTRUDER=$(dirname "$0")/../../target/release/cm-intruder
NET_BOUND=$(dirname "$0")/../../target/release/net-bound
WIRE_SHARES=$(dirname "$0")/../../target/release/wire-shares
CM_PORT=7471
# The test bed's cluster key (a test's, known to all: a real cluster makes its own with
# `openssl rand -hex 32`). Without one a module joins no cluster.
CLUSTER_KEY=6b72636f72652d746573742d6265642d6b65792d6e6f742d612d736563726574
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
# Reloads the module with the cm port and any further parameters ($@).
# KRCORE_TEST_ARGS: more module parameters for every load (a run's fault injection).
reload() {
  rmmod krcore 2>/dev/null
  # shellcheck disable=SC2086 # several parameters, split
  insmod "$KRCORE_KO" cm_port=$CM_PORT cluster_key=$CLUSTER_KEY ${KRCORE_TEST_ARGS:-} "$@"
}
# Reloads naming role $1's node as the MetaServer; $peer: role $2's address.
with_meta() {
  meta=$(addr_of "$1") || exit 1
  peer=$(addr_of "$2") || exit 1
  reload meta_server="$meta" || exit 1
}
# Fails the role after printing what the module holds (sets, links, listens: the
# peers file), its counters and rxe's, so a failed run's log shows the state it failed in.
fail_with_state() {
  echo "$KRCORE_NODE: failed; the module's peers file (pool lines left out):" >&2
  "$KRCORE_TOOL" peers | grep -v "pool qp" >&2
  "$KRCORE_TOOL" counters >&2
  # rxe's own counters (retransmissions, retries exhausted, RNR), those not zero.
  echo "$KRCORE_NODE: rxe0's counters not zero:" \
    $(grep -v '^0$' /sys/class/infiniband/rxe0/ports/1/hw_counters/* 2>/dev/null | sed 's|.*/||') >&2
  exit 1
}
# Reloads, meets the node at $1 (barrier port $2) and CONNECTs to it once: the CONNECT
# must fail ($3 says what the node is); exits the role otherwise.
dial_fails() {
  reload || exit 1
  pool_ready || exit 1
  barrier "$1" "$2" || exit 1
  if "$CONNECT_PEER" "$1" 1; then
    echo "$KRCORE_NODE: a CONNECT to $3 succeeded" >&2
    exit 1
  fi
}
# CONNECTs $2 times to role $1's node (connect_peer), retried while its module is not
# listening yet (up to 60 s).
connect_until() {
  peer=$(addr_of "$1") || return 1
  for _ in $(seq 30); do
    "$CONNECT_PEER" "$peer" "$2" && return 0
    sleep 2
  done
  echo "$KRCORE_NODE: no CONNECT to $1 ($peer) in 60 s" >&2
  return 1
}
# Waits until this node's pool is built (the module's prewarm), up to 30 s: a peer's
# request for a set is refused until then.
pool_ready() {
  for _ in $(seq 300); do
    "$KRCORE_TOOL" peers 2>/dev/null | grep -q "pool qp 0 ready" && return 0
    sleep 0.1
  done
  echo "$KRCORE_NODE: no pool in 30 s" >&2
  return 1
}
# Waits until the node at address $1 reached its own call (a TCP handshake each way
# on port $2, 7500 if none, up to $3 s, 120 if none), so that what follows starts on both nodes
# within a poll interval however far apart they booted. Either node's return implies
# the other's handshakes are done too (its connect was accepted, or queued in the
# backlog). A second meeting takes another port: a late handshake of the first must
# not land in the second's listener.
barrier() {
  /usr/bin/python3 - "$1" "${2:-7500}" "${3:-120}" <<'PY'
import socket, sys, time
peer, port, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", port))
srv.listen(1)
srv.settimeout(0.02)
until = time.monotonic() + secs
got = sent = False
while not (got and sent):
    if time.monotonic() > until:
        sys.exit(f"no barrier with {peer} on port {port} in {secs} s")
    if not sent:
        try:
            socket.create_connection((peer, port), timeout=0.2).close()
            sent = True
        except OSError:
            time.sleep(0.02)
    if not got:
        try:
            srv.accept()[0].close()
            got = True
        except OSError:
            pass
PY
}
# Runs the rest as uid $1 (its own group, no others), in place of the (sub)shell it is
# called in: only from `$(...)` or with `&`, whose $! is then the program's own pid.
as_uid() {
  uid=$1; shift
  exec setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"
}
unload() {
  rmmod krcore || exit 1
  echo "$KRCORE_NODE: module unloaded"
}
# A kworker running krcore_meta's work, or one running ib-comp-wq's work for 0.3 s on
# end (a held request, not a completion passing through): its comm, or nothing.
serving_worker() {
  w=""
  # Builtins only: a fork per process would take seconds a sample under emulation.
  for f in /proc/[0-9]*/comm; do
    read -r n 2>/dev/null <"$f" || continue
    case "$n" in
    *+krcore_meta) echo "$n"; return 0 ;;
    *+ib-comp-wq) w=$f ;;
    esac
  done
  [ -n "$w" ] || return 0
  sleep 0.3
  read -r n 2>/dev/null <"$w" || return 0
  case "$n" in *+ib-comp-wq) echo "$n" ;; esac
}
# uid $1 CONNECTs $4 times to service $3 at $2 and holds what it got (up to 120 s):
# returns once it counted (its line in $5, its progress in $5.err); its pid: $held.
held_connect() {
  as_uid "$1" timeout 200 "$WIRE_SHARES" connect "$2" "$3" "$4" 120 >"$5" 2>"$5.err" & held=$!
  until grep -q taken "$5" || ! kill -0 $held 2>/dev/null; do sleep 0.2; done
}
# Unloads once the rings just closed have let go (their virtual QPs' DISCONNECTs still
# going), within 30 s.
unload_settled() {
  for _ in $(seq 60); do
    rmmod krcore 2>/dev/null && { echo "$KRCORE_NODE: module unloaded"; return 0; }
    sleep 0.5
  done
  unload
}
# The kernel log from the module's last load on: what this scene's module said (a run of
# several scenes reloads it before each, guest/scene.sh).
klog() { dmesg | awk '/krcore: loaded/ { n = 0 } { l[n++] = $0 } END { for (i = 0; i < n; i++) print l[i] }'; }
# How many lines of klog contain $1.
count() { klog | grep -c "$1"; }
# Kernel memory in slabs and vmalloc areas, kB.
kmem() { awk '/^(Slab|VmallocUsed):/ { s += $2 } END { print s }' /proc/meminfo; }
# Fails unless kernel memory grew by less than 512 kB from $1 to $2 over $3.
flat() {
  echo "$KRCORE_NODE: kernel memory (slab + vmalloc) $1 kB -> $2 kB over $3"
  [ $(($2 - $1)) -lt 512 ] || { echo "$KRCORE_NODE: kernel memory grew by $(($2 - $1)) kB" >&2; exit 1; }
}
case "$1" in
listen)
  reload || exit 1
  for _ in $(seq 60); do
    if [ "$(count "accepted a peer kernel")" -ge "$2" ]; then
      echo "$KRCORE_NODE ($KRCORE_ADDR): accepted $2 peer kernel connection(s)"
      sleep 3
      rmmod krcore || exit 1
      echo "$KRCORE_NODE: unloaded with the connection(s) live"
      exit 0
    fi
    sleep 1
  done
  echo "$KRCORE_NODE: accepted fewer than $2 peer kernel connections in 60 s" >&2
  exit 1
  ;;
dial)
  peer=$(addr_of "$2") || exit 1
  for _ in $(seq 30); do
    reload cm_peer="$peer" || exit 1
    for _ in $(seq 40); do
      if [ "$(count "connected to the peer kernel")" -gt 0 ]; then
        echo "$KRCORE_NODE ($KRCORE_ADDR) -> $2 ($peer): $(klog | grep "connected to the peer kernel" | tail -1 | sed 's/.*krcore: //')"
        rdma link delete rxe0 || exit 1
        rmmod krcore || exit 1
        echo "$KRCORE_NODE: rxe0 removed with the connection live, module unloaded"
        exit 0
      fi
      [ "$(count "no connection to the peer kernel")" -gt 0 ] && break
      sleep 0.5
    done
    sleep 1
  done
  echo "$KRCORE_NODE: no kernel connection to $2 ($peer) in 60 s" >&2
  klog | grep krcore | tail -5 >&2
  exit 1
  ;;
connect)
  shift
  reload || exit 1
  for role in "$@"; do
    connect_until "$role" 200 || exit 1
  done
  # Each peer unloads its module: its set breaks, and the next CONNECT tries a new
  # one, which fails by name while nobody listens there.
  for role in "$@"; do
    peer=$(addr_of "$role") || exit 1
    gone=
    for _ in $(seq 30); do
      if ! out=$("$CONNECT_PEER" "$peer" 1 2>&1); then gone=1; break; fi
      sleep 1
    done
    [ -n "$gone" ] || { echo "$KRCORE_NODE: CONNECTs to $role still succeed 30 s after it unloaded" >&2; exit 1; }
    echo "$KRCORE_NODE: after $role unloaded: $out"
    echo "$out" | grep -q "Unreachable" || exit 1
  done
  rdma link delete rxe0 && rmmod krcore || exit 1
  echo "$KRCORE_NODE: rxe0 removed, module unloaded"
  ;;
mutual)
  peer=$(addr_of "$2") || exit 1
  # Each dial held 3 s, and both nodes' first CONNECTs start together (the barrier,
  # once both pools are up): the two dials surely overlap, however far apart the
  # guests booted (the debug kernel's boots differ by seconds).
  reload cm_dial_delay_ms=3000 || exit 1
  pool_ready || exit 1
  barrier "$peer" || exit 1
  "$CONNECT_PEER" "$peer" 200 || exit 1
  # One set joins the two nodes: it came up here once, dialed here (and nothing of
  # ROLE's accepted) or adopted (both of its connections accepted here).
  up=$(count "set to $peer: up")
  how=$(klog | grep "set to $peer: up" | tail -1 | sed 's/.*up, //')
  accepted=$(count "accepted a peer kernel's peer connection")
  echo "$KRCORE_NODE: the set to $2 came up $up time(s), $how; accepted $accepted connection(s) of $2's"
  klog | grep -E "set to $peer: (refused|our attempt)" | sed "s/.*krcore: /$KRCORE_NODE: /"
  [ "$up" -eq 1 ] || { echo "$KRCORE_NODE: not one set to $2" >&2; exit 1; }
  # Both at once: the lower address refused the higher's attempt, which yielded.
  if [ "${KRCORE_ADDR##*.}" -lt "${peer##*.}" ]; then race="refused"; else race="our attempt yielded"; fi
  [ "$(count "set to $peer: $race")" -ge 1 ] || { echo "$KRCORE_NODE: the dials did not overlap (no \"$race\")" >&2; exit 1; }
  case "$how" in
  dialed*) [ "$accepted" -eq 0 ] ;;
  adopted*) [ "$accepted" -eq 2 ] ;;
  *) false ;;
  esac || { echo "$KRCORE_NODE: a second set between this node and $2" >&2; exit 1; }
  sleep 5
  rmmod krcore || exit 1
  ;;
messages)
  peer=$(addr_of "$2") || exit 1
  if [ $# -ge 5 ]; then
    meta=$(addr_of "$5") || exit 1
    reload meta_server="$meta" || exit 1
    "$MESSAGES" "$3" "$peer" "$4" imm || fail_with_state
  else
    reload || exit 1
    "$MESSAGES" "$3" "$peer" "$4" || fail_with_state
  fi
  if [ -n "${KRCORE_LOSSY:-}" ]; then
    # What rxe repaired: gaps and duplicates it received, NAKs and timeouts it sent for.
    repairs=0
    for c in out_of_seq_request duplicate_request rcvd_seq_err completer_retry_err; do
      n=$(cat "/sys/class/infiniband/rxe0/ports/1/hw_counters/$c" 2>/dev/null || echo 0)
      repairs=$((repairs + n))
      printf '%s: rxe %s %s\n' "$KRCORE_NODE" "$c" "$n"
    done
    [ "$repairs" -gt 0 ] || { echo "$KRCORE_NODE: a lossy segment, but rxe repaired nothing: the test tested no loss" >&2; exit 1; }
    echo "$KRCORE_NODE: every message arrived whole over a lossy segment ($repairs repairs by the transport)"
  fi
  case "${KRCORE_TEST_ARGS:-}" in
  *test_notice_echo=1*)
    # Every notice from the peer was taken twice, then cut short: the messages above
    # were each received once and whole; the short copies were dropped and counted.
    dropped=$("$KRCORE_TOOL" counters | awk '/peer notices dropped/ { s += $NF } END { print s + 0 }')
    echo "$KRCORE_NODE: every peer notice taken twice and cut short; $dropped short copies dropped"
    [ "$dropped" -gt 0 ] || { echo "$KRCORE_NODE: no short notice was dropped" >&2; exit 1; }
    ;;
  esac
  # The peer may still be finishing with this node's kernel (its DISCONNECTs).
  sleep 3
  unload
  ;;
guard)
  intruder=$(addr_of "$2") || exit 1
  reload meta_server="$KRCORE_ADDR" || exit 1
  barrier "$intruder" 7504 300 || exit 1
  refused=$("$KRCORE_TOOL" counters | awk '/peer proofs refused/ { s += $NF } END { print s + 0 }')
  echo "$KRCORE_NODE: proofs refused: $refused; accepted: $(count "accepted a peer kernel")"
  klog | grep "proved no cluster key" | tail -2 | sed "s/.*krcore: /$KRCORE_NODE: /"
  # The PROVE with no key's tag, the same challenge again, the MetaServer's, the replay.
  [ "$refused" -ge 4 ] || { echo "$KRCORE_NODE: fewer than 4 proofs refused" >&2; exit 1; }
  at_once=$("$KRCORE_TOOL" counters | awk '/peer dials at once/ { s += $NF } END { print s + 0 }')
  stale=$("$KRCORE_TOOL" counters | awk '/peer proofs stale/ { s += $NF } END { print s + 0 }')
  echo "$KRCORE_NODE: dials admitted at once: $at_once; proofs out of time: $stale"
  [ "$at_once" -ge 1 ] || { echo "$KRCORE_NODE: no dial was admitted at its first request" >&2; exit 1; }
  [ "$stale" -ge 1 ] || { echo "$KRCORE_NODE: the dial from a clock ahead was not challenged" >&2; exit 1; }
  unload
  ;;
member)
  meta=$(addr_of "$2") || exit 1
  intruder=$(addr_of "$3") || exit 1
  reload meta_server="$meta" || exit 1
  barrier "$intruder" 7502 300 || exit 1
  # Past the 5 s after META's start in which its gate admits no FRESH proof (one an
  # earlier gate admitted could be that far ahead): this dial is admitted at once.
  sleep 6
  connect_until "$2" 10 || exit 1
  # A minute ahead: out of the listener's time window, so the new set's first proof
  # is answered with a challenge and the second, answering it, connects.
  date -s "@$(( $(date +%s) + 60 ))" >/dev/null || exit 1
  reload meta_server="$meta" || exit 1
  connect_until "$2" 10 || exit 1
  barrier "$intruder" 7503 300 || exit 1
  unload
  ;;
intruder)
  meta=$(addr_of "$2") || exit 1
  member=$(addr_of "$3") || exit 1
  "$INTRUDER" capture "$TMPDIR/proof" 200 & cap=$!
  sleep 1
  barrier "$member" 7502 300 || exit 1
  barrier "$member" 7503 300 || exit 1
  wait $cap || exit 1
  "$INTRUDER" knock "$meta" $CM_PORT "$TMPDIR/proof" || exit 1
  barrier "$meta" 7504 300 || exit 1
  ;;
spoofed)
  victim=$(addr_of "$2") || exit 1
  reload || exit 1
  pool_ready || exit 1
  barrier "$victim" 7511 120 || exit 1
  barrier "$victim" 7512 300 || exit 1
  refused=$("$KRCORE_TOOL" counters | awk '/peer proofs refused/ { s += $NF } END { print s + 0 }')
  echo "$KRCORE_NODE: proofs refused while $2's address was claimed: $refused"
  [ "$refused" -ge 100 ] || { echo "$KRCORE_NODE: the stranger's proofs did not reach the listener" >&2; exit 1; }
  unload
  ;;
victim)
  peer=$(addr_of "$2") || exit 1
  spoofer=$(addr_of "$3") || exit 1
  barrier "$peer" 7511 120 || exit 1
  barrier "$spoofer" 7513 120 || exit 1
  # The flood under way.
  sleep 5
  for i in 1 2 3 4 5; do
    reload || exit 1
    pool_ready || exit 1
    start=$(date +%s%N)
    out=$("$CONNECT_PEER" "$peer" 1 2>&1) || {
      echo "$out" >&2
      echo "$KRCORE_NODE: first contact $i with $2 refused while a stranger claims this node's address" >&2
      fail_with_state
    }
    echo "$KRCORE_NODE: first contact $i with $2 admitted in $((($(date +%s%N) - start) / 1000000)) ms while a stranger claims this node's address"
  done
  barrier "$spoofer" 7514 120 || exit 1
  barrier "$peer" 7512 120 || exit 1
  unload
  ;;
spoofer)
  target=$(addr_of "$2") || exit 1
  as=$(addr_of "$3") || exit 1
  rmmod krcore 2>/dev/null
  # The claimed address on eth0, for RoCE only: no ARP answered for any address here
  # (arp_ignore 8), and none asked from the claimed one (arp_announce 2), so the
  # segment's neighbours keep the victim's own link address.
  for c in all eth0; do
    sysctl -qw net.ipv4.conf.$c.arp_ignore=8 net.ipv4.conf.$c.arp_announce=2 || exit 1
  done
  # Met before the address is taken: while this host holds it, it is this host's.
  barrier "$as" 7513 120 || exit 1
  ip addr add "$as/32" dev eth0 || exit 1
  sleep 1
  "$INTRUDER" spoof "$target" $CM_PORT "$as" 20 || exit 1
  ip addr del "$as/32" dev eth0
  for c in all eth0; do
    sysctl -qw net.ipv4.conf.$c.arp_ignore=0 net.ipv4.conf.$c.arp_announce=0
  done
  barrier "$as" 7514 120 || exit 1
  ;;
crowd)
  importer=$(addr_of "$2") || exit 1
  bystander=$(addr_of "$3") || exit 1
  reload meta_server="$KRCORE_ADDR" || exit 1
  rm -f "$TMPDIR/go"
  "$REMOTE_MEMORY" crowd kv 16 150 "$TMPDIR/go" >"$TMPDIR/crowd.out" 2>&1 &
  pid=$!
  for _ in $(seq 1500); do
    grep -q "imported" "$TMPDIR/crowd.out" && klog | grep -q "set to $bystander: up" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "KRCORE-CLUSTER: kill $3"
  sleep 2
  touch "$TMPDIR/go"
  rc=0; wait $pid || rc=$?
  sed "s/^/$KRCORE_NODE: /" "$TMPDIR/crowd.out"
  [ "$rc" = 0 ] || fail_with_state
  echo "KRCORE-CLUSTER: boot $3"
  sleep 3
  unload
  ;;
churn)
  reload meta_server="$KRCORE_ADDR" max_peers=1 || exit 1
  rm -f "$TMPDIR/go"
  "$REMOTE_MEMORY" churn kv 150 "$TMPDIR/go" >"$TMPDIR/churn.out" 2>&1 &
  pid=$!
  # Once imported, the importer's word that it uses the set must show here (its Use
  # notice routed) before this node's CONNECT tries the table.
  for _ in $(seq 300); do
    grep -q "imported" "$TMPDIR/churn.out" && "$KRCORE_TOOL" peers | grep -q "bound_there" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  "$KRCORE_TOOL" peers | grep -q "bound_there" || {
    echo "$KRCORE_NODE: the importer's use of the set never showed (bound_there)" >&2
    fail_with_state
  }
  touch "$TMPDIR/go"
  rc=0; wait $pid || rc=$?
  sed "s/^/$KRCORE_NODE: /" "$TMPDIR/churn.out"
  [ "$rc" = 0 ] || fail_with_state
  # The importer may still be finishing with this node's kernel.
  sleep 3
  unload
  ;;
stay)
  with_meta "$2" "$2"
  "$REMOTE_MEMORY" stay "$peer" kv 150 || fail_with_state
  unload
  ;;
await-revoke)
  with_meta "$2" "$2"
  "$REMOTE_MEMORY" await-revoke "$peer" kv 150 || fail_with_state
  unload
  ;;
fenced)
  importer=$(addr_of "$2") || exit 1
  reload meta_server="$KRCORE_ADDR" test_unchecked_wire=1 || exit 1
  rm -f "$TMPDIR/go"
  "$REMOTE_MEMORY" fenced ro 200 "$TMPDIR/go" &
  pid=$!
  # The importer is done (whatever its outcome) at the barrier.
  barrier "$importer" 7530 200 || { kill $pid; exit 1; }
  touch "$TMPDIR/go"
  rc=0; wait $pid || rc=$?
  sleep 2
  unload
  exit $rc
  ;;
breach)
  meta=$(addr_of "$2") || exit 1
  reload meta_server="$meta" test_unchecked_wire=1 || exit 1
  rc=0; "$REMOTE_MEMORY" breach "$meta" ro 150 || rc=$?
  barrier "$meta" 7530 200 || exit 1
  unload
  exit $rc
  ;;
dial-impostor)
  peer=$(addr_of "$2") || exit 1
  dial_fails "$peer" 7510 "an impostor"
  echo "$KRCORE_NODE: the CONNECT to the impostor failed, as it must"
  barrier "$peer" 7511 || exit 1
  unload
  ;;
dial-yielder)
  peer=$(addr_of "$2") || exit 1
  dial_fails "$peer" 7530 "a host that is no member"
  yielded=$(count "yielded to the peer's")
  echo "$KRCORE_NODE: the CONNECT failed; yields taken from a host with no key: $yielded"
  [ "$yielded" = 0 ] || { echo "$KRCORE_NODE: an unproved yield made this dialer yield" >&2; exit 1; }
  barrier "$peer" 7531 || exit 1
  unload
  ;;
yielder)
  peer=$(addr_of "$2") || exit 1
  rmmod krcore 2>/dev/null
  "$INTRUDER" yielder $CM_PORT 60 & pid=$!
  sleep 1
  barrier "$peer" 7530 || exit 1
  barrier "$peer" 7531 120 || exit 1
  rc=0; wait $pid || rc=$?
  exit $rc
  ;;
dreq-held)
  forger=$(addr_of "$2") || exit 1
  reload meta_server="$KRCORE_ADDR" || exit 1
  rm -f "$TMPDIR/go"
  "$REMOTE_MEMORY" hold kv 150 "$TMPDIR/go" >"$TMPDIR/hold.out" 2>&1 &
  pid=$!
  barrier "$forger" 7511 300 || exit 1
  # The importer READs on a while the forged DREQs land.
  sleep 2
  touch "$TMPDIR/go"
  rc=0; wait $pid || rc=$?
  sed "s/^/$KRCORE_NODE: /" "$TMPDIR/hold.out"
  [ "$rc" = 0 ] || fail_with_state
  klog | grep "unproved disconnect request" || {
    echo "$KRCORE_NODE: no forged DREQ reached this kernel's CM" >&2
    fail_with_state
  }
  sleep 3
  unload
  ;;
dreq-importer)
  forger=$(addr_of "$3") || exit 1
  with_meta "$2" "$2"
  barrier "$forger" 7510 300 || exit 1
  "$REMOTE_MEMORY" stay "$peer" kv 150 || fail_with_state
  klog | grep "unproved disconnect request" || {
    echo "$KRCORE_NODE: no forged DREQ reached this kernel's CM" >&2
    fail_with_state
  }
  unload
  ;;
dreq-forger)
  importer=$(addr_of "$2") || exit 1
  exporter=$(addr_of "$3") || exit 1
  "$INTRUDER" dreq 60 >"$TMPDIR/dreq.out" 2>&1 &
  pid=$!
  sleep 1
  barrier "$importer" 7510 300 || exit 1
  # Done once a set's connections were seen made and forged at: the importer's set
  # has QPS_PER_SET (2) of them.
  for _ in $(seq 600); do
    [ "$(grep -c "forged a DREQ to each end" "$TMPDIR/dreq.out")" -ge 2 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  sed "s/^/$KRCORE_NODE: /" "$TMPDIR/dreq.out"
  [ "$(grep -c "forged a DREQ to each end" "$TMPDIR/dreq.out")" -ge 2 ] || {
    echo "$KRCORE_NODE: the set's connections were not seen made" >&2
    exit 1
  }
  barrier "$exporter" 7511 300 || exit 1
  ;;
impostor)
  peer=$(addr_of "$2") || exit 1
  rmmod krcore 2>/dev/null
  # The dialer holds its check 3 s (KRCORE_TEST_ARGS on its side): 10 s covers it.
  "$INTRUDER" impostor $CM_PORT 120 10 & pid=$!
  sleep 1
  barrier "$peer" 7510 || exit 1
  rc=0; wait $pid || rc=$?
  barrier "$peer" 7511 || exit 1
  exit $rc
  ;;
bystander)
  # Booted again after the kill: nothing more to do.
  [ "$KRCORE_BOOT" = 1 ] || exit 0
  meta=$(addr_of "$2") || exit 1
  reload meta_server="$meta" || exit 1
  connect_until "$2" 1 || exit 1
  sleep 600
  ;;
bounded)
  silent=$(addr_of "$2") || exit 1
  live=$(addr_of "$3") || exit 1
  barrier "$silent" 7505 || exit 1
  barrier "$live" 7507 || exit 1
  reload meta_server="$silent" || exit 1
  "$NET_BOUND" "$silent" "$live" || exit 1
  barrier "$silent" 7506 || exit 1
  barrier "$live" 7508 || exit 1
  unload
  ;;
live)
  peer=$(addr_of "$2") || exit 1
  reload || exit 1
  pool_ready || exit 1
  barrier "$peer" 7507 || exit 1
  barrier "$peer" 7508 300 || exit 1
  unload
  ;;
held-removal)
  reload meta_server="$KRCORE_ADDR" meta_check_ms=100 test_hold_teardown_ms=1000 || exit 1
  for _ in $(seq 300); do
    klog | grep -q "registered with the MetaServer" && break
    sleep 0.1
  done
  klog | grep -q "registered with the MetaServer" || {
    echo "$KRCORE_NODE: never registered with its own MetaServer" >&2
    fail_with_state
  }
  unload
  if klog | grep -E "WARNING:|BUG:" >&2; then exit 1; fi
  echo "$KRCORE_NODE: unloaded with its MetaServer link's teardown held; kernel log clean"
  ;;
yank)
  peer=$(addr_of "$3") || exit 1
  case "$2" in
  mute)
    rdma link delete rxe0 || exit 1
    echo "$KRCORE_NODE: rxe0 deleted: ARP answered, the CM never"
    barrier "$peer" 7505 || exit 1
    barrier "$peer" 7506 || exit 1
    ;;
  dial)
    reload || exit 1
    pool_ready || exit 1
    barrier "$peer" 7505 || exit 1
    "$CONNECT_PEER" "$peer" 1 >"$TMPDIR/yank.out" 2>&1 &
    pid=$!
    sleep 1.5
    start=$(date +%s%N)
    rdma link delete rxe0 || exit 1
    ms=$((($(date +%s%N) - start) / 1000000))
    rc=0; wait $pid || rc=$?
    waited=$((($(date +%s%N) - start) / 1000000))
    echo "$KRCORE_NODE: rxe0 deleted in $ms ms, 1.5 s into a dial to $3; the CONNECT ended (rc=$rc) $waited ms after: $(tail -1 "$TMPDIR/yank.out")"
    [ "$rc" != 0 ] || { echo "$KRCORE_NODE: the CONNECT to a host that never answers succeeded" >&2; exit 1; }
    [ "$ms" -lt 5000 ] || { echo "$KRCORE_NODE: the removal waited for the dial" >&2; exit 1; }
    # From the module's load on: a report of the boot before it is not krcore's
    # (the harness files those apart; the debug kernel under TCG makes one at times).
    if klog | grep -E "WARNING:|BUG:" >&2; then exit 1; fi
    barrier "$peer" 7506 || exit 1
    unload
    ;;
  esac
  ;;
vanish)
  # A node whose only work with a peer is a receive waiting learns at once that the
  # peer's module went (the CM's close): the receive ends PeerGone, well within the
  # request deadline (nothing is in flight, so no deadline could end it), and the
  # kernel log says why the set's QP failed. "leave" is the peer that unloads.
  peer=$(addr_of "$3") || exit 1
  reload || exit 1
  pool_ready || exit 1
  case "$2" in
  leave)
    barrier "$peer" 7500 || exit 1
    barrier "$peer" 7501 || exit 1
    rmmod krcore || exit 1
    echo "$KRCORE_NODE: module unloaded while $3 waits on a receive"
    ;;
  stay)
    barrier "$peer" 7500 || exit 1
    "$MESSAGES" vanish "$peer" >"$TMPDIR/vanish.out" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      grep -q "a receive is posted" "$TMPDIR/vanish.out" && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    grep -q "a receive is posted" "$TMPDIR/vanish.out" || { cat "$TMPDIR/vanish.out" >&2; fail_with_state; }
    barrier "$peer" 7501 || exit 1
    start=$(date +%s%N)
    rc=0; wait $pid || rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    sed "s/^/$KRCORE_NODE: /" "$TMPDIR/vanish.out"
    [ "$rc" = 0 ] || fail_with_state
    echo "$KRCORE_NODE: the receive ended $ms ms after $3 began to unload (request deadline 5000 ms)"
    [ "$ms" -lt 5000 ] || { echo "$KRCORE_NODE: not before the deadline" >&2; exit 1; }
    klog | grep "set to $peer: QP [0-9]* failed (peer_gone)" || {
      echo "$KRCORE_NODE: the set QP's failure (peer_gone) is not in the kernel log" >&2
      exit 1
    }
    unload
    ;;
  esac
  ;;
listener)
  reload || exit 1
  case "$2" in
  # Bounded: a receive waits for its message as long as it takes, so a lost one would
  # otherwise hold the run to the runner's timeout, with no state shown.
  serve) timeout 240 "$LISTENER" serve "${4:-77}" "$3" || fail_with_state ;;
  serve-py)
    "$ROOT/target/pyvenv/bin/python3" "$ROOT/uring-lib/python/examples/listener.py" 77 "$3" || fail_with_state
    ;;
  client)
    peer=$(addr_of "$3") || exit 1
    timeout 240 "$LISTENER" client "$peer" "${5:-77}" "$KRCORE_ADDR" "${4:-1}" "${6:-0}" || fail_with_state
    ;;
  self)
    "$LISTENER" serve 77 "$3" &
    server=$!
    "$LISTENER" client "$KRCORE_ADDR" 77 "$KRCORE_ADDR" "$3" || fail_with_state
    wait "$server" || fail_with_state
    ;;
  esac
  # The other end may still be finishing with this node's kernel (its DISCONNECTs).
  sleep 3
  unload
  ;;
verbs_cm)
  case "$2" in
  serve) "$VERBS_CM" serve 7472 "$3" 300 || exit 1 ;;
  connect)
    peer=$(addr_of "$3") || exit 1
    all=
    for _ in $(seq 60); do
      # The first connection also waits for the server to listen.
      if all=$("$VERBS_CM" connect "$peer" 7472 2>&1); then break; fi
      sleep 1
    done
    case "$all" in verbs-cm:*) ;; *) echo "$KRCORE_NODE: no rdma_cm connection to $3 in 60 s: $all" >&2; exit 1 ;; esac
    for _ in $(seq $(($4 - 1))); do
      one=$("$VERBS_CM" connect "$peer" 7472) || exit 1
      all="$all
$one"
    done
    # Medians over the N processes, per stage.
    med=
    for k in addr route qp mr connect total read; do
      m=$(printf '%s\n' "$all" | sed -n "s/.* $k \([0-9]*\) .*/\1/p" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
      med="$med$k $m us  "
    done
    echo "$KRCORE_NODE: verbs over rdma_cm to $3, $4 fresh processes, medians: $med"
    ;;
  esac
  ;;
figures)
  peer=$(addr_of "$3") || exit 1
  case "$2" in
  far)
    # One user publishes all the names: its shares (1,024 names a user, 4,096 a node
    # by default) raised to hold them.
    reload meta_server="$KRCORE_ADDR" max_names_per_user=$(($4 + 8)) max_names_per_node=$(($4 + 8)) || exit 1
    "$FIGURES" far "$peer" "$4" || exit 1
    ;;
  across)
    reload meta_server="$peer" || exit 1
    KRCORE_FIGURES_INSMOD="cm_port=$CM_PORT cluster_key=$CLUSTER_KEY meta_server=$peer" "$FIGURES" across "$peer" "$4" || exit 1
    ;;
  cluster)
    # The other roles' addresses; this node's module is the MetaServer.
    shift 2
    others=""
    for r in "$@"; do others="$others $(addr_of "$r")" || exit 1; done
    reload meta_server="$KRCORE_ADDR" || exit 1
    KRCORE_FIGURES_INSMOD="cm_port=$CM_PORT cluster_key=$CLUSTER_KEY meta_server=$KRCORE_ADDR" "$FIGURES" cluster $others || exit 1
    ;;
  node)
    reload meta_server="$peer" || exit 1
    KRCORE_FIGURES_INSMOD="cm_port=$CM_PORT cluster_key=$CLUSTER_KEY meta_server=$peer" "$FIGURES" node || exit 1
    ;;
  *) echo "usage: cluster-smoke.sh figures far|across ROLE NAMES | figures cluster ROLE.. | figures node META" >&2; exit 2 ;;
  esac
  unload
  ;;
demo)
  case "$2" in
  memory)
    reload meta_server="$KRCORE_ADDR" || exit 1
    "$DEMO" memory "$3" "$4" 600 || exit 1
    ;;
  compute)
    meta=$(addr_of "$3") || exit 1
    reload meta_server="$meta" || exit 1
    shift 3
    "$DEMO" compute "$meta" "$@" || exit 1
    ;;
  rounds)
    # One module load, then N launches of one worker per system, one at a time.
    meta=$(addr_of "$3") || exit 1
    reload meta_server="$meta" || exit 1
    for _ in $(seq "$5"); do
      "$DEMO" compute "$meta" "$4" 1 1000 1500 0 || exit 1
    done
    ;;
  *) echo "usage: cluster-smoke.sh demo memory KEYS CLIENTS | demo compute ROLE KEYS WORKERS JOIN_MS RUN_MS OFFSET_MS | demo rounds ROLE KEYS N" >&2; exit 2 ;;
  esac
  unload
  ;;
cycles)
  peer=$(addr_of "$2") || exit 1
  reload || exit 1
  ok=
  for _ in $(seq 30); do
    if "$CONNECT_PEER" "$peer" 10 >/dev/null; then ok=1; break; fi
    sleep 2
  done
  [ -n "$ok" ] || { echo "$KRCORE_NODE: no CONNECT to $2 ($peer) in 60 s" >&2; exit 1; }
  before=$(kmem)
  "$CONNECT_PEER" "$peer" "$3" || exit 1
  flat "$before" "$(kmem)" "$3 CONNECT/DISCONNECT cycles to $2"
  # Endpoints: PROCS processes cycling at once, each CONNECT a link (a Hello and a
  # Leave to the peer); none may fail (TableFull among them).
  if [ -n "$4" ]; then
    "$CONNECT_PEER" "$peer" "$3" 7000 "$4" &
    procs=$!
    # Bounded here, so a hung run shows where it waits (not the runner's timeout).
    for _ in $(seq 150); do kill -0 "$procs" 2>/dev/null || break; sleep 1; done
    if kill -0 "$procs" 2>/dev/null; then
      echo "$KRCORE_NODE: $4 processes' cycles not done in 150 s; where they wait:" >&2
      for p in $(pgrep -f "connect_peer $peer $3 "); do
        echo "pid $p: $(grep State /proc/$p/status)" >&2; cat "/proc/$p/stack" >&2
      done
      fail_with_state
    fi
    wait "$procs" || exit 1
  fi
  rmmod krcore || exit 1
  ;;
steady)
  reload || exit 1
  for _ in $(seq 60); do
    [ "$(count "accepted a peer kernel")" -ge 2 ] && break
    sleep 1
  done
  before=$(kmem)
  sleep 10
  flat "$before" "$(kmem)" "10 s of a peer's CONNECT/DISCONNECT cycles"
  # Up until the peer is done (its 8 processes' cycles come after its own; a slow host
  # takes minutes): unloading under them fails them Unreachable.
  # Its unload fails the set's QPs here (the router takes the flush with nobody here
  # waiting: the CQ is armed while a set is up).
  left=
  for _ in $(seq 200); do
    [ "$(count "its message links end")" -ge 1 ] && { left=1; break; }
    sleep 1
  done
  [ -n "$left" ] || { echo "$KRCORE_NODE: the peer did not leave in 200 s" >&2; fail_with_state; }
  rmmod krcore || exit 1
  ;;
hogged-meta)
  hog=$(addr_of "$2") || exit 1
  victim=$(addr_of "$3") || exit 1
  reload meta_server="$KRCORE_ADDR" || exit 1
  # Serving once its own connection registered the region.
  for _ in $(seq 300); do
    [ "$(count "accepted a peer kernel's MetaServer")" -ge 1 ] && break
    sleep 0.1
  done
  barrier "$hog" 7521 120 || exit 1
  barrier "$victim" 7524 200 || exit 1
  refused=$(count "holds its part of the listener's connections")
  echo "$KRCORE_NODE: connections refused as past their node's part: $refused"
  [ "$refused" -ge 1 ] || { echo "$KRCORE_NODE: no connection was refused as past its node's part" >&2; exit 1; }
  unload
  ;;
meta-slow)
  # A slow MetaServer holds up MetaServer work alone: with this node's connection to it
  # held 30 s in each pass of that work (test_hold_meta_ms) and a PUBLISH waiting (its
  # waiter asks again every 10 ms, which kicks every worker), a CONNECT to the
  # MetaServer's node (a first contact: a set to dial) is still made by a free worker,
  # at once.
  meta=$(addr_of "$2") || exit 1
  reload meta_server="$meta" || exit 1
  # A PUBLISH registers this node (retried while the MetaServer is not up yet).
  for _ in $(seq 30); do
    "$REMOTE_MEMORY" export warm 1 >/dev/null 2>&1
    [ "$(count "registered with the MetaServer")" -ge 1 ] && break
  done
  [ "$(count "registered with the MetaServer")" -ge 1 ] || { echo "$KRCORE_NODE: not registered" >&2; fail_with_state; }
  hold=/sys/module/krcore/parameters/test_hold_meta_ms
  echo 30000 >"$hold" || exit 1
  "$REMOTE_MEMORY" export slow 60 >/dev/null 2>&1 & pids=$!
  sleep 0.5
  out=$("$CONNECT_PEER" "$meta" 1 2>&1)
  ok=$?
  echo 0 >"$hold"
  # shellcheck disable=SC2086 # pids, split
  kill $pids 2>/dev/null
  wait
  echo "$KRCORE_NODE: with the MetaServer's work held: $out"
  [ $ok -eq 0 ] || { echo "$KRCORE_NODE: a CONNECT waited for MetaServer work" >&2; fail_with_state; }
  unload
  ;;
serving)
  # The MetaServer serves each request on the module's own queue (krcore_meta), never
  # on the system's ib_comp_wq: held 1 s each here (test_hold_serve_ms), a request
  # being served shows as a kworker running krcore_meta's work ("+krcore_meta").
  member=$(addr_of "$2") || exit 1
  reload meta_server="$KRCORE_ADDR" test_hold_serve_ms=1000 || exit 1
  barrier "$member" 7531 120 || exit 1
  # A request's completion passes through ib-comp-wq briefly: a worker counts there
  # only if it is still running there 0.3 s on, as a held request would be.
  on=""
  for _ in $(seq 400); do
    on=$(serving_worker)
    [ -n "$on" ] && break
    sleep 0.05
  done
  case "$on" in
  *+krcore_meta) echo "$KRCORE_NODE: a request was being served by $on" ;;
  "") echo "$KRCORE_NODE: no request was seen being served in 20 s" >&2; exit 1 ;;
  *) echo "$KRCORE_NODE: a request was served on the system's completion queue ($on)" >&2; exit 1 ;;
  esac
  barrier "$member" 7532 120 || exit 1
  # The member's publication held when the module goes: its teardown waits for it.
  holding=""
  for _ in $(seq 400); do
    holding=$(serving_worker)
    case "$holding" in *+krcore_meta) ;; *) holding="" ;; esac
    [ -n "$holding" ] && break
    sleep 0.05
  done
  [ -n "$holding" ] || { echo "$KRCORE_NODE: the member's publication was not seen held" >&2; exit 1; }
  unload
  barrier "$member" 7533 120 || exit 1
  ;;
served)
  meta=$(addr_of "$2") || exit 1
  barrier "$meta" 7531 120 || exit 1
  reload meta_server="$meta" || exit 1
  for _ in $(seq 300); do
    [ "$(count "registered with the MetaServer")" -ge 1 ] && break
    sleep 0.1
  done
  [ "$(count "registered with the MetaServer")" -ge 1 ] || {
    echo "$KRCORE_NODE: not registered with a MetaServer that holds each request 1 s" >&2
    fail_with_state
  }
  echo "$KRCORE_NODE: registered with the MetaServer, each request held 1 s there"
  barrier "$meta" 7532 120 || exit 1
  # A publication held there while the MetaServer's module unloads.
  "$REMOTE_MEMORY" export held 60 >"$TMPDIR/held.out" 2>&1 & pid=$!
  barrier "$meta" 7533 120 || { kill $pid; exit 1; }
  kill $pid 2>/dev/null
  wait $pid
  unload
  ;;
client-part)
  # Node b's users (two of them, 300 CONNECTs) may hold a quarter of the listening
  # ring's 1,024 virtual QPs (CLIENT_SHARE) together; then node c is served.
  hog=$(addr_of "$2") || exit 1
  other=$(addr_of "$3") || exit 1
  reload || exit 1
  as_uid 1000 "$WIRE_SHARES" listen 7079 301 120 >"$TMPDIR/listen.out" 2>&1 & pid=$!
  for _ in $(seq 100); do grep -q listening "$TMPDIR/listen.out" && break; sleep 0.1; done
  barrier "$hog" 7541 120 || exit 1
  barrier "$other" 7543 300 || exit 1
  wait $pid || { cat "$TMPDIR/listen.out" >&2; fail_with_state; }
  got=$(tail -1 "$TMPDIR/listen.out")
  echo "$KRCORE_NODE: the listen of uid 1000: $got"
  [ "$got" = "accepted 257 refused 44 (Quota 44)" ] || {
    echo "$KRCORE_NODE: not 256 of node b's 300 and node c's 1" >&2; exit 1; }
  barrier "$hog" 7544 120 || exit 1
  unload_settled
  ;;
client-hog)
  server=$(addr_of "$2") || exit 1
  other=$(addr_of "$3") || exit 1
  reload || exit 1
  barrier "$server" 7541 120 || exit 1
  held_connect 1001 "$server" 7079 200 "$TMPDIR/h1.out"; p1=$held
  held_connect 1002 "$server" 7079 100 "$TMPDIR/h2.out"; p2=$held
  cat "$TMPDIR/h1.out.err" "$TMPDIR/h2.out.err"
  echo "$KRCORE_NODE: uid 1001 $(cat "$TMPDIR/h1.out"); uid 1002 $(cat "$TMPDIR/h2.out")"
  taken=$(cat "$TMPDIR/h1.out" "$TMPDIR/h2.out" | awk '/ taken,/ { n += $1 } END { print n }')
  barrier "$other" 7542 120 || exit 1
  barrier "$server" 7544 200 || exit 1
  kill $p1 $p2 2>/dev/null
  wait $p1 $p2
  [ "$taken" = 256 ] || { echo "$KRCORE_NODE: node b's users took ${taken:-none}, not 256" >&2; exit 1; }
  unload_settled
  ;;
client-other)
  server=$(addr_of "$2") || exit 1
  hog=$(addr_of "$3") || exit 1
  reload || exit 1
  barrier "$hog" 7542 300 || exit 1
  got=$(as_uid 1003 "$WIRE_SHARES" connect "$server" 7079 1 0) || exit 1
  echo "$KRCORE_NODE: after node b's 300, uid 1003: $got"
  barrier "$server" 7543 120 || exit 1
  [ "$got" = "1 taken, 0 refused ()" ] || exit 1
  unload_settled
  ;;
pinner)
  # With max_peers=4 a user's virtual QPs pin one entry of the peer table (PEER_SHARE):
  # uid 1001 holds b's; its CONNECT to c is refused Quota, and uid 1002's is served.
  one=$(addr_of "$2") || exit 1
  two=$(addr_of "$3") || exit 1
  reload max_peers=4 || exit 1
  barrier "$one" 7551 120 || exit 1
  barrier "$two" 7552 120 || exit 1
  held_connect 1001 "$one" 7080 1 "$TMPDIR/pin.out"; pid=$held
  first=$(cat "$TMPDIR/pin.out")
  second=$(as_uid 1001 "$WIRE_SHARES" connect "$two" 7080 1 0)
  other=$(as_uid 1002 "$WIRE_SHARES" connect "$two" 7080 1 0)
  kill $pid 2>/dev/null
  wait $pid
  echo "$KRCORE_NODE: uid 1001 to b: $first; to c: $second; uid 1002 to c: $other"
  barrier "$one" 7553 120 || exit 1
  barrier "$two" 7554 120 || exit 1
  [ "$first" = "1 taken, 0 refused ()" ] && [ "$second" = "0 taken, 1 refused (Quota:1)" ] &&
    [ "$other" = "1 taken, 0 refused ()" ] || fail_with_state
  unload_settled
  ;;
pinned)
  # A service answering one CONNECT (port $3 of the barriers).
  node=$(addr_of "$2") || exit 1
  reload || exit 1
  "$WIRE_SHARES" listen 7080 1 120 >"$TMPDIR/pinned.out" 2>&1 & pid=$!
  for _ in $(seq 100); do grep -q listening "$TMPDIR/pinned.out" && break; sleep 0.1; done
  barrier "$node" "$3" 120 || exit 1
  barrier "$node" "$4" 200 || exit 1
  kill $pid 2>/dev/null
  wait $pid
  cat "$TMPDIR/pinned.out"
  unload_settled
  ;;
hog)
  meta=$(addr_of "$2") || exit 1
  victim=$(addr_of "$3") || exit 1
  rmmod krcore 2>/dev/null
  # The key, as root on a member reads it (here from the test bed): root's file.
  (umask 077; echo "$CLUSTER_KEY" >"$TMPDIR/key")
  barrier "$meta" 7521 120 || exit 1
  "$INTRUDER" hog "$meta" $CM_PORT "$KRCORE_ADDR" "$TMPDIR/key" 64 90 >"$TMPDIR/hog.out" 2>&1 & pid=$!
  for _ in $(seq 600); do
    grep -q "accepted," "$TMPDIR/hog.out" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  cat "$TMPDIR/hog.out"
  # Held while the victim publishes.
  barrier "$victim" 7522 120 || { kill $pid; exit 1; }
  barrier "$victim" 7523 200 || { kill $pid; exit 1; }
  kill $pid 2>/dev/null
  taken=$(sed -n 's/.*hog: \([0-9]*\) accepted.*/\1/p' "$TMPDIR/hog.out")
  [ -n "$taken" ] && [ "$taken" -le 8 ] && [ "$taken" -ge 1 ] || {
    echo "$KRCORE_NODE: the listener took ${taken:-none} of one node's 64 proved connections, not 1 to 8" >&2
    exit 1
  }
  ;;
hogged)
  hog=$(addr_of "$3") || exit 1
  barrier "$hog" 7522 200 || exit 1
  with_meta "$2" "$2"
  touch "$TMPDIR/names-go"
  "$NAME_OWNERS" fill hogged ok,ok "$TMPDIR/names-go" || fail_with_state
  echo "$KRCORE_NODE: published 2 names while another node held its part of the MetaServer's listener"
  barrier "$hog" 7523 120 || exit 1
  meta=$(addr_of "$2") || exit 1
  barrier "$meta" 7524 120 || exit 1
  unload
  ;;
meta)
  # Module parameters may follow the count.
  n=$2; shift 2
  reload meta_server="$KRCORE_ADDR" "$@" || exit 1
  set -- meta "$n"
  for _ in $(seq 150); do
    # The MetaServer's own connection to itself is one of those accepted, never closed.
    if [ "$(count "accepted a peer kernel's MetaServer")" -gt "$2" ] &&
       [ "$(count "a peer kernel left")" -ge "$2" ]; then
      echo "$KRCORE_NODE ($KRCORE_ADDR): served the MetaServer to $2 node(s), which left"
      rmmod krcore || exit 1
      exit 0
    fi
    sleep 1
  done
  echo "$KRCORE_NODE: the MetaServer did not see $2 nodes come and go in 150 s" >&2
  klog | grep krcore | tail -5 >&2
  exit 1
  ;;
export)
  meta=$(addr_of "$2") || exit 1
  reload meta_server="$meta" || exit 1
  "$REMOTE_MEMORY" export "$3" 150 || exit 1
  # Importers still connected leave before this module does.
  sleep 3
  unload
  ;;
tool)
  case "$2" in
  serve)
    meta=$(addr_of "$3") || exit 1
    reload meta_server="$meta" || exit 1
    timeout 150 "$KRCORE_TOOL" serve --name perf-target --size 65536 --service 7100 --peers 2 || fail_with_state
    sleep 3
    unload
    ;;
  measure)
    with_meta "$3" "$4"
    # Retried while the server's module or its name is not up yet.
    read_lat() { "$KRCORE_TOOL" lat --node "$peer" --name perf-target --size 64 --iters 100; }
    for _ in $(seq 30); do read_lat && break; sleep 2; done
    read_lat || fail_with_state
    "$KRCORE_TOOL" bw --op write --node "$peer" --name perf-target --size 4096 --depth 8 --iters 256 || fail_with_state
    # The Python package by name: blocking and async connect_name, its owner checked.
    "$ROOT/target/pyvenv/bin/python3" - <<'PY' || fail_with_state
import asyncio
import krcore
from krcore import Access, Batch, Reason

with krcore.Ring(16) as ring:
    vqp, remote = ring.connect_name("perf-target", 64, owner=0)
    mr = ring.register(64, Access.LOCAL_WRITE)
    assert ring.run(Batch().read(vqp, mr, 0, remote, 0, 64)) == [64]
    try:
        ring.connect_name("perf-target", 64, owner=4321)
        raise AssertionError("another owner's name was imported")
    except krcore.KrcoreError as e:
        assert e.reason == Reason.WRONG_OWNER, e
    ring.disconnect(vqp)


async def by_name():
    a = krcore.AsyncRing(8)
    vqp, remote = await a.connect_name("perf-target", 64)
    mr = await a.register(64, Access.LOCAL_WRITE)
    assert await a.run(Batch().read(vqp, mr, 0, remote, 8, 56)) == [56]
    await a.disconnect(vqp)

asyncio.run(by_name())
print("python: perf-target read by name, blocking and async; another owner refused")
PY
    # krcore entries inside io_uring's own ring: a file read linked to a WRITE there.
    "$IN_IO_URING" perf-target || fail_with_state
    # The server exits after its two echo peers, its name with it: these come last.
    "$KRCORE_TOOL" lat --op send --node "$peer" --service 7100 --size 64 --iters 100 || fail_with_state
    "$KRCORE_TOOL" bw --op send --node "$peer" --service 7100 --size 4096 --depth 8 --iters 256 --json || fail_with_state
    unload
    ;;
  *) echo "tool serve|measure" >&2; exit 2 ;;
  esac
  ;;
import)
  with_meta "$2" "$3"
  # A short-lived worker first (the example of uring-lib): by address, then by name,
  # it must read the exporter's pattern (byte i is 7 i).
  out=$("$ELASTIC_WORKER" "$peer" "$4") || exit 1
  echo "$out"
  case "$out" in
  *": 00 07 0e 15 1c 23 2a 31") ;;
  *) echo "$KRCORE_NODE: the elastic worker read the wrong bytes" >&2; exit 1 ;;
  esac
  # The tool: a timed lookup of the name, and this node's set to the exporter.
  "$KRCORE_TOOL" lookup "$peer" "$4" || exit 1
  peers=$("$KRCORE_TOOL" peers) || exit 1
  echo "$peers"
  case "$peers" in
  *"peer $peer node "*" set ready "*) ;;
  *) echo "$KRCORE_NODE: krcore peers shows no ready set to $peer" >&2; exit 1 ;;
  esac
  "$REMOTE_MEMORY" import "$peer" "$4" || exit 1
  unload
  ;;
names)
  # Names have owners: uid 1001 (group 100) holds NAME here; role $4's node checks what
  # its group (primary, or supplementary), another user and the owner itself each get
  # of it (name-owners).
  case "$3" in
  hold)
    with_meta "$2" "$2"
    setpriv --reuid 1001 --regid 100 --clear-groups "$NAME_OWNERS" hold "$4" 120 || exit 1
    sleep 3
    unload
    ;;
  check)
    with_meta "$2" "$4"
    name=$5
    check_as() { setpriv --reuid "$1" --regid "$2" --clear-groups "$NAME_OWNERS" check "$peer" "$name" "$3" 1001; }
    check_as 1002 100 group || exit 1
    # Group 100 as a supplementary group is the group class too, as for a file.
    setpriv --reuid 1004 --regid 1004 --groups 27,100 "$NAME_OWNERS" check "$peer" "$name" group 1001 || exit 1
    check_as 1003 1003 other || exit 1
    check_as 1001 100 owner || exit 1
    # Shares of names, while other users hold theirs: here a user may publish 2
    # (max_names_per_user), and the MetaServer holds 4 of this node's (its
    # max_names_per_node, see NAMES_ROLES). uid 1003 gets 2 and then Quota; uid 1002
    # still gets its 2; then uid 1005 gets Quota, this node's share being held.
    echo 2 >/sys/module/krcore/parameters/max_names_per_user || exit 1
    held=$TMPDIR/names-held; gone=$TMPDIR/names-gone
    rm -f "$held"; touch "$gone"
    fill_as() { setpriv --reuid "$1" --regid "$1" --clear-groups "$NAME_OWNERS" fill "u$1" "$2" "$3"; }
    # Waits until the fill writing to file $1 (process $2) holds its names.
    filled() {
      for _ in $(seq 600); do
        grep -q "^filled" "$1" && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
      done
      cat "$1" >&2
      return 1
    }
    fill_as 1003 ok,ok,quota "$held" >"$TMPDIR/fill-1003" & a=$!
    filled "$TMPDIR/fill-1003" $a || exit 1
    fill_as 1002 ok,ok "$held" >"$TMPDIR/fill-1002" & b=$!
    filled "$TMPDIR/fill-1002" $b || exit 1
    fill_as 1005 quota "$gone" || exit 1
    touch "$held"
    wait $a && wait $b || exit 1
    cat "$TMPDIR/fill-1003" "$TMPDIR/fill-1002"
    unload
    ;;
  esac
  ;;
failover)
  with_meta "$2" "$3"
  "$REMOTE_MEMORY" probe "$peer" "$4" 120 || exit 1
  echo "KRCORE-CLUSTER: kill $2"
  sleep 2
  reload meta_server="$meta" || exit 1
  rc=0; "$REMOTE_MEMORY" probe "$peer" "$4" 5 || rc=$?
  [ "$rc" = 3 ] || { echo "$KRCORE_NODE: with the MetaServer down, the lookup ended $rc, not Unreachable" >&2; exit 1; }
  echo "KRCORE-CLUSTER: boot $2"
  reload meta_server="$meta" || exit 1
  "$REMOTE_MEMORY" import "$peer" "$4" || exit 1
  unload
  ;;
hammer)
  with_meta "$2" "$3"
  "$REMOTE_MEMORY" hammer "$peer" "$4" "$3" || fail_with_state
  # Its set's QP failed when the peer went: the kernel log says so, and why.
  klog | grep "set to $peer: QP [0-9]* failed" || {
    echo "$KRCORE_NODE: the set QP's failure is not in the kernel log" >&2
    exit 1
  }
  unload
  ;;
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
  echo "usage: cluster-smoke.sh names META hold NAME | names META check ROLE NAME | serve N | ping ROLE | cycle ROLE | reborn ROLE | listen N | dial ROLE | connect ROLE.. | meta N | export META NAME | import META ROLE NAME | hammer META ROLE NAME | failover META ROLE NAME | churn | stay META | mutual ROLE | cycles ROLE N [PROCS] | steady | messages ROLE recv|send N [META] | listener serve N [SERVICE] | listener client ROLE [PROCS [SERVICE [HOLD_MS]]] | listener self N | verbs_cm serve N | verbs_cm connect ROLE N | demo memory KEYS CLIENTS | demo compute ROLE KEYS WORKERS JOIN_MS RUN_MS OFFSET_MS | figures far|across ROLE NAMES | figures cluster ROLE.. | figures node META" >&2
  exit 2
  ;;
esac
