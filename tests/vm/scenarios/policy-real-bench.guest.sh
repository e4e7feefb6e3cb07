#!/bin/sh
# Guest half of the benchmark policy-real-bench (see policy-real-bench.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

RAW=/hostwork/bench.raw
: >$RAW
PIN_CLIENT=""
DAEMON_PREFIX=""
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    PIN_CLIENT="taskset -c 0" DAEMON_PREFIX="taskset -c 1"
fi

# load_flags KIND: vhost-load's flags for a workload kind.
load_flags() {
    case $1 in
    randread) echo "" ;;
    randwrite) echo "--write" ;;
    seqwrite) echo "--write --seq" ;;
    seqread) echo "--seq" ;;
    *) return 1 ;;
    esac
}

# bench SETUP PATH_A PATH_B: the daemon on both paths; a pre-warm, then every workload
# over every policy, ROUNDS interleaved rounds (vhost-load's lines appended to $RAW,
# labelled SETUP:BSk-KIND-qdQD/POLICY).
bench() {
    local setup=$1 a=$2 b=$3 wl bs qd kind flags t0 lrc
    # shellcheck disable=SC2086
    start_daemon "daemon-$setup" --num-queues 1 --policy round-robin --rpc-socket "$RPC_SOCK" \
        $DAEMON_ARGS --path "$a,name=a" --path "$b,name=b" || {
        bad "$setup: daemon did not start"
        return 1
    }
    wait_rpc_socket || return 1
    # Settle first: TCP windows, the target's and the guest's caches, the token bucket's
    # first burst.
    # shellcheck disable=SC2086
    $PIN_CLIENT "$BIN/vhost-load" --socket "$SOCK" --bs-kib 4 --qd 32 --seconds "$PREWARM" \
        --warmup 0 --label prewarm >/tmp/prewarm.out 2>&1 ||
        bad "$setup: pre-warm load failed: $(tail -n 2 /tmp/prewarm.out)"
    for wl in $WORKLOADS; do
        bs=${wl%%:*}
        qd=${wl#*:}
        kind=${qd#*:}
        qd=${qd%%:*}
        flags=$(load_flags "$kind") || { bad "unknown workload kind $kind"; continue; }
        t0=$(t)
        # shellcheck disable=SC2086
        timeout "$LOAD_TIMEOUT" $PIN_CLIENT "$BIN/vhost-load" \
            --socket "$SOCK" --rpc-socket "$RPC_SOCK" --policies "$POLICIES" \
            --bs-kib "$bs" --qd "$qd" $flags --seconds "$MEASURE_S" --warmup "$WARMUP" \
            --rounds "$ROUNDS" $ROTATE --label "$setup:${bs}k-$kind-qd$qd" >/tmp/load.out 2>&1
        lrc=$?
        grep -E '^LOAD' /tmp/load.out >>$RAW
        echo "TIME: $setup ${bs}k $kind QD$qd: $ROUNDS rounds of every policy in $(since "$t0") s"
        [ $lrc = 0 ] || bad "$setup ${bs}k $kind QD$qd: vhost-load exit $lrc: $(tail -n 3 /tmp/load.out)"
    done
    stop_daemon
    lrc=$?
    [ $lrc = 0 ] && ok "$setup: daemon exited 0 on SIGTERM" || bad "$setup: daemon exit status $lrc"
}

setup_qemu_throttle() {
    local a b
    nvme_drop_placeholder "$PCI_PH" "$PCI_A"
    a=$(wait_ng "$PCI_A") || { bad "no ng node on $PCI_A"; return 1; }
    b=$(wait_ng "$PCI_B") || { bad "no ng node on $PCI_B"; return 1; }
    ok "qemu-throttle: a=$a ($(ctrl_of "$PCI_A"), $PCI_A) b=$b ($(ctrl_of "$PCI_B"), $PCI_B, throttle group $THROTTLE)"
    echo "SETUP qemu-throttle a=emulated NVMe; b=emulated NVMe through a QEMU throttle group ($THROTTLE)" >>$RAW
    bench qemu-throttle "$a" "$b"
}

setup_nvmf_netem() {
    local nqn=nqn.2024-01.example:policy-real-bench
    nvmf_netns_target "$nqn" "$NVMF_MIB" || return 1
    nvmf_paths "$nqn" || return 1
    # shellcheck disable=SC2086
    $TC qdisc add dev h1 root netem $NETEM_A || { bad "netem $NETEM_A on h1"; return 1; }
    # shellcheck disable=SC2086
    $TC qdisc add dev h2 root netem $NETEM_B || { bad "netem $NETEM_B on h2"; return 1; }
    ok "nvmf-netem: a=$NG1 ($CTRL1, 10.0.1.2, netem $NETEM_A) b=$NG2 ($CTRL2, 10.0.2.2, netem $NETEM_B)"
    info "ping a: $(ping -c 3 -q 10.0.1.2 | tail -n 1); b: $(ping -c 3 -q 10.0.2.2 | tail -n 1)"
    echo "SETUP nvmf-netem a=NVMe/TCP over veth, netem $NETEM_A; b=NVMe/TCP over veth, netem $NETEM_B" >>$RAW
    bench nvmf-netem "$NG1" "$NG2"
}

# Each round starts one policy further down the list (vhost-load --rotate): the token
# bucket refills while a policy leaves path b idle, and the policy after it would
# otherwise always start on a full bucket.
ROTATE=""
[ "$ROTATE_ORDER" = 1 ] && ROTATE=--rotate
# A bound on one workload's vhost-load: every round of every policy with 5 s to spare each.
LOAD_TIMEOUT=$(echo "$POLICIES" | awk -F, -v r="$ROUNDS" -v m="$MEASURE_S" -v w="$WARMUP" '{ printf "%d", r * NF * (m + w + 5) + 60 }')
t0=$(t)
for s in $SETUPS; do
    case $s in
    qemu-throttle) setup_qemu_throttle ;;
    nvmf-netem) setup_nvmf_netem ;;
    *) bad "unknown setup $s" ;;
    esac
