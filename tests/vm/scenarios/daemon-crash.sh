# Scenario daemon-crash (sourced by tests/vm/run): the daemon is killed with SIGKILL
# under a verifying load and restarted, five times; with inflight I/O tracking
# (INFLIGHT_SHMFD) the guest must not notice. See docs/RESTART.md.
#
# Disk: one 64 MiB image on two paths, b slower (lab delay-us, so completions come
# back out of order), round-robin one request each; 2 queues; QEMU reconnect=1.
# Guest (daemon-crash.guest.sh): fio, 2 jobs (one per vCPU, so both queues) of 4 KiB
# random writes at QD 32 with crc32c verification (verify_backlog), round after
# round until the host is done killing; then a verify-only pass over everything.
# Host: after the load starts, 5 times: wait a random 0.5-3 s (seeded by
# VMTEST_CRASH_SEED, default random, printed), SIGKILL the daemon (the kills numbered
# in VMTEST_CRASH_DEEP, default "2 4", first wait for more than 16 requests in flight
# per get_stats), start a new one on the same socket, wait for QEMU to reconnect.
# Asserted: 0 guest I/O errors, 0 verify mismatches, no virtio/blk errors in the
# guest's kernel log, every fio round completed its whole size; 5 kills done, one
# with > 16 in flight.
# Negative control: VHOST_MPATH_ARGS=--no-inflight tests/vm/run daemon-crash must FAIL.
# shellcheck shell=bash

crash_start_backend() {
    local n=$1 bin
    bin=$(vm_daemon_bin) || return 1
    rm -f "$sock" "$rpc"
    # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
    vm_start_backend "vhost-mpath.$n" "$sock" "$bin" --socket-path "$sock" --rpc-socket "$rpc" \
        --num-queues 2 --lab --policy round-robin --rr-min-io 1 \
        --path "$img,name=a" --path "$img,name=b,delay-us=${VMTEST_CRASH_DELAY_US:-3000}" \
        ${VHOST_MPATH_ARGS:-}
}

crash_connections() {
    ss -xHn state established 2>/dev/null | awk -v p="$sock" 'index($0, p) { n++ } END { print n + 0 }'
}

# Requests in flight over all paths (get_stats), or -1.
crash_in_flight() {
    python3 "$VM_DIR/rpc.py" "$rpc" call get_stats 2>/dev/null | python3 -c '
import json, sys
try:
    print(sum(int(p.get("in_flight_requests", 0)) for p in json.load(sys.stdin)["paths"]))
except Exception:
    print(-1)'
}

# crash_kill_deep SECONDS: poll get_stats until more than 16 requests are in flight and
# SIGKILL the daemon at once (from the poller: no delay between what was seen and the
# kill); prints the count seen (1 on timeout, nothing killed).
crash_kill_deep() {
    python3 - "$VM_DIR/rpc.py" "$rpc" "$1" "$BACKEND_PID" <<'PY'
import importlib.util, os, signal, sys, time
spec = importlib.util.spec_from_file_location("rpc", sys.argv[1])
rpc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rpc)
r = rpc.Rpc(sys.argv[2])
t0 = time.monotonic()
best = 0
while time.monotonic() - t0 < float(sys.argv[3]):
    n = sum(int(p.get("in_flight_requests", 0)) for p in r.call("get_stats")["paths"])
    best = max(best, n)
    if n > 16:
        os.kill(int(sys.argv[4]), signal.SIGKILL)
        print(n)
        sys.exit(0)
    time.sleep(0.005)
print(best)
sys.exit(1)
PY
}

crash_wait_for() {
    local t0
    t0=$(now)
    until eval "$1"; do
        kill -0 "$QEMU_PID" 2>/dev/null || return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$2" ] && return 1
        sleep 0.05
    done
}

