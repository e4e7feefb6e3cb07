#!/bin/sh
# Guest half of scenario nvmf-slow (see nvmf-slow.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

NQN=nqn.2024-01.example:nvmf-slow
nvmf_netns_target "$NQN" "$NS_MIB" || exit 1
nvmf_paths "$NQN" || exit 1
$TC qdisc add dev h2 root netem delay "${DELAY_MS}ms" || { bad "netem on h2"; exit 1; }
if [ "${FAST_DELAY_MS:-0}" != 0 ]; then
    $TC qdisc add dev h1 root netem delay "${FAST_DELAY_MS}ms" || { bad "netem on h1"; exit 1; }
fi
ok "NVMe/TCP paths over veth: a=$NG1 ($CTRL1, 10.0.1.2, +${FAST_DELAY_MS:-0} ms) b=$NG2 ($CTRL2, 10.0.2.2, +${DELAY_MS} ms netem on h2)"
info "ping a: $(ping -c 3 -q 10.0.1.2 | tail -n 1); b: $(ping -c 3 -q 10.0.2.2 | tail -n 1)"

# One queue (one worker): the client's QD requests all go through one selector.
start_daemon daemon --num-queues 1 --policy round-robin --rpc-socket "$RPC_SOCK" \
    --path "$NG1,name=a,weight=4" --path "$NG2,name=b,weight=1" || {
    bad "daemon did not start"
    exit 1
}
tries=0
while [ ! -S "$RPC_SOCK" ] && [ $tries -lt 100 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
[ -S "$RPC_SOCK" ] || { bad "no JSON-RPC socket $RPC_SOCK"; exit 1; }

t0=$(t)
# shellcheck disable=SC2086
timeout "$LOAD_TIMEOUT" "$BIN/vhost-load" --socket "$SOCK" --rpc-socket "$RPC_SOCK" \
    --policies "$POLICIES" --bs-kib "$BS_KIB" --qd "$QD" --seconds "$MEASURE_S" --warmup "$WARMUP" \
    --rounds "$ROUNDS" \
    >/tmp/load.out 2>&1
lrc=$?
cp /tmp/load.out /hostwork/load.out
echo "TIME: $(echo "$POLICIES" | tr ',' '\n' | wc -l) policies x $ROUNDS rounds measured in $(since "$t0") s"
if [ $lrc != 0 ]; then
    bad "vhost-load exit $lrc"
    tail -n 5 /tmp/load.out
fi
stop_daemon
drc=$?
[ $drc = 0 ] && ok "daemon exited 0 on SIGTERM" || bad "daemon exit status $drc"

# The seed-style table (REFERENCE.md §4, adaptive over a +30 ms path).
echo "TABLE: $(grep '^LOAD workload' /tmp/load.out | sed 's/^LOAD workload: //'), $ROUNDS rounds interleaved; path a +${FAST_DELAY_MS:-0} ms, b +${DELAY_MS} ms; weights a=4 b=1"
awk '/^LOAD label=/ {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (!hdr++) printf "TABLE: %-13s %6s %7s %10s %8s %8s %9s  %-18s %s\n", "policy", "IOPS", "MiB/s", "median IOPS", "mean ms", "p99 ms", "stddev ms", "rounds", "I/O split (a:b)"
    n = split(v["split"], s, ","); sp = ""
    for (j = 1; j <= n; j++) { sub(/^[^:]*:/, "", s[j]); sp = sp (j > 1 ? ":" : "") s[j] }
    printf "TABLE: %-13s %6d %7.2f %10d %8.1f %8.1f %9.1f  %-18s %s\n", v["label"], v["iops"], v["mibs"], v["median_iops"], v["mean_us"] / 1000, v["p99_us"] / 1000, v["stddev_us"] / 1000, v["rounds"], sp
}' /tmp/load.out

# The median round of each policy decides (a TCG guest's speed drifts from second to second).
iops_of() { sed -n "s/^LOAD label=$1 .* median_iops=\([0-9]*\) .*/\1/p" /tmp/load.out; }
rr=$(iops_of round-robin)
qd=$(iops_of queue-depth)
ad=$(iops_of adaptive)
au=$(iops_of auto)
if [ -z "$rr" ] || [ -z "$qd" ] || [ -z "$ad" ] || [ -z "$au" ]; then
    bad "missing measurements (round-robin '$rr' queue-depth '$qd' adaptive '$ad' auto '$au')"
    exit 1
fi
# above A B M: A exceeds B by more than M percent.
above() { [ $(($1 * 100)) -gt $(($2 * (100 + $3))) ]; }
ratio() { echo "$1 $2" | awk '{ printf "%.2fx", $1 / ($2 > 0 ? $2 : 1) }'; }
if above "$qd" "$rr" "$MARGIN_PCT"; then
    ok "queue-depth above round-robin: $qd vs $rr IOPS, medians ($(ratio "$qd" "$rr"))"
else
    bad "queue-depth not above round-robin by ${MARGIN_PCT}%: $qd vs $rr IOPS"
fi
# adaptive weights paths by 1/latency, which keeps about as many requests in flight on
# the slow path as queue-depth does (Little's law): its lead is small (~1.06x here), so it
# only has to be above; auto must lead by MARGIN_PCT like the others.
for p in adaptive auto; do
    v=$(iops_of "$p")
    m=$MARGIN_PCT
    [ $p = adaptive ] && m=$ADAPTIVE_MARGIN_PCT
    if above "$v" "$qd" "$m"; then
        ok "$p above queue-depth: $v vs $qd IOPS, medians ($(ratio "$v" "$qd"))"
    else
        bad "$p not above queue-depth by ${m}%: $v vs $qd IOPS, medians ($(ratio "$v" "$qd"))"
    fi
done
exit $rc
