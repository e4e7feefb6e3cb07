# Scenario resize (sourced by tests/vm/run): online resize (issue 46). One 64 MiB image
# served by vhost-mpath through two paths (a, b: the same image, so growing it grows
# both), --rpc-socket; the guest's virtio-blk learns each new capacity through the
# backend request channel (BACKEND_CONFIG_CHANGE_MSG -> QEMU GET_CONFIG -> config
# interrupt -> "virtio_blk virtioN: [vda] new size: ...").
#
# Steps, each started by the guest (ready.N on the share) and answered by the host (done.N):
#   1. host grows the image to 96 MiB and calls `resize` (must answer frontend "notified",
#      or find it done by the size watch when its 1 s tick fell between the two);
#      the guest must see 96 MiB within 2 s, write 1 MiB of pattern at 80 MiB and read it
#      back (O_DIRECT).
#   2. host grows the image to 128 MiB and calls nothing: the path checker must notice;
#      the guest must see 128 MiB within 4 s, write + read back 1 MiB at 120 MiB.
#   3. host calls `resize` with size 64 MiB and no force: must be refused; the guest keeps
#      128 MiB.
# The guest checks dmesg's "new size" lines (one per growth). Host, after poweroff: the
# image holds both patterns; the daemon logged "capacity changed" twice, with old and new
# sizes; the backend exits 0.
# shellcheck shell=bash

resize_wait_for() {
    local t0
    t0=$(now)
    until eval "$1"; do
        kill -0 "$QEMU_PID" 2>/dev/null || return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$2" ] && return 1
        sleep 0.05
    done
}

scenario_main() {
    local img=$RUN/disk.img sock=$RUN/vhost.sock rpc=$RUN/rpc.sock bin t0 rc r MiB=$((1 << 20))
    if [ "${VMTEST_BACKEND:-vhost-mpath}" != vhost-mpath ]; then
        fail "resize runs against vhost-mpath only"
        return 1
    fi
    bin=$(vm_daemon_bin) || return 1

    t0=$(now)
    truncate -s 64M "$img"
    python3 -c '
import random, sys
sys.stdout.buffer.write(random.Random(0x72657a).randbytes(2 << 20))
' >"$SHARE/pattern.bin"
    cp "$VM_DIR/scenarios/resize.guest.sh" "$SHARE/guest.sh"
    # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
    vm_start_backend vhost-mpath "$sock" "$bin" --socket-path "$sock" --rpc-socket "$rpc" \
        --path "$img,name=a" --path "$img,name=b" ${VHOST_MPATH_ARGS:-} ||
        { fail "backend vhost-mpath did not start"; return 1; }
    echo "TIME: prepare + backend up: $(elapsed "$t0") s"

    VM_MEMFD=1 VM_MEM=512M vm_boot_start \
        -chardev "socket,id=c0,path=$sock" \
        -device "vhost-user-blk-pci,chardev=c0,num-queues=1"

    local step ts out
    for step in 1 2 3; do
        if ! resize_wait_for "[ -e '$SHARE/ready.$step' ]" 60; then
            fail "step $step: the guest never asked (or QEMU ended)"
            break
        fi
        ts=$(now)
        case $step in
        1)
            truncate -s 96M "$img"
            if out=$(python3 "$VM_DIR/rpc.py" "$rpc" call resize '{}' 2>&1); then
                if echo "$out" | grep -q '"frontend": "notified"'; then
                    pass "step 1: resize to 96 MiB, frontend notified in $(elapsed "$ts") s"
                elif echo "$out" | grep -q '"changed": false' &&
                    grep -q 'capacity changed from 67108864 to 100663296 bytes (path checker)' "$LOGDIR/vhost-mpath.log"; then
                    # The size watch ticks every second: one that falls between the growth
                    # and the call takes the change (and notifies) first. The guest's checks
                    # still hold; only the RPC's own notification went unexercised.
                    pass "step 1: the size watch took 96 MiB before the resize call (its tick fell between them); resize found it done"
                    echo "INFO: step 1: the RPC's notification was not exercised in this run"
                else
                    fail "step 1: resize did not notify the frontend: $(echo "$out" | tr -d '\n')"
                fi
            else
                fail "step 1: resize failed: $out"
            fi
            ;;
        2)
            truncate -s 128M "$img"
            if resize_wait_for "grep -q 'capacity changed from 100663296 to 134217728' '$LOGDIR/vhost-mpath.log'" 5; then
                pass "step 2: the path checker took 128 MiB $(elapsed "$ts") s after the image grew"
            else
                fail "step 2: the path checker did not resize within 5 s"
            fi
            ;;
        3)
            if out=$(python3 "$VM_DIR/rpc.py" "$rpc" call resize "{\"size\": $((64 * MiB))}" 2>&1); then
                fail "step 3: a shrink without force was taken: $out"
            else
                echo "$out" | grep -q force &&
                    pass "step 3: shrink without force refused ($(echo "$out" | tr -d '\n' | cut -c1-120))" ||
                    fail "step 3: refused, but not for want of force: $out"
            fi
            ;;
        esac
        touch "$SHARE/done.$step"
    done

    vm_boot_wait
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    vm_guest_verdict

    vm_stop_backend vhost-mpath
    rc=$?
    [ "$rc" = 0 ] && pass "backend exited 0 on SIGTERM" || fail "backend exit status $rc after SIGTERM"
    r=$(grep -c 'capacity changed from' "$LOGDIR/vhost-mpath.log")
    [ "$r" = 2 ] && pass "daemon logged 2 capacity changes: $(grep -o 'capacity changed from [0-9]* to [0-9]* bytes ([a-z ]*)' "$LOGDIR/vhost-mpath.log" | tr '\n' ';')" ||
        fail "daemon logged $r capacity changes, want 2"
    for r in 80 120; do
        if cmp -n $MiB -i "0:$((r * MiB))" "$SHARE/pattern.bin" "$img"; then
            pass "image holds the pattern at $r MiB"
        else
            fail "image differs from the pattern at $r MiB"
        fi
    done
}
