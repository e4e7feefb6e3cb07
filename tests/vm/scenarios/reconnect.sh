# Scenario reconnect (sourced by tests/vm/run): QEMU's vhost-user-blk with
# `-chardev socket,...,reconnect=1` survives backend restarts while the guest runs.
#
# Backend (VMTEST_BACKEND), restarted once per round on the same socket:
#   vhost-mpath (default)  ${VHOST_MPATH_BIN:-target/release/vhost-mpath, else target/debug}
#                          --socket-path SOCK --num-queues 2 --path IMG,name=a --path IMG,name=b
#                          $VHOST_MPATH_ARGS (e.g. "--log-level debug");
#                          VMTEST_RECONNECT_PATH_OPTS is appended to both --path specs
#                          (e.g. "delay-us=50000" keeps requests in flight at SIGTERM, so
#                          the drain is exercised; a lab key: add --lab to
#                          VHOST_MPATH_ARGS; slow: raise VMTEST_TIMEOUT to 300)
#   qsd                    qemu-storage-daemon exporting IMG as vhost-user-blk (reference)
# Rounds (VMTEST_RECONNECT_MODES, default "idle busy"; see reconnect.guest.sh):
#   idle  the guest does no I/O while the backend is restarted, then reads the earlier
#         regions and writes + reads a new one;
#   busy  the guest keeps writing a new region and reading region 0 (O_DIRECT, 1 MiB
#         chunks) all through the restart: that I/O stalls while no backend is there
#         and must complete correctly after QEMU reconnects.
# Per round the host waits for the guest's request (restart-request.R on the share),
# sends SIGTERM to the running backend (it must drain and exit 0), waits
# VMTEST_RECONNECT_GAP s (default 2) with no backend at all, starts a new backend
# process on the same socket, waits for QEMU to connect to it (ss -x; reconnect=1 retries
# every second), and answers with restarted.R. Every wait is bounded. At the end the
# last backend must exit 0 on SIGTERM and the image must hold every region's pattern and
# zeros elsewhere.
# shellcheck shell=bash

# reconnect_start_backend N: backend process number N (log $LOGDIR/BACKEND.N.log).
reconnect_start_backend() {
    local n=$1 bin popts=${VMTEST_RECONNECT_PATH_OPTS:+,$VMTEST_RECONNECT_PATH_OPTS}
    case "$backend" in
    qsd)
        vm_start_backend "qsd.$n" "$sock" qemu-storage-daemon \
            --blockdev "driver=file,node-name=f0,filename=$img" \
            --export "type=vhost-user-blk,id=e0,node-name=f0,addr.type=unix,addr.path=$sock,writable=on,num-queues=$queues"
        ;;
    vhost-mpath)
        bin=$(vm_daemon_bin) || return 1
        # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
        vm_start_backend "vhost-mpath.$n" "$sock" "$bin" --socket-path "$sock" --num-queues "$queues" \
            --path "$img,name=a$popts" --path "$img,name=b$popts" ${VHOST_MPATH_ARGS:-}
        ;;
    *)
        log "unknown VMTEST_BACKEND=$backend (vhost-mpath or qsd)"
        return 1
        ;;
    esac
}

# Established unix connections on the socket path (the backend's side of QEMU's).
reconnect_connections() {
    ss -xHn state established 2>/dev/null | awk -v p="$sock" 'index($0, p) { n++ } END { print n + 0 }'
}

# reconnect_wait_for COND_CMD SECONDS: poll every 0.1 s while QEMU runs; 1 on timeout
# or when QEMU is gone.
reconnect_wait_for() {
    local t0
    t0=$(now)
    until eval "$1"; do
        kill -0 "$QEMU_PID" 2>/dev/null || return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$2" ] && return 1
        sleep 0.1
    done
}

scenario_main() {
    local disk_mib=64 region_mib=8 queues=2
    local img=$RUN/disk.img sock=$RUN/vhost.sock backend=${VMTEST_BACKEND:-vhost-mpath}
    local modes=${VMTEST_RECONNECT_MODES:-idle busy} gap=${VMTEST_RECONNECT_GAP:-2}
    local req_wait=${VMTEST_RECONNECT_REQ_WAIT:-90} conn_wait=${VMTEST_RECONNECT_CONN_WAIT:-30}
    local t0 rc r=0 mode nregions k off rounds_done=0 last_up=0
    # A hung guest is reported by its watchdog well before the default 150 s.
    local VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-120}
    local -a offs=()

    t0=$(now)
    nregions=$(($(wc -w <<<"$modes") + 1))
    # Region k at 4 + 16k MiB (8 MiB each, 8 MiB zero gaps between): at most 4 regions.
    if ((nregions > 4)); then
        fail "at most 3 rounds in VMTEST_RECONNECT_MODES ($modes)"
        return 1
    fi
    truncate -s "${disk_mib}M" "$img"
    python3 -c '
