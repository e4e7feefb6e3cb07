# Shared helpers for tests/vm/run and the scenarios (sourced, not executed).
# shellcheck shell=bash

VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
REPO=$(cd "$VM_DIR/../.." && pwd)
WORK=${VMTEST_WORK:-$VM_DIR/work}

now() { date +%s.%N; }
elapsed() { python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$1" "${2:-$(now)}"; }
log() { echo "[vmtest $(date +%T)] $*" >&2; }
pass() { echo "PASS: $*"; }
fail() {
    echo "FAIL: $*"
    FAILED=1
}

# vm_guest_verdict: after vm_boot, the guest's time and its overall result
# (GUEST_RC, GUEST_TIME, QEMU_RC) as a TIME line and a PASS/FAIL line.
vm_guest_verdict() {
    echo "TIME: guest boot + test + poweroff: $GUEST_TIME s"
    if [ "$GUEST_RC" = 0 ]; then
        pass "guest checks (VMTEST-RC=0)"
    else
        fail "guest checks (VMTEST-RC=$GUEST_RC, qemu rc $QEMU_RC)"
    fi
}

# ---------------------------------------------------------------- run folder + cleanup
# RUN: private temporary folder (sockets, images); SHARE: its 9p share (/hostwork in the
# guest); LOGDIR: kept under tests/vm/work/logs for after the run.
vm_init_run() {
    local name=$1
    [ -s "$WORK/env" ] || { log "no $WORK/env: run tests/vm/setup first"; exit 2; }
    # shellcheck disable=SC1091
    . "$WORK/env"
    [ -s "$VMLINUX" ] && [ -s "$INITRD" ] || { log "kernel/initramfs missing: run tests/vm/setup"; exit 2; }
    RUN=$(mktemp -d "${TMPDIR:-/tmp}/vmtest-$name.XXXXXX")
    SHARE=$RUN/share
    mkdir -p "$SHARE"
    cp "$VM_DIR/guest-lib.sh" "$SHARE/guest-lib.sh"
    LOGDIR=$WORK/logs/$name-$(date +%Y%m%d-%H%M%S)-$$
    mkdir -p "$LOGDIR"
    ln -sfn "$(basename "$LOGDIR")" "$WORK/logs/$name-latest"
    # Keep the newest ${VMTEST_KEEP_LOGS:-20} log folders per scenario.
    ls -1d "$WORK/logs/$name"-[0-9]* 2>/dev/null | sort | head -n "-${VMTEST_KEEP_LOGS:-20}" |
        while read -r d; do rm -rf "$d"; done
    BG_PIDS=()
    BG_PGIDS=()
    PGIDS_LIVE=()
    FAILED=0
    trap vm_cleanup EXIT
    trap 'log "interrupted"; exit 130' INT TERM HUP
}

# vm_ours PID: PID is still a child of this shell. A pid this run waited for may belong
# to anyone by now (pid_max is 32768 here, and a long scenario forks thousands of
# processes): a cleanup that only asked `kill -0` once sent SIGTERM to a stranger.
vm_ours() {
    [ "$(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ')" = "$$" ]
}

vm_cleanup() {
    local rc=$? pid
    # Backends run in their own process group (setsid): take down what they started too,
    # while the group's leader is still ours (a reaped leader's group id can be reused).
    for pid in "${BG_PGIDS[@]}"; do
        vm_ours "$pid" && PGIDS_LIVE+=("$pid")
    done
    for pid in "${BG_PIDS[@]}"; do
        if vm_ours "$pid"; then
            kill -TERM "$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    for pid in "${PGIDS_LIVE[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null
    done
    if [ -n "${RUN:-}" ] && [ -d "$RUN" ]; then
        if [ "${VMTEST_KEEP:-0}" = 1 ]; then
            log "kept $RUN"
        else
            rm -rf "$RUN"
        fi
    fi
    exit "$rc"
}

# ---------------------------------------------------------------- backends
# vm_start_backend NAME SOCK CMD...: start CMD in the background, log to
# $LOGDIR/NAME.log, wait for the unix socket SOCK. Sets BACKEND_PID.
vm_start_backend() {
    local name=$1 sock=$2 t0
    shift 2
    log "backend $name: $*"
    # setsid: own process group (a background child of a non-interactive shell is no
    # group leader, so setsid execs in place and $! is the backend itself).
    setsid "$@" >"$LOGDIR/$name.log" 2>&1 </dev/null &
    BACKEND_PID=$!
    BG_PIDS+=("$BACKEND_PID")
    BG_PGIDS+=("$BACKEND_PID")
    t0=$(now)
    while [ ! -S "$sock" ]; do
        if ! kill -0 "$BACKEND_PID" 2>/dev/null; then
            wait "$BACKEND_PID"
            log "backend $name exited with $? before creating $sock; its log:"
            tail -n 30 "$LOGDIR/$name.log" >&2
            return 1
        fi
        if [ "$(elapsed "$t0" | cut -d. -f1)" -ge "${VMTEST_SOCKET_WAIT:-30}" ]; then
            log "backend $name: no socket $sock after ${VMTEST_SOCKET_WAIT:-30} s; its log:"
            tail -n 30 "$LOGDIR/$name.log" >&2
            return 1
        fi
        sleep 0.1
    done
    log "backend $name up (pid $BACKEND_PID) after $(elapsed "$t0") s"
}

# vm_daemon_bin: the daemon binary to test (VHOST_MPATH_BIN, else target/release, else
# target/debug); prints it, or fails with a FAIL line when there is none.
vm_daemon_bin() {
    local bin=${VHOST_MPATH_BIN:-}
    if [ -z "$bin" ]; then
        for bin in "$REPO/target/release/vhost-mpath" "$REPO/target/debug/vhost-mpath"; do
            [ -x "$bin" ] && break
        done
    fi
    [ -x "$bin" ] || { fail "no vhost-mpath binary ($bin)" >&2; return 1; }
    echo "$bin"
}

# vm_stop_backend NAME: SIGTERM, wait (bounded), return its exit status (124: had to kill).
vm_stop_backend() {
    local name=$1 pid=$BACKEND_PID rc i
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        rc=$?
        log "backend $name had already exited with $rc"
        return "$rc"
    fi
    kill -TERM "$pid"
    for ((i = 0; i < ${VMTEST_STOP_WAIT:-10} * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "backend $name still running ${VMTEST_STOP_WAIT:-10} s after SIGTERM: SIGKILL"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
        wait "$pid" 2>/dev/null
        return 124
    fi
    wait "$pid"
    rc=$?
    log "backend $name exited with $rc after SIGTERM"
    return "$rc"
}

# ---------------------------------------------------------------- the guest
# vm_boot [QEMU ARGS...]: boot the test kernel + initramfs under TCG with the /usr and
# $SHARE 9p shares; the guest runs $SHARE/guest.sh. Console to $LOGDIR/console.log.
# VM_MEM (default 512M); VM_MEMFD=1 backs guest RAM with a shared memfd (vhost-user).
# Sets GUEST_RC (VMTEST-RC from the console, or 255 with no marker) and QEMU_RC.
# = vm_boot_start + vm_boot_wait; a scenario that acts on the host while the guest runs
# (restarting a backend, say) calls the two itself and works in between (QEMU_PID).
vm_boot() {
    vm_boot_start "$@"
    vm_boot_wait
}

# vm_boot_start [QEMU ARGS...]: start QEMU in the background (as vm_boot), set QEMU_PID
# and QEMU_T0; QEMU is killed at VMTEST_TIMEOUT and by the run's cleanup.
vm_boot_start() {
    local mem=${VM_MEM:-512M} memargs
    local qtimeout=${VMTEST_TIMEOUT:-150}
    # The guest's own watchdog fires first so that its diagnostics reach the console.
    local gtimeout=${VMTEST_GUEST_TIMEOUT:-$((qtimeout > 60 ? qtimeout - 30 : qtimeout * 2 / 3))}
    if [ "${VM_MEMFD:-0}" = 1 ]; then
        memargs=(-object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem -m "$mem")
    else
        memargs=(-m "$mem")
    fi
    local cmd=(
        qemu-system-x86_64 -M q35 -accel tcg,thread=multi -cpu max -smp "${VM_SMP:-2}"
        "${memargs[@]}"
        -nodefaults -no-user-config -display none -no-reboot -serial stdio
        -kernel "$VMLINUX" -initrd "$INITRD"
        -append "console=ttyS0 quiet panic=-1 vmtest.script=/hostwork/guest.sh vmtest.timeout=$gtimeout ${VM_APPEND:-}"
        -virtfs local,path=/usr,mount_tag=hostusr,security_model=none,readonly=on
        -virtfs "local,path=$SHARE,mount_tag=hostwork,security_model=none"
        "$@"
    )
    echo "${cmd[*]}" >"$LOGDIR/qemu.cmd"
    log "booting guest (timeout $qtimeout s), console: $LOGDIR/console.log"
    QEMU_T0=$(now)
    QEMU_TIMEOUT=$qtimeout
    timeout -k 5 "$qtimeout" "${cmd[@]}" </dev/null >"$LOGDIR/console.log" 2>&1 &
    QEMU_PID=$!
    BG_PIDS+=("$QEMU_PID")
    # Its stdio away from ours: a pipe held open by the orphaned sleep would hold the run.
    vm_qemu_threads_at "$((qtimeout > 2 ? qtimeout - 2 : 0))" </dev/null >/dev/null 2>&1 &
    BG_PIDS+=("$!")
    if [ "${VMTEST_VERBOSE:-0}" = 1 ]; then
        tail -n +1 -f --pid="$QEMU_PID" "$LOGDIR/console.log" >&2 &
    fi
}

# vm_qemu_threads_at S: after S seconds, if the QEMU of vm_boot_start still runs, write
# each of its threads' id, name and wait channel to $LOGDIR/qemu-threads.txt. A guest
# that never reached its init (seen once in CI: reconnect, no console output in 120 s)
# shows there whether a vCPU or the main loop was blocked reading the backend's socket.
vm_qemu_threads_at() {
    sleep "$1"
    local q t
    q=$(pgrep -P "$QEMU_PID" | head -n1)
    [ -n "$q" ] || return 0
    for t in /proc/"$q"/task/*; do
        printf '%s %s %s\n' "${t##*/}" "$(cat "$t/comm")" "$(cat "$t/wchan")"
    done >"$LOGDIR/qemu-threads.txt"
}

# vm_boot_wait: wait for the QEMU of vm_boot_start; sets QEMU_RC, GUEST_RC, GUEST_TIME.
vm_boot_wait() {
    local qtimeout=$QEMU_TIMEOUT
    wait "$QEMU_PID"
    QEMU_RC=$?
    GUEST_TIME=$(elapsed "$QEMU_T0")
    GUEST_RC=$(tr -d '\r' <"$LOGDIR/console.log" | sed -n 's/^VMTEST-RC=\([0-9]*\)$/\1/p' | tail -n1)
    if [ "$QEMU_RC" = 124 ] || [ "$QEMU_RC" = 137 ]; then
        log "QEMU timed out after $qtimeout s"
        if [ -s "$LOGDIR/qemu-threads.txt" ]; then
            log "QEMU's threads (id, name, wait channel) 2 s before: $(tr '\n' ';' <"$LOGDIR/qemu-threads.txt")"
        fi
    elif [ "$QEMU_RC" != 0 ]; then
        log "QEMU exited with $QEMU_RC"
    fi
    [ -n "$GUEST_RC" ] || GUEST_RC=255
    log "guest done in $GUEST_TIME s: VMTEST-RC=$GUEST_RC (qemu rc $QEMU_RC)"
}

vm_console_tail() {
    echo "----- last ${1:-60} console lines ($LOGDIR/console.log) -----"
    tr -d '\r' <"$LOGDIR/console.log" | tail -n "${1:-60}"
    echo "-----"
}

# Tail of every backend log of this run (printed on failure).
vm_backend_logs_tail() {
    local f
    for f in "$LOGDIR"/*.log; do
        [ "$(basename "$f")" = console.log ] && continue
        [ -s "$f" ] || { echo "----- $f: empty"; continue; }
        echo "----- last ${1:-30} lines of $f -----"
        tail -n "${1:-30}" "$f"
    done
}
