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

# The variants, each measured with fio and with the daemon (VARIANTS):
#   plain   fio without registration        daemon --fixed-buffers false --registered-files false
#   files   fio --registerfiles             daemon --fixed-buffers false
#   fixed   fio --fixedbufs --registerfiles daemon (its defaults: both on)
#   polled  fio ... --hipri                 daemon --io-poll true (needs poll queues)
fio_flags() {
    case $1 in
    plain) echo "" ;;
    files) echo "--registerfiles" ;;
    fixed) echo "--fixedbufs --registerfiles" ;;
    polled) echo "--fixedbufs --registerfiles --hipri" ;;
    esac
}
daemon_flags() {
    case $1 in
    plain) echo "--fixed-buffers false --registered-files false" ;;
    files) echo "--fixed-buffers false" ;;
    fixed) echo "" ;;
    polled) echo "--io-poll true" ;;
    esac
}

# fio_cell LABEL VARIANT BS_KIB QD NODE...: fio's io_uring_cmd engine straight on the ng
# nodes, one job per node, each with QD in flight; one BENCH line (group totals). Per job:
#   fio --ioengine=io_uring_cmd --cmd_type=nvme --rw=randread --bs=BS --iodepth=QD
#       --iodepth_batch_submit=QD/2 --iodepth_batch_complete_min=1
#       --iodepth_batch_complete_max=QD $(fio_flags VARIANT)
#       --time_based --runtime=S --ramp_time=0.5 --filename=/dev/ngXn1
fio_cell() {
    local label=$1 flags bs=$3 qd=$4 args="" n mark cpu
    flags=$(fio_flags "$2")
    shift 4
    for n in "$@"; do
        args="$args --name=$(basename "$n") --filename=$n"
    done
    mark=$(cpu_mark)
    # shellcheck disable=SC2086
    # Batched submission and reaping (fio's defaults, one io_uring_enter per request,
    # reach about 40% of this under TCG), registration as the variant says.
    timeout $((MEASURE_S + 30)) /usr/bin/fio --ioengine=io_uring_cmd --cmd_type=nvme --rw=randread \
        --bs="${bs}k" --iodepth="$qd" --iodepth_batch_submit=$(((qd + 1) / 2)) \
        --iodepth_batch_complete_min=1 --iodepth_batch_complete_max="$qd" \
        $flags --time_based --runtime="$MEASURE_S" --ramp_time=0.5 \
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

# reg_totals LOG: the daemon's per-connection io_uring registration counters, summed.
reg_totals() {
    sed -n 's/.*io_uring registration this connection: //p' "$1" | awk '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); t[kv[1]] += kv[2] } }
        END { printf "fixed_buf=%d plain_buf=%d fixed_file=%d polled=%d connections=%d", t["fixed_buf"], t["plain_buf"], t["fixed_file"], t["polled"], NR }'
}

# daemon_cells LABEL VARIANT DAEMON ARGS...: start the daemon with the variant's flags,
# every workload, stop it; then check from its counters that the variant's path was
# taken (fixed buffers, registered files, the polled ring), not just that I/O worked.
daemon_cells() {
    local label=$1 variant=$2 wl reg log
    shift 2
    log="/hostwork/$label.log"
    DAEMON_PREFIX=$PIN_DAEMON
    # shellcheck disable=SC2086
    start_daemon "$label" --num-queues 1 $DAEMON_ARGS $(daemon_flags "$variant") "$@" ||
        { bad "$label: daemon did not start"; return 1; }
    DAEMON_PREFIX=
    for wl in $WORKLOADS; do
        daemon_cell "$label" "${wl%:*}" "${wl#*:}"
    done
    stop_daemon || bad "$label: daemon exit status $?"
    reg=$(reg_totals "$log")
    echo "REG label=$label $reg" >>/hostwork/bench.raw
    case "$variant" in
    plain) echo "$reg" | grep -q "^fixed_buf=0 .*fixed_file=0 polled=0 " ;;
    files) echo "$reg" | grep -q "^fixed_buf=0 .*fixed_file=[1-9][0-9]* polled=0 " ;;
    fixed) echo "$reg" | grep -q "^fixed_buf=[1-9][0-9]* plain_buf=0 fixed_file=[1-9][0-9]* polled=0 " ;;
    polled) echo "$reg" | grep -q "^fixed_buf=[1-9][0-9]* plain_buf=0 fixed_file=[1-9][0-9]* polled=[1-9]" ;;
    esac && ok "$label: the $variant path was taken ($reg)" ||
        bad "$label: the $variant path was not taken as expected ($reg)"
}

