#!/bin/sh
# Guest half of scenario nvmf-resize (see nvmf-resize.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

NQN=nqn.2024-01.example:nvmf-resize
S=/sys/kernel/config/nvmet/subsystems/$NQN
NS=$S/namespaces/1
IMG=/tmp/ns.img
OLD=$((OLD_MIB * MiB))
NEW=$((NEW_MIB * MiB))
LINE="capacity changed from $OLD to $NEW bytes (path checker)"
# Milliseconds of the wall clock: the daemon's log lines carry the same clock, so the
# time of its line is read from the line itself, not from how often we poll.
now_ms() { /usr/bin/date +%s%3N; }
# size_of NG: bytes of the kernel's block device beside ng node NG (ngXnY -> nvmeXnY).
# 0 while it is missing (an empty $((...)) would end the script).
size_of() {
    _n=$(cat "/sys/block/nvme${1#/dev/ng}/size" 2>/dev/null)
    echo $((${_n:-0} * 512))
}

for m in configfs nvmet nvmet_tcp nvme_fabrics nvme_tcp; do
    modprobe "$m" || { bad "modprobe $m"; exit 1; }
done
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
ip link set lo up
/usr/bin/truncate -s "${OLD_MIB}M" "$IMG" || { bad "create $IMG"; exit 1; }

# Target: the namespace is the tmpfs file. buffered_io: nvmet's file backend opens with
# O_DIRECT otherwise, which tmpfs refuses before Linux 6.6.
mkdir "$S" && echo 1 >"$S/attr_allow_any_host" &&
    mkdir "$NS" &&
    echo "$IMG" >"$NS/device_path" &&
    echo 1 >"$NS/buffered_io" &&
    echo 1 >"$NS/enable" || { bad "nvmet subsystem on $IMG"; exit 1; }
[ -e "$NS/revalidate_size" ] || { bad "this kernel's nvmet has no revalidate_size"; exit 1; }
for i in 1 2; do
    P=/sys/kernel/config/nvmet/ports/$i
    mkdir "$P" &&
        echo tcp >"$P/addr_trtype" &&
        echo ipv4 >"$P/addr_adrfam" &&
        echo "127.0.0.$i" >"$P/addr_traddr" &&
        echo 4420 >"$P/addr_trsvcid" &&
        ln -s "$S" "$P/subsystems/$NQN" || { bad "nvmet port $i"; exit 1; }
done
for i in 1 2; do
    echo "transport=tcp,traddr=127.0.0.$i,trsvcid=4420,nqn=$NQN,hostnqn=$NVMF_HOSTNQN" >/dev/nvme-fabrics ||
        { bad "connect to 127.0.0.$i"; exit 1; }
done
tries=0
until NG1=$(ng_tcp_addr 127.0.0.1) && NG2=$(ng_tcp_addr 127.0.0.2); do
    [ $tries -ge 100 ] && { bad "no ng nodes for both controllers (nodes: $(ls /dev/ng* 2>/dev/null | tr '\n' ' '))"; exit 1; }
    sleep 0.1
    tries=$((tries + 1))
done
ok "NVMe/TCP paths to a $OLD_MIB MiB file-backed namespace: a=$NG1 (127.0.0.1) b=$NG2 (127.0.0.2)"

# The negative control turns the daemon's size watch off.
[ -n "$SIZE_WATCH_MS" ] && export VHOST_MPATH_SIZE_WATCH_MS="$SIZE_WATCH_MS" &&
    info "VHOST_MPATH_SIZE_WATCH_MS=$SIZE_WATCH_MS"
start_daemon daemon --num-queues 2 --policy round-robin --rpc-socket "$RPC_SOCK" \
    --path "$NG1,name=a" --path "$NG2,name=b" || { bad "daemon did not start"; exit 1; }
wait_rpc_socket || exit 1

# Before: a client cannot reach past the old end.
"$BIN/vhost-verify" --socket "$SOCK" --queues 1 --region-mib 1 --offset-mib "$OLD_MIB" \
    --no-zeroes >/tmp/before.out 2>&1
vrc=$?
if [ $vrc != 0 ] && grep -q "beyond the disk" /tmp/before.out; then
    ok "before: the region at $OLD_MIB MiB is beyond the disk for a client"
else
    bad "before: a client at $OLD_MIB MiB exited $vrc: $(grep '^VERIFY' /tmp/before.out | tr '\n' ';')"
fi

# get_stats on its own connection every 10 ms, from before the growth on; prints
# "start CAPACITY" once connected, then "seen MS" (wall clock) when it shows NEW.
/usr/bin/python3 - "$RPC_SOCK" "$NEW" 15 >/tmp/capwatch.out 2>&1 <<'PY' &
import sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, "/hostwork/bin")
from rpc import Rpc
r = Rpc(sys.argv[1])
want, limit = int(sys.argv[2]), float(sys.argv[3])
def cap():
    return r.call("get_stats")["device"]["capacity_bytes"]
print("start", cap(), flush=True)
t0 = time.monotonic()
while time.monotonic() - t0 < limit:
    c = cap()
    if c == want:
        print("seen", int(time.time() * 1000), flush=True)
        sys.exit(0)
    time.sleep(0.01)
