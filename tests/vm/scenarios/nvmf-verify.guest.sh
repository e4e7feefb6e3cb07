#!/bin/sh
# Guest half of scenario nvmf-verify (see nvmf-verify.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

NQN=nqn.2024-01.example:nvmf-verify
HOSTNQN=nqn.2024-01.example:host
for m in configfs nvmet nvmet_tcp nvme_fabrics nvme_tcp; do
    modprobe "$m" || bad "modprobe $m"
done
modprobe brd rd_nr=1 rd_size=$((NS_MIB * 1024)) || bad "modprobe brd"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
ip link set lo up

# Target: one subsystem on /dev/ram0, two TCP ports on loopback; port 2's ANA group 1
# is non-optimized.
S=/sys/kernel/config/nvmet/subsystems/$NQN
mkdir "$S" && echo 1 >"$S/attr_allow_any_host"
mkdir "$S/namespaces/1"
echo /dev/ram0 >"$S/namespaces/1/device_path"
echo 1 >"$S/namespaces/1/enable" || bad "enable namespace"
for p in 1 2; do
    P=/sys/kernel/config/nvmet/ports/$p
    mkdir "$P"
    echo tcp >"$P/addr_trtype"
    echo ipv4 >"$P/addr_adrfam"
    echo 127.0.0.1 >"$P/addr_traddr"
    echo $((4420 + p)) >"$P/addr_trsvcid"
    ln -s "$S" "$P/subsystems/$NQN" || bad "port $p: link subsystem"
done
echo non-optimized >/sys/kernel/config/nvmet/ports/2/ana_groups/1/ana_state || bad "set ANA state of port 2"

for p in 1 2; do
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=$((4420 + p)),nqn=$NQN,hostnqn=$HOSTNQN" >/dev/nvme-fabrics ||
        bad "connect to port $p"
done

# ng_tcp TRSVCID: the ng node of namespace 1 on the TCP controller with that service id.
ng_tcp() {
    local c d
    for c in /sys/class/nvme/nvme*; do
        grep -q "trsvcid=$1" "$c/address" 2>/dev/null || continue
        for d in "$c"/ng*n*; do
            [ -e "$d" ] && echo "/dev/${d##*/}" && return 0
        done
    done
    return 1
}
tries=0
until A=$(ng_tcp 4421) && B=$(ng_tcp 4422); do
    [ $tries -ge 100 ] && break
    sleep 0.1
    tries=$((tries + 1))
done
if [ -z "$A" ] || [ -z "$B" ]; then
    bad "no ng nodes for both TCP controllers (nodes: $(ls /dev/ng* 2>/dev/null | tr '\n' ' '))"
    exit 1
fi
ok "NVMe/TCP paths over loopback: a=$A (port 4421, optimized) b=$B (port 4422, non-optimized)"

start_daemon daemon --num-queues 2 --policy round-robin --path "$A,name=a" --path "$B,name=b" || {
    bad "daemon did not start"
    exit 1
}
grep -h "NVMe namespace" /hostwork/daemon.log | sed 's/^.*INFO *[^ ]* /INFO: daemon: /'
if grep "^.*$A: NVMe namespace" /hostwork/daemon.log | grep -q "ANA optimized" &&
    grep "^.*$B: NVMe namespace" /hostwork/daemon.log | grep -q "ANA non-optimized"; then
    ok "ANA log page read through admin passthrough: a optimized, b non-optimized"
else
    bad "ANA states not as configured on the target"
fi
ida=$(grep "$A: NVMe namespace" /hostwork/daemon.log | sed 's/.*identity //')
idb=$(grep "$B: NVMe namespace" /hostwork/daemon.log | sed 's/.*identity //')
if [ -n "$ida" ] && [ "$ida" = "$idb" ]; then
    ok "both controllers report the same namespace identity: $ida"
else
    bad "identities differ: '$ida' / '$idb'"
fi
t0=$(t)
"$BIN/vhost-verify" --socket "$SOCK" --queues 2 --qd 8 --req-kib 64 --region-mib "$REGION_MIB" \
    --expect-capacity "$((NS_MIB * 1048576))" --expect-block-size 512 >/tmp/verify.out 2>&1
vrc=$?
grep '^VERIFY' /tmp/verify.out | grep -v '^VERIFY pass'
stop_daemon
drc=$?
if [ $vrc = 0 ]; then
    ok "$REGION_MIB MiB written, flushed, read back and verified over NVMe/TCP in $(since "$t0") s"
else
    bad "vhost-verify exit $vrc"
fi
[ $drc = 0 ] && ok "daemon exited 0 on SIGTERM" || bad "daemon exit status $drc"
exit $rc