# The daemon's worker and the client on vCPUs of their own (PIN=1): saves the scheduler's
# migrations, worth ~10% under TCG; fio runs unpinned (its best).
PIN_DAEMON="" PIN_CLIENT=""
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    PIN_DAEMON="taskset -c 1" PIN_CLIENT="taskset -c 0"
fi
blk=nvme${A#/dev/ng}
POLL=$(cat /sys/block/$blk/queue/io_poll 2>/dev/null || echo 0)
info "poll queues: nvme.poll_queues=$(cat /sys/module/nvme/parameters/poll_queues 2>/dev/null), $blk queue/io_poll=$POLL"
if [ "$POLL" != 1 ]; then
    v=""
    for x in $VARIANTS; do [ "$x" = polled ] || v="$v $x"; done
    [ "$v" != " $VARIANTS" ] && info "no poll queues on $blk: the polled variant is left out"
    VARIANTS=${v# }
fi
t0=$(t)
rep=1
while [ $rep -le "$REPS" ]; do
    for variant in $VARIANTS; do
        for wl in $WORKLOADS; do
            fio_cell "fio-$variant" "$variant" "${wl%:*}" "${wl#*:}" "$A"
        done
        daemon_cells "daemon-$variant" "$variant" --path "$A,name=a"
    done
    if [ "$TWO_PATHS" = 1 ]; then
        for wl in $WORKLOADS; do
            fio_cell fio-2paths fixed "${wl%:*}" "${wl#*:}" "$A" "$B"
        done
        daemon_cells daemon-2paths fixed --policy round-robin --path "$A,name=a" --path "$B,name=b"
    fi
    rep=$((rep + 1))
done
echo "TIME: $REPS rounds of every cell in $(since "$t0") s"

# Medians over the rounds, one row per (workload, label); per variant the ratio
# daemon / fio of the medians and the median of the per-round ratios (each round
# measures fio and the daemon back to back).
awk -v variants="$VARIANTS" '
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
    cnt[k]++; round[k, cnt[k]] = v["iops"]
}
END {
    printf "TABLE: %-10s %-14s %8s %8s %9s %9s %8s  %s\n", "workload", "setup", "IOPS", "MiB/s", "mean us", "p99 us", "guest CPU", "IOPS per round"
    for (i = 1; i <= nk; i++) {
        split(order[i], kk, SUBSEP)
        m[order[i]] = median(order[i] "iops")
        printf "TABLE: %-10s %-14s %8d %8.1f %9d %9d %7d%%  %s\n", kk[1], kk[2], m[order[i]], median(order[i] "mibs"), median(order[i] "mean"), median(order[i] "p99"), median(order[i] "cpu"), vals[order[i] "all"]
    }
    nv = split(variants, vs, " ")
    for (w = 1; w <= nw; w++) for (x = 1; x <= nv; x++) {
        f = wls[w] SUBSEP "fio-" vs[x]; d = wls[w] SUBSEP "daemon-" vs[x]
        if (!(f in seen) || !(d in seen)) continue
        r = ""
        for (n = 1; n <= cnt[f] && n <= cnt[d]; n++) r = r " " (round[f, n] ? round[d, n] / round[f, n] : 0)
        vals["r"] = r
        printf "RATIO %s %s %.3f %.3f\n", wls[w], vs[x], (m[f] ? m[d] / m[f] : 0), median("r")
    }
    for (w = 1; w <= nw; w++) {
        f1 = m[wls[w] SUBSEP "fio-fixed"]; f2 = m[wls[w] SUBSEP "fio-2paths"]
        d1 = m[wls[w] SUBSEP "daemon-fixed"]; d2 = m[wls[w] SUBSEP "daemon-2paths"]
        if (f2 && d2) printf "RATIO2 %s daemon-2paths/daemon-fixed %.2f fio-2paths/fio-fixed %.2f\n", wls[w], (d1 ? d2 / d1 : 0), (f1 ? f2 / f1 : 0)
    }
}' /hostwork/bench.raw >/tmp/table.out
grep '^TABLE' /tmp/table.out
grep '^REG' /hostwork/bench.raw | sed 's/^/INFO: /'
while read -r _ wl variant r rr; do
    [ -n "$wl" ] || continue
    echo "INFO: $wl $variant: daemon / fio = ${r}x (ratio of medians), ${rr}x (median of per-round ratios)"
    if [ "$variant" = fixed ]; then
        if awk -v r="$r" 'BEGIN { exit !(r >= 0.95) }'; then
            echo "TARGET: $wl: met: the daemon with fixed buffers reaches ${r}x of fio --fixedbufs (>= 0.95)"
        else
            echo "TARGET: $wl: not met: the daemon with fixed buffers reaches ${r}x of fio --fixedbufs (< 0.95)"
        fi
    fi
done <<EOF
$(grep '^RATIO ' /tmp/table.out)
EOF
grep '^RATIO2' /tmp/table.out | sed 's/^/INFO: /'
cp /tmp/table.out /hostwork/table.out
exit $rc
