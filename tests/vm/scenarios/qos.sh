# run-timeout: 300
# Scenario qos (sourced by tests/vm/run): per-disk QoS limits (issue 46, part 2) as a
# guest sees them. vhost-mpath on one 64 MiB image through two paths (a, b),
# --qos total_iops_sec=500, --rpc-socket; the guest runs fio (O_DIRECT, libaio) on
# /dev/vda and asks for each step's limits (ready.N), which the host sets with set_qos
# (buckets start empty) before it answers done.N.
#   a. total_iops_sec=500: 4k randread, then 4k randwrite, QD16, each 10 s after a 1 s
#      ramp (the empty bucket's first tenth of a second is not the limit): within 5%.
#   b. total_bytes_sec=8000000: 64k read, then 64k write, QD8, 10 s each: within 5%.
#   c. burst from idle: total_iops_sec=200, _max=1000, _max_length=2; fio's per-second
#      IOPS log: the first second 600..1155 (1000 and the empty burst-rate bucket's
#      first 100), the mean of seconds 5-7 within 5% of 200
#      (the burst lasts 2 * 1000 / (1000 - 200) = 2.5 s: the bucket leaks meanwhile).
#   d. runtime change: while the guest reads at total_iops_sec=50, the host samples
#      get_stats (both paths' reads + writes) every 10 ms: the rate before is within 10%
#      of 50; after set_qos total_iops_sec=500 returns, 10 completions (200 ms at the old
#      rate) must come within 100 ms, and the rate from 0.2 to 1.2 s after it is within
#      5% of 500.
#   e. no limits: the guest reaches 1200 IOPS and 12 MB/s, over every limit above.
# Each measurement is the guest's (fio's clock) under TCG on a 2-core host; the limits
# are low enough for it (e). VMTEST_QOS_OFF=1 runs the same with no limits at all (no
# --qos, no set_qos): a check that the checks fail (a-d must).
# shellcheck shell=bash

qos_wait_for() {
    local t0
    t0=$(now)
    until [ -e "$1" ]; do
        kill -0 "$QEMU_PID" 2>/dev/null || return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$2" ] && return 1
        sleep 0.05
    done
}

# qos_set JSON: set_qos unless VMTEST_QOS_OFF.
qos_set() {
    [ "${VMTEST_QOS_OFF:-0}" = 1 ] && return 0
    python3 "$VM_DIR/rpc.py" "$RPC" call set_qos "$1" >/dev/null ||
        fail "set_qos $1 refused"
}

# qos_watch: step d's host side; PASS/FAIL lines on stdout.
qos_watch() {
    python3 - "$VM_DIR" "$RPC" "${VMTEST_QOS_OFF:-0}" <<'PY'
import sys, time
sys.path.insert(0, sys.argv[1])
from rpc import Rpc

rpc, off = Rpc(sys.argv[2]), sys.argv[3] == "1"
def count():
    return sum(int(p.get("reads", 0)) + int(p.get("writes", 0))
               for p in rpc.call("get_stats")["paths"])
def sample(secs):
    out, end = [], time.monotonic() + secs
    while time.monotonic() < end:
        out.append((time.monotonic(), count()))
        time.sleep(0.01)
    return out
def rate(s, a, b):
    pts = [x for x in s if a <= x[0] <= b]
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

# Wait for the guest's fio, then skip its first half second (the empty bucket's allowance).
c0, t0 = count(), time.monotonic()
while count() < c0 + 5:
    if time.monotonic() - t0 > 20:
        print("FAIL: d) no guest I/O within 20 s"); sys.exit(0)
    time.sleep(0.01)
sample(0.5)
before = sample(1.0)
r0 = rate(before, before[0][0], before[-1][0])
if not off:
    rpc.call("set_qos", {"total_iops_sec": 500})
tr = time.monotonic()
after = sample(1.3)
cr = after[0][1]
t10 = next((t - tr for t, c in after if c - cr >= 10), None)
r1 = rate(after, tr + 0.2, tr + 1.2)
print(f"INFO: d) {len(before) + len(after)} samples of get_stats, every "
      f"{(after[-1][0] - after[0][0]) / (len(after) - 1) * 1000:.1f} ms")
ok = lambda c, m: print(("PASS: " if c else "FAIL: ") + m)
ok(abs(r0 - 50) <= 5, f"d) before the change {r0:.1f} IOPS (limit 50, within 10%)")
ok(t10 is not None and t10 <= 0.1,
   f"d) 10 completions {t10 * 1000 if t10 is not None else -1:.0f} ms after set_qos "
   f"50 -> 500 returned (200 ms at the old rate; want <= 100 ms)")
ok(abs(r1 - 500) <= 25, f"d) after the change {r1:.1f} IOPS (limit 500, within 5%)")
PY
}

scenario_main() {
    local img=$RUN/disk.img sock=$RUN/vhost.sock bin t0 rc step qos=(--qos total_iops_sec=500)
    RPC=$RUN/rpc.sock
    if [ "${VMTEST_BACKEND:-vhost-mpath}" != vhost-mpath ]; then
        fail "qos runs against vhost-mpath only"
        return 1
    fi
    bin=$(vm_daemon_bin) || return 1
    [ "${VMTEST_QOS_OFF:-0}" = 1 ] && qos=() && echo "VMTEST_QOS_OFF=1: no limits (the checks must fail)"

    t0=$(now)
    truncate -s 64M "$img"
    cp "$VM_DIR/scenarios/qos.guest.sh" "$SHARE/guest.sh"
    # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
    vm_start_backend vhost-mpath "$sock" "$bin" --socket-path "$sock" --rpc-socket "$RPC" \
        "${qos[@]}" --path "$img,name=a" --path "$img,name=b" ${VHOST_MPATH_ARGS:-} ||
        { fail "backend vhost-mpath did not start"; return 1; }
    echo "TIME: prepare + backend up: $(elapsed "$t0") s"

    VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-200} VM_MEMFD=1 VM_MEM=512M vm_boot_start \
        -chardev "socket,id=c0,path=$sock" \
        -device "vhost-user-blk-pci,chardev=c0,num-queues=1"

    for step in 2 3 4 5; do
        if ! qos_wait_for "$SHARE/ready.$step" 90; then
            fail "step $step: the guest never asked (or QEMU ended)"
            break
        fi
        case $step in
        2) qos_set '{"total_iops_sec": 0, "total_bytes_sec": 8000000}' ;;
        3) qos_set '{"total_bytes_sec": 0, "total_iops_sec": 200, "total_iops_sec_max": 1000, "total_iops_sec_max_length": 2}' ;;
        4) qos_set '{"total_iops_sec": 50, "total_iops_sec_max": 0, "total_iops_sec_max_length": 0}' ;;
        5) qos_set '{"total_iops_sec": 0}' ;;
        esac
        touch "$SHARE/done.$step"
        if [ $step = 4 ]; then
            qos_watch | tee "$RUN/watch.out"
            grep -q '^FAIL' "$RUN/watch.out" && FAILED=1
        fi
    done

    vm_boot_wait
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    vm_guest_verdict
    python3 "$VM_DIR/rpc.py" "$RPC" call get_qos | sed 's/^/INFO: get_qos at the end: /'

    vm_stop_backend vhost-mpath
    rc=$?
    [ "$rc" = 0 ] && pass "backend exited 0 on SIGTERM" || fail "backend exit status $rc after SIGTERM"
}
