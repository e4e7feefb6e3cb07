#!/bin/sh
# Guest half of the benchmark nvme-bench (see nvme-bench.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

A=$(wait_ng "$PCI_A") || { bad "no ng node on $PCI_A"; exit 1; }
B=$(wait_ng "$PCI_B") || { bad "no ng node on $PCI_B"; exit 1; }
ok "paths: a=$A ($(ctrl_of "$PCI_A"), $PCI_A) b=$B ($(ctrl_of "$PCI_B"), $PCI_B); $(nproc) vCPUs"
: >/hostwork/bench.raw

# cpu_mark: "busy total" jiffies of all vCPUs; cpu_busy MARK: busy percent since MARK
# (of all vCPUs together: 100 = every vCPU busy all the time).
cpu_mark() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
cpu_busy() {
    echo "$1 $2 $(cpu_mark)" | awk '{ d = $4 - $2; printf "%.0f", (d > 0 ? 100 * ($3 - $1) / d : 0) }'
}

# fio_cell LABEL BS_KIB QD NODE...: fio's io_uring_cmd engine straight on the ng nodes,
# one job per node, each with QD in flight; one BENCH line (group totals). Per job:
#   fio --ioengine=io_uring_cmd --cmd_type=nvme --rw=randread --bs=BS --iodepth=QD
#       --iodepth_batch_submit=QD/2 --iodepth_batch_complete_min=1
#       --iodepth_batch_complete_max=QD --fixedbufs --registerfiles
#       --time_based --runtime=S --ramp_time=0.5 --filename=/dev/ngXn1
fio_cell() {
    local label=$1 bs=$2 qd=$3 args="" n mark cpu
    shift 3
    for n in "$@"; do
        args="$args --name=$(basename "$n") --filename=$n"
    done
    mark=$(cpu_mark)
    # shellcheck disable=SC2086
    # Batched submission and reaping, registered buffers and file: fio at its best
    # (its defaults, one io_uring_enter per request, reach about 40% of this under TCG).
    timeout $((MEASURE_S + 30)) /usr/bin/fio --ioengine=io_uring_cmd --cmd_type=nvme --rw=randread \
        --bs="${bs}k" --iodepth="$qd" --iodepth_batch_submit=$(((qd + 1) / 2)) \
        --iodepth_batch_complete_min=1 --iodepth_batch_complete_max="$qd" \
        --fixedbufs --registerfiles --time_based --runtime="$MEASURE_S" --ramp_time=0.5 \
        --group_reporting --output-format=json $args >/tmp/fio.json 2>/tmp/fio.err &&
        cpu=$(cpu_busy $mark) ||
        { bad "fio $label ${bs}k QD$qd: $(tail -n 2 /tmp/fio.err)"; return 1; }
    /usr/bin/python3 - "$label" "${bs}k-qd$qd" /tmp/fio.json "$cpu" <<'PY' | tee -a /hostwork/bench.raw
import json, sys
r = json.load(open(sys.argv[3]))["jobs"][0]["read"]
p99 = r["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000
print(f"BENCH label={sys.argv[1]} wl={sys.argv[2]} iops={r['iops']:.0f} mibs={r['bw'] / 1024:.2f} "
      f"mean_us={r['lat_ns']['mean'] / 1000:.0f} p99_us={p99:.0f} cpu={sys.argv[4]}")
PY
}

# daemon_cell LABEL BS_KIB QD: vhost-load (blkio client, queue 0) against the running daemon.
daemon_cell() {
    local mark cpu
    mark=$(cpu_mark)
    # shellcheck disable=SC2086
    timeout $((MEASURE_S + 60)) $PIN_CLIENT "$BIN/vhost-load" --socket "$SOCK" --bs-kib "$2" --qd "$3" \
        --seconds "$MEASURE_S" --warmup 0.5 --label "$1" >/tmp/load.out 2>&1 ||
        { bad "vhost-load $1 ${2}k QD$3: $(tail -n 2 /tmp/load.out)"; return 1; }
    cpu=$(cpu_busy $mark)
    sed -n "s/^LOAD label=\([^ ]*\) iops=\([0-9]*\) .* mibs=\([0-9.]*\) mean_us=\([0-9]*\) .* p99_us=\([0-9]*\) .*/BENCH label=\1 wl=${2}k-qd$3 iops=\2 mibs=\3 mean_us=\4 p99_us=\5 cpu=$cpu/p" \
        /tmp/load.out | tee -a /hostwork/bench.raw
}

# daemon_cells LABEL DAEMON ARGS...: start the daemon, every workload, stop it.
daemon_cells() {
    local label=$1 wl
    shift
    DAEMON_PREFIX=$PIN_DAEMON
    # shellcheck disable=SC2086
    start_daemon "daemon-$label" --num-queues 1 $DAEMON_ARGS "$@" || { bad "$label: daemon did not start"; return 1; }
    DAEMON_PREFIX=
    for wl in $WORKLOADS; do
        daemon_cell "$label" "${wl%:*}" "${wl#*:}"
    done
    stop_daemon || bad "$label: daemon exit status $?"
}

# The daemon's worker and the client on vCPUs of their own (PIN=1): saves the scheduler's
# migrations, worth ~10% under TCG; fio runs unpinned (its best).
PIN_DAEMON="" PIN_CLIENT=""
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    PIN_DAEMON="taskset -c 1" PIN_CLIENT="taskset -c 0"
fi
t0=$(t)
rep=1
while [ $rep -le "$REPS" ]; do
    for wl in $WORKLOADS; do
        fio_cell fio-1path "${wl%:*}" "${wl#*:}" "$A"
        fio_cell fio-2paths "${wl%:*}" "${wl#*:}" "$A" "$B"
    done
    daemon_cells daemon-1path --path "$A,name=a"
    daemon_cells daemon-2paths --policy round-robin --path "$A,name=a" --path "$B,name=b"
    rep=$((rep + 1))
done
echo "TIME: $REPS rounds of every cell in $(since "$t0") s"

# Medians over the rounds, one row per (workload, label), and the ratios.
awk -v reps="$REPS" '
function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^BENCH / {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    k = v["wl"] SUBSEP v["label"]
    if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
    if (!(v["wl"] in wseen)) { wseen[v["wl"]] = 1; wls[++nw] = v["wl"] }
    vals[k "iops"] = vals[k "iops"] " " v["iops"]; vals[k "mibs"] = vals[k "mibs"] " " v["mibs"]
    vals[k "mean"] = vals[k "mean"] " " v["mean_us"]; vals[k "p99"] = vals[k "p99"] " " v["p99_us"]
    vals[k "cpu"] = vals[k "cpu"] " " v["cpu"]
    vals[k "all"] = vals[k "all"] (vals[k "all"] == "" ? "" : "/") v["iops"]
}
END {
    printf "TABLE: %-10s %-14s %8s %8s %9s %9s %8s  %s\n", "workload", "setup", "IOPS", "MiB/s", "mean us", "p99 us", "guest CPU", "IOPS per round"
    for (i = 1; i <= nk; i++) {
        split(order[i], kk, SUBSEP)
        m[order[i]] = median(order[i] "iops")
        printf "TABLE: %-10s %-14s %8d %8.1f %9d %9d %7d%%  %s\n", kk[1], kk[2], m[order[i]], median(order[i] "mibs"), median(order[i] "mean"), median(order[i] "p99"), median(order[i] "cpu"), vals[order[i] "all"]
    }
    for (w = 1; w <= nw; w++) {
        f1 = m[wls[w] SUBSEP "fio-1path"]; f2 = m[wls[w] SUBSEP "fio-2paths"]
        d1 = m[wls[w] SUBSEP "daemon-1path"]; d2 = m[wls[w] SUBSEP "daemon-2paths"]
        printf "RATIO %s daemon-1path/fio-1path %.2f daemon-2paths/daemon-1path %.2f fio-2paths/fio-1path %.2f\n", wls[w], (f1 ? d1 / f1 : 0), (d1 ? d2 / d1 : 0), (f1 ? f2 / f1 : 0)
    }
}' /hostwork/bench.raw >/tmp/table.out
grep '^TABLE' /tmp/table.out
while read -r _ wl _ r1 _ r2 _ r3; do
    echo "INFO: $wl: daemon over one path / fio on that ng node = ${r1}x (target >= 0.9);" \
        "daemon over two paths / one = ${r2}x; fio on both ng nodes / one = ${r3}x"
    if awk -v r="$r1" 'BEGIN { exit !(r >= 0.9) }'; then
        ok "$wl: daemon reaches ${r1}x of fio on the same ng node (>= 0.9)"
    else
        bad "$wl: daemon reaches only ${r1}x of fio on the same ng node (< 0.9)"
    fi
done <<EOF
$(grep '^RATIO' /tmp/table.out)
EOF
cp /tmp/table.out /hostwork/table.out
exit $rc
