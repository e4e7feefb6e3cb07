# Scenario vhost-blk (sourced by tests/vm/run): one vhost-user-blk disk with 2 queues,
# backed by a fresh 64 MiB image, driven by a real Linux guest under TCG.
#
# Backend (VMTEST_BACKEND):
#   vhost-mpath (default)  ${VHOST_MPATH_BIN:-target/release/vhost-mpath, else target/debug}
#                          --socket-path SOCK --num-queues 2 --queue-threads 1 --path IMG,name=a --path IMG,name=b
#                          (both virtqueues on one thread: the other scenarios run one per queue)
#                          $VHOST_MPATH_ARGS (extra flags, e.g. "--log-level debug")
#   qsd                    qemu-storage-daemon exporting IMG as vhost-user-blk (reference)
#
# Guest (vhost-blk.guest.sh): /dev/vda exists, 64 MiB, 2 blk-mq queues; writes a 16 MiB
# pattern at 8 MiB (two halves in parallel, pinned to CPU 0 and 1 so both virtqueues carry
# I/O) and 1 MiB at the last MiB with O_DIRECT + fsync, reads back with O_DIRECT, compares.
# Host, after the guest is off: the image holds the pattern at both offsets and zeros
# everywhere else; the backend exits 0 on SIGTERM.
# shellcheck shell=bash

scenario_main() {
    local disk_mib=64 pat_mib=16 off_mib=8 tail_mib=1 queues=2
    local tail_off_mib=$((disk_mib - tail_mib))
    local img=$RUN/disk.img sock=$RUN/vhost.sock backend=${VMTEST_BACKEND:-vhost-mpath}
    local t0 bin rc

    t0=$(now)
    truncate -s "${disk_mib}M" "$img"
    python3 -c '
import random, sys
sys.stdout.buffer.write(random.Random(0x76686f7374).randbytes(int(sys.argv[1]) << 20))
' "$pat_mib" >"$SHARE/pattern.bin"
    cp "$VM_DIR/scenarios/vhost-blk.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
DISK_BYTES=$((disk_mib << 20))
QUEUES=$queues
PAT_MIB=$pat_mib
OFF_MIB=$off_mib
TAIL_MIB=$tail_mib
TAIL_OFF_MIB=$tail_off_mib
EOF

    case "$backend" in
    qsd)
        vm_start_backend qsd "$sock" qemu-storage-daemon \
            --blockdev "driver=file,node-name=f0,filename=$img" \
            --export "type=vhost-user-blk,id=e0,node-name=f0,addr.type=unix,addr.path=$sock,writable=on,num-queues=$queues" ||
            { fail "backend qsd did not start"; return 1; }
        ;;
    vhost-mpath)
        bin=$(vm_daemon_bin) || return 1
        # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
        vm_start_backend vhost-mpath "$sock" "$bin" --socket-path "$sock" --num-queues "$queues" --queue-threads 1 \
            --path "$img,name=a" --path "$img,name=b" ${VHOST_MPATH_ARGS:-} ||
            { fail "backend vhost-mpath did not start"; return 1; }
        ;;
    *)
        fail "unknown VMTEST_BACKEND=$backend (vhost-mpath or qsd)"
        return 1
        ;;
    esac
    echo "TIME: prepare + backend up: $(elapsed "$t0") s"

    VM_MEMFD=1 VM_MEM=512M vm_boot \
        -chardev "socket,id=c0,path=$sock" \
        -device "vhost-user-blk-pci,chardev=c0,num-queues=$queues"
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    vm_guest_verdict

    vm_stop_backend "$backend"
    rc=$?
    if [ "$rc" = 0 ]; then
        pass "backend $backend exited 0 on SIGTERM"
    else
        fail "backend $backend exit status $rc after SIGTERM (124: did not exit in time)"
        tail -n 20 "$LOGDIR/$backend.log"
    fi

    # Host-side view of the backing image.
    local MiB=$((1 << 20))
    if [ "$(stat -c %s "$img")" = $((disk_mib * MiB)) ]; then
        pass "image size unchanged ($disk_mib MiB)"
    else
        fail "image size $(stat -c %s "$img") != $((disk_mib * MiB))"
    fi
    if cmp -n $((pat_mib * MiB)) -i "0:$((off_mib * MiB))" "$SHARE/pattern.bin" "$img"; then
        pass "image holds the $pat_mib MiB pattern at $off_mib MiB"
    else
        fail "image differs from the pattern at $off_mib MiB"
    fi
    if cmp -n $((tail_mib * MiB)) -i "0:$((tail_off_mib * MiB))" "$SHARE/pattern.bin" "$img"; then
        pass "image holds $tail_mib MiB of pattern at $tail_off_mib MiB (last MiB)"
    else
        fail "image differs from the pattern at $tail_off_mib MiB"
    fi
    if cmp -n $((off_mib * MiB)) "$img" /dev/zero &&
        cmp -n $(((tail_off_mib - off_mib - pat_mib) * MiB)) -i "$(((off_mib + pat_mib) * MiB)):0" "$img" /dev/zero; then
        pass "image is zero outside the written ranges"
    else
        fail "image has unexpected data outside the written ranges"
    fi
}
