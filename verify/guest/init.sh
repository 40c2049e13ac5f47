#!/bin/sh
# PID 1 of the krcore test VM (busybox). Mounts the host root read-only over 9p, sets up
# rxe on a veth, loads the module, runs /cmd.sh with the host root as its root, and
# reports.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null

fail() { echo "KRCORE-SETUP-FAILED: $*"; reboot -f; }

# A distribution kernel keeps its virtio NIC, 9p and RDMA drivers in modules: the runner
# packs them here with their order, dependencies first.
if [ -f /lib/krcore-modules/order ]; then
  for m in $(cat /lib/krcore-modules/order); do
    insmod "/lib/krcore-modules/$m" || fail "insmod $m"
  done
fi

mkdir -p /mnt
# cache=loose: the host root does not change during a run, so its pages are cached in
# the guest; uncached, every page fault of every exec and library load is a 9p round
# trip, seconds per process under TCG.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /mnt || fail "9p mount"
mount --rbind /proc /mnt/proc
mount --rbind /sys /mnt/sys
mount --rbind /dev /mnt/dev
# Writable space lives on a tmpfs at /run only: the host's /tmp stays visible (read-only),
# since the clone being tested may itself live under /tmp. The command gets TMPDIR.
mount -t tmpfs tmpfs /mnt/run
mkdir -p /mnt/run/krcore/tmp
cp /cmd.sh /mnt/run/krcore/cmd.sh

in_host() { chroot /mnt /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/run/krcore/tmp "$@"; }

# Network: loopback, and either (one guest) a veth pair whose first end carries rxe0,
# RoCE v2 GID index 1 then being the IPv4 GID of 192.0.2.1, or (a guest of a cluster,
# given krcore_addr on the kernel command line) eth0 on the run's shared segment with
# that address. 192.0.2.0/24 is TEST-NET-1, inside the guests only.
in_host ip link set lo up || fail "lo up"
if [ -n "$krcore_addr" ]; then
  netdev=eth0
  in_host ip addr add "$krcore_addr/24" dev eth0 || fail "eth0 addr $krcore_addr"
  in_host ip link set eth0 up || fail "eth0 up"
else
  netdev=veth0
  in_host ip link add veth0 type veth peer name veth1 || fail "veth"
  in_host ip addr add 192.0.2.1/24 dev veth0 || fail "veth addr"
  in_host ip link set veth0 up && in_host ip link set veth1 up || fail "veth up"
fi

# The module goes in before rxe0 exists, so the ib_client sees a device arrive.
if [ -f /module-path ]; then
  # Parameters are K=V words without spaces (the runner checks): split them here.
  # shellcheck disable=SC2046
  in_host insmod "$(cat /module-path)" $(cat /module-params) || fail "insmod $(cat /module-path) $(cat /module-params)"
fi
in_host rdma link add rxe0 type rxe netdev $netdev || fail "rdma link add rxe0 on $netdev"

# Timings need a fine-grained clock. The kernel switches to the TSC only once its
# refined calibration is done, which on a loaded host can come after /init starts: wait
# for it (up to 10 s). A guest whose TSC was judged unstable stays on jiffies (4 ms
# ticks); the runner boots again when told so.
clock_file=/sys/devices/system/clocksource/clocksource0/current_clocksource
for _ in $(seq 100); do
  [ "$(cat $clock_file)" = tsc ] && break
  sleep 0.1
done
clock=$(cat $clock_file)
if [ "$clock" != tsc ] && [ -z "$krcore_anyclock" ]; then
  echo "KRCORE-COARSE-CLOCK: $clock"
  reboot -f
fi

# The command runs with the host root as its mount namespace's root, not chrooted into
# it: the kernel refuses a chrooted process a new user namespace (the quota test makes
# one). switch_root moves the host root over the initramfs, so PID 1 finishes from a
# script and a busybox on the host root's tmpfs.
cp /bin/busybox /mnt/run/krcore/busybox || fail "busybox to /run"
cat >/mnt/run/krcore/finish.sh <<'EOF_FINISH'
b=/run/krcore/busybox
echo "KRCORE-RUN-START"
/usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/run/krcore/tmp /bin/sh /run/krcore/cmd.sh
rc=$?
echo "KRCORE-EXIT=$rc"
echo "KRCORE-DMESG-START"
$b dmesg
echo "KRCORE-DMESG-END"
$b reboot -f
EOF_FINISH
exec switch_root /mnt /run/krcore/busybox sh /run/krcore/finish.sh