print("last", c, flush=True)
sys.exit(1)
PY
POLLER=$!
tries=0
until grep -q '^start' /tmp/capwatch.out 2>/dev/null || [ $tries -ge 100 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
c=$(sed -n 's/^start //p' /tmp/capwatch.out)
[ "$c" = "$OLD" ] && ok "before: get_stats capacity_bytes $c" || bad "before: get_stats capacity_bytes '$c', want $OLD ($(cat /tmp/capwatch.out))"
for ng in "$NG1" "$NG2"; do
    [ "$(size_of "$ng")" = "$OLD" ] || bad "before: kernel size of $ng's namespace $(size_of "$ng"), want $OLD"
done

# Grow: the file first, then revalidate_size (nvmet re-reads the file's size and sends
# the Namespace Attribute Changed event).
t_grow=$(now_ms)
/usr/bin/truncate -s "${NEW_MIB}M" "$IMG" || bad "grow $IMG"
if [ "$REVALIDATE" = 1 ]; then
    echo 1 >"$NS/revalidate_size" || bad "revalidate_size"
else
    info "NVMF_RESIZE_REVALIDATE=0: no revalidate_size"
fi
t_reval=$(now_ms)
[ "$REVALIDATE" = 1 ] && what="grown and revalidated" || what=grown
info "file $what in $((t_reval - t_grow)) ms"

# Up to 5 s for the daemon's line and both kernel block devices.
k1='' k2='' i=0
while [ $i -lt 100 ]; do
    [ -z "$k1" ] && [ "$(size_of "$NG1")" = "$NEW" ] && k1=$(now_ms)
    [ -z "$k2" ] && [ "$(size_of "$NG2")" = "$NEW" ] && k2=$(now_ms)
    grep -qF "$LINE" /hostwork/daemon.log && [ -n "$k1" ] && [ -n "$k2" ] && break
    sleep 0.05
    i=$((i + 1))
done
l=$(grep -F "$LINE" /hostwork/daemon.log | head -n 1)
if [ -n "$l" ]; then
    lt=$(/usr/bin/date -d "$(echo "$l" | sed 's/^\[\([^ ]*\) .*/\1/')" +%s%3N)
    ok "daemon logged '$LINE' $((lt - t_reval)) ms after revalidate_size ($((lt - t_grow)) ms after the file grew)"
    echo "TIME: daemon log line $((lt - t_reval)) ms after revalidate_size"
else
    bad "no '$LINE' in the daemon's log 5 s after the growth"
    grep -i "capacity\|size" /hostwork/daemon.log | tail -n 5 | sed 's/^/INFO: daemon: /'
fi
[ -n "$k1" ] && [ -n "$k2" ] &&
    ok "the kernel's block devices of both controllers show $NEW_MIB MiB (the AEN arrived): $((k1 - t_reval)) / $((k2 - t_reval)) ms after revalidate_size" ||
    bad "kernel sizes after 5 s: $(size_of "$NG1") / $(size_of "$NG2"), want $NEW"

wait "$POLLER"
prc=$?
s=$(sed -n 's/^seen //p' /tmp/capwatch.out)
if [ $prc = 0 ] && [ -n "$s" ]; then
    ok "get_stats capacity_bytes $NEW $((s - t_reval)) ms after revalidate_size"
    echo "TIME: get_stats new capacity $((s - t_reval)) ms after revalidate_size"
else
    bad "get_stats never showed $NEW: $(tr '\n' ' ' </tmp/capwatch.out)"
fi
for p in a b; do
    v=$(rpc field get_paths "$p" size_bytes)
    [ "$v" = "$NEW" ] && ok "get_paths: path $p size_bytes $v" || bad "get_paths: path $p size_bytes '$v', want $NEW"
done

# After: a fresh client sees the new capacity and uses the whole new region.
# --no-zeroes: nvmet's file backend zeroes with FALLOC_FL_ZERO_RANGE, which tmpfs
# refuses; that is the target's store, not the resize under test.
t0=$(t)
"$BIN/vhost-verify" --socket "$SOCK" --queues 2 --qd 8 --req-kib 64 --no-zeroes \
    --offset-mib "$OLD_MIB" --region-mib $((NEW_MIB - OLD_MIB)) --expect-capacity "$NEW" >/tmp/verify.out 2>&1
vrc=$?
grep '^VERIFY' /tmp/verify.out | grep -v '^VERIFY pass'
[ $vrc = 0 ] &&
    ok "new region $OLD_MIB..$NEW_MIB MiB written, flushed, read back and verified by a fresh client in $(since "$t0") s" ||
    bad "vhost-verify on the new region exit $vrc"

n=$(grep -c "capacity changed from" /hostwork/daemon.log)
[ "$n" = 1 ] && ok "one capacity change logged" || bad "$n capacity changes logged, want 1"
stop_daemon
drc=$?
[ $drc = 0 ] && ok "daemon exited 0 on SIGTERM" || bad "daemon exit status $drc"
exit $rc
