#!/bin/sh
# Guest half of scenario nvme-unplug (see nvme-unplug.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

A=$(wait_ng "$PCI_A") || { bad "no ng node on $PCI_A"; exit 1; }
B=$(wait_ng "$PCI_B") || { bad "no ng node on $PCI_B"; exit 1; }
CA=$(ctrl_of "$PCI_A")
CB=$(ctrl_of "$PCI_B")
ok "paths: a=$A ($CA, $PCI_A) b=$B ($CB, $PCI_B)"

# wait_file FILE SECONDS
wait_file() {
    local tries=0
    while [ ! -e "$1" ]; do
        [ $tries -ge $(($2 * 10)) ] && return 1
        sleep 0.1
        tries=$((tries + 1))
    done
}

URPC=/tmp/unplug-rpc.sock
# path_field NAME FIELD: a field of path NAME from `vhost-mpath stats --json`.
path_field() {
    "$BIN/vhost-mpath" stats --rpc-socket "$URPC" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
p = [p for p in d["paths"] if p["name"] == sys.argv[1]][0]
v = p[sys.argv[2]] if sys.argv[2] != "ios" else p["reads"] + p["writes"]
print(v)' "$1" "$2"
}

if ! start_daemon daemon --num-queues 2 --policy round-robin --rpc-socket "$URPC" --path "$A,name=a" --path "$B,name=b"; then
    bad "daemon did not start"
    exit 1
fi
t0=$(t)
"$BIN/vhost-verify" --socket "$SOCK" --queues 2 --qd 16 --req-kib 64 --region-mib 16 \
    --offset-mib 64 --seed 100 --duration-s "$DURATION" --no-zeroes \
    --expect-capacity "$NS_BYTES" --expect-block-size "$LBA" >/tmp/verify.out 2>&1 &
vpid=$!

sleep "$UNPLUG_AT"
ia=$(io_irqs "$CA")
ib=$(io_irqs "$CB")
if ! kill -0 $vpid 2>/dev/null; then
    bad "the client ended before the unplug"
fi
info "t=$(since "$t0") s: asking the host to remove $CB ($PCI_B) under load (I/O interrupts so far: a $ia, b $ib)"
tu=$(t)
touch /hostwork/req.unplug
wait_file /hostwork/ack.unplug 20 || bad "host did not acknowledge the unplug"
tries=0
while [ -e "/sys/bus/pci/devices/$PCI_B" ] && [ $tries -lt 300 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
if [ -e "/sys/bus/pci/devices/$PCI_B" ]; then
    bad "$PCI_B still present 30 s after device_del"
else
    ok "controller $CB ($PCI_B) removed $(since "$tu") s after the request"
fi
ia1=$(io_irqs "$CA")
sleep "$REPLUG_AFTER"
ia2=$(io_irqs "$CA")
if [ $((ia2 - ia1)) -gt 0 ]; then
    ok "path a carried the load alone after the removal (a +$((ia2 - ia1)) I/O interrupts in $REPLUG_AFTER s)"
else
    bad "no I/O on path a after the removal"
fi

info "t=$(since "$t0") s: asking the host to add the controller back"
tr=$(t)
touch /hostwork/req.replug
wait_file /hostwork/ack.replug 30 || bad "host did not acknowledge the replug"
if NB=$(wait_ng "$PCI_B"); then
    ok "controller back $(since "$tr") s after the request: namespace node $NB ($(ctrl_of "$PCI_B"))"
    # The daemon finds the controller under its new node, re-opens it, and
    # its probes bring the path back; then it carries I/O again.
    tries=0
    while [ "$(path_field b state)" != usable ] && [ $tries -lt 150 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done
    if [ "$(path_field b state)" = usable ]; then
        ok "path b usable again $(since "$tr") s after device_add (re-opened on $NB, probed back)"
        ios1=$(path_field b ios)
        sleep 2
        ios2=$(path_field b ios)
        if [ "$ios2" -gt "$ios1" ] 2>/dev/null; then
            ok "path b carries I/O again (+$((ios2 - ios1)) I/Os in 2 s)"
        else
            bad "path b is usable but carried no I/O ($ios1 -> $ios2)"
        fi
    else
        bad "path b not usable 15 s after device_add (state $(path_field b state))"
    fi
else
    bad "no ng node on $PCI_B 10 s after device_add"
fi

wait $vpid
vrc=$?
grep '^VERIFY' /tmp/verify.out
stop_daemon
drc=$?
if [ $vrc = 0 ]; then
    ok "client: zero errors, every pass verified over ${DURATION} s with a controller removed"
else
    bad "client exit $vrc"
fi
[ $drc = 0 ] && ok "daemon exited 0 on SIGTERM" || bad "daemon exit status $drc after SIGTERM"
nfail=$(grep -c "failed (" /hostwork/daemon.log)
if [ "$nfail" -gt 0 ]; then
    ok "daemon saw the path error and failed I/O over ($nfail log lines, rate limited)"
else
    bad "no path error in the daemon log: the removal did not hit I/O"
fi
grep -E "WARN|ERROR" /hostwork/daemon.log | head -n 8 | sed 's/^/INFO: daemon: /'
exit $rc