done
echo "TIME: all setups in $(since "$t0") s"

# The table, per setup and workload (label SETUP:WORKLOAD/POLICY): each policy's median
# IOPS over the rounds, MiB/s (median IOPS x block size), every round, path b's share of
# the I/O and its rate, and against the best other policy (the other policy with the
# highest median): the ratio of the medians, and the median over rounds of the ratio
# measured in the same round (paired: rounds seconds apart see the same machine, whose
# speed under TCG on a shared host swings several-fold from round to round).
awk -v rounds="$ROUNDS" -v secs="$MEASURE_S" '
function median(list,   n, i, j, t, a) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2)
}
function kv(   i, p) { delete v; for (i = 2; i <= NF; i++) { p = index($i, "="); v[substr($i, 1, p - 1)] = substr($i, p + 1) } }
/^SETUP / { sub(/^SETUP /, ""); desc[$1] = $0; next }
/^LOAD-ROUND / {
    kv(); g = v["label"]; sub(/\/[^\/]*$/, "", g); p = v["label"]; sub(/^.*\//, "", p)
    if (!(g in gseen)) { gseen[g] = 1; groups[++ng] = g }
    if (!((g, p) in pseen)) { pseen[g, p] = 1; pol[g, ++np[g]] = p }
    iops[g, p, v["round"]] = v["iops"] + 0; all[g, p] = all[g, p] (all[g, p] == "" ? "" : "/") v["iops"]
    lst[g, p] = lst[g, p] " " v["iops"]; nr[g] = (v["round"] + 1 > nr[g]) ? v["round"] + 1 : nr[g]
    next
}
/^LOAD label=/ {
    kv(); g = v["label"]; sub(/\/[^\/]*$/, "", g); p = v["label"]; sub(/^.*\//, "", p)
    n = split(v["split"], s, ","); sa = 0; sb = 0
    for (j = 1; j <= n; j++) { split(s[j], x, ":"); if (x[1] == "a") sa = x[2]; if (x[1] == "b") sb = x[2] }
    bshare[g, p] = (sa + sb) ? 100 * sb / (sa + sb) : 0; brate[g, p] = sb / (rounds * secs)
    p99[g, p] = v["p99_us"] / 1000
}
END {
    for (k = 1; k <= ng; k++) {
        g = groups[k]; setup = g; sub(/:.*/, "", setup); wl = g; sub(/^[^:]*:/, "", wl)
        bs = wl; sub(/k-.*/, "", bs)
        printf "TABLE: == %s, %s: %s; medians of %d rounds of %s s\n", setup, wl, desc[setup], nr[g], secs
        printf "TABLE: %-15s %8s %8s %8s %-15s %9s %7s %7s %8s  %s\n", "policy", "MiB/s", "IOPS", "vs best", "(best other)", "per round", "b I/O", "b IOPS", "p99 ms", "IOPS per round"
        for (i = 1; i <= np[g]; i++) { p = pol[g, i]; m[p] = median(lst[g, p]) }
        for (i = 1; i <= np[g]; i++) {
            p = pol[g, i]; best = 0; bp = ""
            for (j = 1; j <= np[g]; j++) { q = pol[g, j]; if (q != p && m[q] > best) { best = m[q]; bp = q } }
            rr = ""
            for (r = 0; r < nr[g]; r++)
                if (((g, p, r) in iops) && iops[g, bp, r] > 0) rr = rr " " iops[g, p, r] / iops[g, bp, r]
            printf "TABLE: %-15s %8.2f %8d %7.3fx %-15s %8.3fx %6.1f%% %7d %8.1f  %s\n", p, m[p] * bs / 1024, m[p], (best ? m[p] / best : 0), bp, median(rr), bshare[g, p], brate[g, p], p99[g, p], all[g, p]
            if (p == "auto") summary[k] = sprintf("TABLE: %s %s: auto / best other (%s) = %.3f (medians), %.3f (per round)", setup, wl, bp, (best ? m[p] / best : 0), median(rr))
        }
    }
    for (k = 1; k <= ng; k++) if (summary[k] != "") print summary[k]
}' $RAW >/tmp/table.txt
cp /tmp/table.txt /hostwork/table.txt
cat /tmp/table.txt
for s in $SETUPS; do
    for wl in $WORKLOADS; do
        bs=${wl%%:*}
        qd=${wl#*:}
        kind=${qd#*:}
        qd=${qd%%:*}
        for p in $(echo "$POLICIES" | tr ',' ' '); do
            grep -q "^LOAD label=$s:${bs}k-$kind-qd$qd/$p " $RAW ||
                bad "no measurement of $p in $s ${bs}k $kind QD$qd"
        done
    done
done
exit $rc