scenario_main() {
    local img=$RUN/disk.img sock=$RUN/vhost.sock rpc=$RUN/rpc.sock
    local kills=${VMTEST_CRASH_KILLS:-5} deep=" ${VMTEST_CRASH_DEEP:-2 4} "
    local seed=${VMTEST_CRASH_SEED:-$RANDOM} k n pause deep_seen=0 done_kills=0
    local VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-200}
    log "kill pauses seeded with $seed (VMTEST_CRASH_SEED)"
    echo "INFO: seed $seed (VMTEST_CRASH_SEED=$seed reproduces the pauses)"
    truncate -s 64M "$img"
    cp "$VM_DIR/scenarios/daemon-crash.guest.sh" "$SHARE/guest.sh"
    {
        echo "JOB_MIB=${VMTEST_CRASH_JOB_MIB:-8}"
        echo "MAX_ROUNDS=${VMTEST_CRASH_MAX_ROUNDS:-40}"
    } >"$SHARE/params"
    crash_start_backend 0 || { fail "backend did not start"; return 1; }
    VM_MEMFD=1 VM_MEM=512M vm_boot_start \
        -chardev "socket,id=c0,path=$sock,reconnect=1" \
        -device "vhost-user-blk-pci,chardev=c0,num-queues=2"
    if ! crash_wait_for "[ -e '$SHARE/load-started' ]" 90; then
        fail "the guest's load did not start within 90 s"
        echo "no load" >"$SHARE/kills-done"
    fi
    for ((k = 1; k <= kills; k++)); do
        [ -e "$SHARE/kills-done" ] && break
        if [ -e "$SHARE/load-ended" ]; then
            fail "the guest's load ended before kill $k"
            break
        fi
        pause=$(python3 -c "import random; r = random.Random($seed * 100 + $k); print(f'{r.uniform(0.5, 3):.2f}')")
        sleep "$pause"
        if [ "${deep#* $k }" != "$deep" ]; then
            if ! n=$(crash_kill_deep 20); then
                log "kill $k: never more than 16 in flight within 20 s (most: $n)"
            fi
        else
            n=$(crash_in_flight)
        fi
        kill -KILL "$BACKEND_PID"
        wait "$BACKEND_PID" 2>/dev/null
        [ "${n:--1}" -gt "$deep_seen" ] 2>/dev/null && deep_seen=$n
        log "kill $k: SIGKILL after ${pause} s with $n requests in flight (get_stats)"
        echo "INFO: kill $k: SIGKILL with $n requests in flight (get_stats), ${pause} s after the previous start"
        if ! crash_start_backend "$k"; then
            fail "kill $k: the new daemon did not start"
            break
        fi
        if crash_wait_for '[ "$(crash_connections)" -gt 0 ]' 30; then
            done_kills=$k
        else
            fail "kill $k: QEMU did not reconnect within 30 s"
            break
        fi
    done
    echo "$done_kills" >"$SHARE/kills-done"
    vm_boot_wait
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^qemu-system' | sort | uniq -c | sed 's/^/qemu: /'
    vm_guest_verdict
    if [ "$done_kills" = "$kills" ]; then
        pass "$kills SIGKILLs under load, each followed by a restart QEMU reconnected to"
    else
        fail "only $done_kills of $kills kills done"
    fi
    if [ "$deep_seen" -gt 16 ]; then
        pass "a kill hit with $deep_seen requests in flight (> 16, get_stats)"
    else
        fail "no kill with more than 16 requests in flight"
    fi
    local resub
    resub=$(cat "$LOGDIR"/vhost-mpath.*.log | sed -n 's/.*inflight region: \([0-9]*\) requests to resubmit.*/\1/p' |
        awk '{ s += $1; if ($1 > m) m = $1 } END { printf "%d in all, at most %d on one queue", s, m }')
    echo "INFO: restarted daemons resubmitted from the inflight region: $resub"
    vm_stop_backend "vhost-mpath.$done_kills" >/dev/null || true
}