import random, sys
sys.stdout.buffer.write(random.Random(0x7265636f6e).randbytes(int(sys.argv[1]) << 20))
' $((nregions * region_mib)) >"$SHARE/pattern.bin"
    cp "$VM_DIR/scenarios/reconnect.guest.sh" "$SHARE/guest.sh"
    {
        echo "DISK_BYTES=$((disk_mib << 20))"
        echo "REGION_MIB=$region_mib"
        echo "MODES='$modes'"
        for ((k = 0; k < nregions; k++)); do
            offs+=($((4 + 16 * k)))
            echo "REGION_OFF_$k=${offs[k]}"
        done
        # Stop (10 s) + gap + new backend's socket (30 s) + QEMU's connection, with margin.
        echo "RESTART_WAIT_S=$((10 + gap + 30 + conn_wait + 10))"
        # Longest chunk expected in a busy round: at least the time without any backend.
        echo "STALL_MIN_S=$(python3 -c "print(max(0.5, $gap * 0.75))")"
        echo "BUSY_MAX_PASSES=200"
    } >"$SHARE/params"

    reconnect_start_backend 0 || { fail "backend $backend did not start"; return 1; }
    echo "TIME: prepare + backend up: $(elapsed "$t0") s"

    VM_MEMFD=1 VM_MEM=512M vm_boot_start \
        -chardev "socket,id=c0,path=$sock,reconnect=1" \
        -device "vhost-user-blk-pci,chardev=c0,num-queues=$queues"

    r=0
    for mode in $modes; do
        r=$((r + 1))
        local tr ts tx tu tc down
        if ! reconnect_wait_for "[ -e '$SHARE/restart-request.$r' ]" "$req_wait"; then
            fail "round $r ($mode): no restart request from the guest within $req_wait s (or QEMU ended)"
            echo "no restart request seen within $req_wait s" >"$SHARE/abort"
            break
        fi
        tr=$(now)
        log "round $r ($mode): guest asks for a backend restart"
        ts=$(now)
        vm_stop_backend "$backend.$((r - 1))"
        rc=$?
        tx=$(now)
        if [ "$rc" = 0 ]; then
            pass "round $r ($mode): backend $backend.$((r - 1)) exited 0 on SIGTERM ($(elapsed "$ts" "$tx") s)"
        else
            fail "round $r ($mode): backend $backend.$((r - 1)) exit status $rc after SIGTERM (124: did not exit in time)"
        fi
        sleep "$gap"
        # qemu-storage-daemon may leave its socket file behind: never mistake it for the new one.
        rm -f "$sock"
        if ! reconnect_start_backend "$r"; then
            fail "round $r ($mode): new backend $backend.$r did not start"
            echo "new backend $backend.$r did not start" >"$SHARE/abort"
            break
        fi
        last_up=$r
        tu=$(now)
        if reconnect_wait_for '[ "$(reconnect_connections)" -gt 0 ]' "$conn_wait"; then
            tc=$(now)
            down=$(elapsed "$tx" "$tc")
            pass "round $r ($mode): QEMU reconnected to $backend.$r $(elapsed "$tu" "$tc") s after it came up" \
                "(no backend for $(elapsed "$tx" "$tu") s; SIGTERM to reconnect $(elapsed "$ts" "$tc") s)"
        else
            fail "round $r ($mode): QEMU did not connect to $backend.$r within $conn_wait s"
            echo "QEMU did not connect to $backend.$r within $conn_wait s" >"$SHARE/abort"
            down=-1
        fi
        echo "TIME: round $r ($mode): request->SIGTERM $(elapsed "$tr" "$ts") s, old backend exit $(elapsed "$ts" "$tx") s," \
            "new backend up $(elapsed "$tx" "$tu") s after, connected after $([ "$down" = -1 ] && echo never || elapsed "$tu" "$tc") s"
        [ "$down" = -1 ] && break
        echo "backend=$backend.$r gap=${gap}s outage=${down}s" >"$SHARE/restarted.$r.tmp"
        mv "$SHARE/restarted.$r.tmp" "$SHARE/restarted.$r"
        rounds_done=$r
    done

    vm_boot_wait
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    # What QEMU itself said about the disconnects (its stderr shares console.log).
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^qemu-system' | sort | uniq -c | sed 's/^/qemu: /'
    echo "TIME: guest boot + test + poweroff: $GUEST_TIME s"
    if [ "$GUEST_RC" = 0 ]; then
        pass "guest checks (VMTEST-RC=$GUEST_RC)"
    else
        fail "guest checks (VMTEST-RC=$GUEST_RC, qemu rc $QEMU_RC)"
    fi
    if [ "$rounds_done" -lt "$(wc -w <<<"$modes")" ]; then
        fail "only $rounds_done of $(wc -w <<<"$modes") backend restarts done"
    fi

    if [ "$last_up" = "$r" ]; then
        vm_stop_backend "$backend.$r"
        rc=$?
        if [ "$rc" = 0 ]; then
            pass "last backend $backend.$r exited 0 on SIGTERM"
        else
            fail "last backend $backend.$r exit status $rc after SIGTERM (124: did not exit in time)"
        fi
    fi

    # Host-side view of the backing image: every region's slice, zeros elsewhere.
    local MiB=$((1 << 20)) end=0
    if [ "$(stat -c %s "$img")" = $((disk_mib * MiB)) ]; then
        pass "image size unchanged ($disk_mib MiB)"
    else
        fail "image size $(stat -c %s "$img") != $((disk_mib * MiB))"
    fi
    for ((k = 0; k < nregions; k++)); do
        off=${offs[k]}
        if cmp -n $((region_mib * MiB)) -i "$((k * region_mib * MiB)):$((off * MiB))" "$SHARE/pattern.bin" "$img"; then
            pass "image holds region $k ($region_mib MiB pattern slice $k at $off MiB)"
        else
            fail "image region $k at $off MiB differs from pattern slice $k"
        fi
    done
    local zero_ok=1
    for ((k = 0; k <= nregions; k++)); do
        off=$((k < nregions ? offs[k] : disk_mib))
        if ((off > end)) && ! cmp -s -n $(((off - end) * MiB)) -i "$((end * MiB)):0" "$img" /dev/zero; then
            zero_ok=0
            fail "image not zero in [$end, $off) MiB"
        fi
        end=$((off + region_mib))
    done
    [ "$zero_ok" = 1 ] && pass "image is zero outside the regions"
}
