# run-timeout: 1200
# Scenario migrate (sourced by tests/vm/run): live migration of a guest whose disk is a
# vhost-user-blk device, under a load that writes and reads and verifies everything.
#
# The run-timeout line above: six migrations under TCG take 3-7 minutes on a loaded host.
#
# Two backends on the same image (file paths on one image, as two hosts would share a
# disk): A on a.sock and B on b.sock, each `vhost-mpath --num-queues 2 --path IMG,name=a
# --path IMG,name=b $VHOST_MPATH_ARGS` (VMTEST_BACKEND=qsd: qemu-storage-daemon, the
# reference; VMTEST_BACKEND=virtio: QEMU's own virtio-blk on the image, no vhost-user at
# all, the control that showed the crashes were QEMU's). QEMU 0 boots on A; QEMU 1 is
# started on B with `-incoming unix:...`, QEMU 0 migrates to it over QMP and quits;
# QEMU 2 on A takes the guest back, and so on: VMTEST_MIGRATIONS (default 6: there and
# back three times), each under load.
# Asserted per migration: QMP `migrate` is accepted and query-migrate reaches
# "completed" (VMTEST_MIGRATE_WAIT s, default 120) and the destination runs; at the end
# the guest's checks (0 I/O errors, 0 verify mismatches, clean kernel log) pass.
#
# 9p blocks migration while it is mounted ("Migration is disabled when VirtFS export
# path ... is mounted"), and tests/vm/init keeps /hostwork busy: this scenario boots its
# own init (rdinit=/mig/init) from an extra initramfs appended to the test one, holding
# fio with its libraries, GNU dd, the guest script and its parameters. No share at all;
# results come back on the console (one log per QEMU: console.N.log).
#
# The guest load (migrate.guest.sh) runs fio passes until the host writes MIGRATE-STOP
# into the disk's last 4 KiB (the mailbox) after its last migration. Beside fio,
# held-reads (tests/src/bin/held-reads.rs) reads a region into buffers it keeps for
# several rounds and verifies them again: a page the device wrote after the migration
# last sent it, with no dirty mark, is seen on the destination (HELD-STALE), which
# fio's verification right after each read sees only by chance.
#
# Negative control: VMTEST_MIGRATE_NO_READ_LOG=1 starts the daemons with
# VHOST_MPATH_DIAG_NO_DIRTY_LOG_READS=1 (diagnostic: the pages reads DMA into guest
# memory are not marked in the dirty log): the guest must then see stale read data on
# the destination (held-reads' HELD-STALE, fio verify mismatches), so the scenario
# must FAIL.
# shellcheck shell=bash

mig_daemon() { # NAME SOCK
    local name=$1 sock=$2 bin
    case "$backend" in
    virtio) ;; # QEMU's own virtio-blk on the image: no backend process
    qsd)
        vm_start_backend "qsd.$name" "$sock" qemu-storage-daemon \
            --blockdev "driver=file,node-name=f0,filename=$img,cache.direct=on" \
            --export "type=vhost-user-blk,id=e0,node-name=f0,addr.type=unix,addr.path=$sock,writable=on,num-queues=$queues"
        ;;
    vhost-mpath)
        bin=$(vm_daemon_bin) || return 1
        # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
        vm_start_backend "vhost-mpath.$name" "$sock" env ${diag_env} "$bin" --socket-path "$sock" \
            --rpc-socket "$RUN/$name.rpc" \
            --num-queues "$queues" --path "$img,name=a" --path "$img,name=b" ${VHOST_MPATH_ARGS:-}
        ;;
    *)
        log "unknown VMTEST_BACKEND=$backend (vhost-mpath or qsd)"
        return 1
        ;;
    esac
}

# mig_dump_queues WHY: each daemon's virtqueues (get_queues: ring indexes, requests
# in flight, kicks and calls) into the log, for a guest that stopped making progress:
# taken before QEMU is stopped, they tell a lost kick from a lost call or a request held.
mig_dump_queues() {
    [ "$backend" = vhost-mpath ] || return 0
    local name
    for name in A B; do
        log "$1: backend $name get_queues: $(python3 "$VM_DIR/rpc.py" "$RUN/$name.rpc" call get_queues 2>&1 | tr -d '\n ')"
    done
}

# The extra initramfs: /mig/init, the guest script, params, guest-lib.sh, fio, GNU dd,
# cmp and held-reads (HELD_BIN) with every library they load (at the paths the test initramfs's /lib and
# /lib64 symlinks lead to, under /usr).
mig_initramfs() {
    local out=$1
    python3 - "$out" "$VM_DIR" "$RUN/mig" "$held_bin" <<'PY'
import gzip, os, subprocess, sys
out, vm_dir, extra, held_bin = sys.argv[1:5]
files = {}  # guest path -> (mode, bytes)
def add(gpath, data, mode=0o100755):
    files[gpath.lstrip("/")] = (mode, data)
def guest_lib_path(p):
    # The name the loader looks for (a soname, often a symlink on the host), under
    # /usr: the test initramfs's /lib/x86_64-linux-gnu leads there.
    return p if p.startswith("/usr/") else "/usr" + p
# held-reads (ours, tests/src/bin/held-reads.rs) goes to /usr/bin/held-reads.
for binary, gpath in (("/usr/bin/fio",) * 2, ("/usr/bin/dd",) * 2, ("/usr/bin/cmp",) * 2,
                      (held_bin, "/usr/bin/held-reads")):
    add(gpath, open(binary, "rb").read())
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 and parts[2].startswith("/") else (
            parts[0] if parts and parts[0].startswith("/") else None)
        if path:
            add(guest_lib_path(path), open(os.path.realpath(path), "rb").read())
# The program interpreter: /lib64 is a symlink to usr/lib64 in the test initramfs.
add("/usr/lib64/ld-linux-x86-64.so.2", open(os.path.realpath("/lib64/ld-linux-x86-64.so.2"), "rb").read())
for name in os.listdir(extra):
    add("/mig/" + name, open(os.path.join(extra, name), "rb").read())
dirs = set()
for p in files:
    d = os.path.dirname(p)
    while d:
        dirs.add(d)
        d = os.path.dirname(d)
buf = bytearray()
ino = 100000
def entry(name, mode, data):
    global ino
    ino += 1
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
    h = b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
    buf.extend(h + b"\0" * (-len(h) % 4))
    buf.extend(data + b"\0" * (-len(data) % 4))
for d in sorted(dirs, key=lambda d: (d.count("/"), d)):
    entry(d, 0o040755, b"")
for p in sorted(files):
    mode, data = files[p]
    entry(p, mode, data)
entry("TRAILER!!!", 0, b"")
with open(out, "wb") as fh:
    fh.write(gzip.compress(bytes(buf), 1))
PY
}

# mig_qemu N SOCK [INCOMING_URI [paused]]: QEMU number N on backend socket SOCK
# (console.N.log, QMP at $RUN/qmp.N), optionally waiting for an incoming migration,
# and then (paused) not running until QMP `cont` (-S). Sets QPID[N].
mig_qemu() {
    local n=$1 sock=$2 incoming=${3:-} paused=${4:-} disk dev_opts=num-queues=$queues
    [ -n "$event_idx" ] && dev_opts+=",event_idx=$event_idx"
    if [ "$backend" = virtio ]; then
        disk=(-drive "file=$img,if=none,id=d0,format=raw,cache=none,aio=threads"
            -device "virtio-blk-pci,drive=d0,$dev_opts")
    else
        disk=(-chardev "socket,id=c0,path=$sock" -device "vhost-user-blk-pci,chardev=c0,$dev_opts")
    fi
    # -cpu qemu64 and single-threaded TCG were chosen while the guest crashed after
    # some migrations (with -cpu max and thread=multi sooner); the cause was QEMU's
    # TCG dirty tracking (see "Guest RAM" in scenario_main), they stay as measured.
    local cmd=(
        "${qemu_bin[@]}" -M q35 -accel "${VMTEST_MIGRATE_ACCEL:-tcg,thread=single}" -cpu "${VMTEST_MIGRATE_CPU:-qemu64}" -smp "${VM_SMP:-2}"
        -object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem -m "$mem"
        -nodefaults -no-user-config -display none -no-reboot -serial stdio
        -kernel "$VMLINUX" -initrd "$RUN/initrd"
        -append "console=ttyS0 quiet panic=-1 rdinit=/mig/init vmtest.timeout=$gtimeout"
        "${disk[@]}"
        -qmp "unix:$RUN/qmp.$n,server=on,wait=off"
    )
    [ -n "$incoming" ] && cmd+=(-incoming "$incoming")
    [ "$paused" = paused ] && cmd+=(-S)
    echo "${cmd[*]}" >"$LOGDIR/qemu.$n.cmd"
    timeout -k 5 "$qtimeout" "${cmd[@]}" </dev/null >"$LOGDIR/console.$n.log" 2>&1 &
    QPID[n]=$!
    BG_PIDS+=("${QPID[n]}")
}

# mig_qmp N CMD_JSON...: run QMP commands on QEMU N, print each reply (one JSON a line).
mig_qmp() {
    local n=$1
    shift
    python3 - "$RUN/qmp.$n" "$@" <<'PY'
import json, socket, sys, time
path = sys.argv[1]
for _ in range(200):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit(f"no QMP socket {path}")
s.settimeout(60)
f = s.makefile("rw")
def reply():
    while True:
        m = json.loads(f.readline())
        if "event" not in m:
            return m
json.loads(f.readline())  # greeting
f.write(json.dumps({"execute": "qmp_capabilities"}) + "\n"); f.flush(); reply()
for c in sys.argv[2:]:
    f.write(c + "\n"); f.flush()
    print(json.dumps(reply()), flush=True)
PY
}

# mig_wait_console N PATTERN SECONDS: wait for PATTERN in QEMU N's console.
mig_wait_console() {
    local n=$1 pat=$2 limit=$3 t0
    t0=$(now)
    until tr -d "\r" 2>/dev/null <"$LOGDIR/console.$n.log" | grep -qE "$pat"; do
        kill -0 "${QPID[n]}" 2>/dev/null || return 1
        tr -d "\r" 2>/dev/null <"$LOGDIR/console.$n.log" | grep -qE 'Kernel panic|BUG: |Oops: ' && return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$limit" ] && return 1
        sleep 0.2
    done
}

# mig_migrate FROM TO: migrate QEMU FROM to QEMU TO (already waiting); 0 if completed.
mig_migrate() {
    local from=$1 to=$2 t0 st reply
    t0=$(now)
    reply=$(mig_qmp "$from" '{"execute":"migrate","arguments":{"uri":"unix:'"$RUN/mig.$to"'"}}')
    if ! grep -q '"return"' <<<"$reply"; then
        MIG_WHY="migrate refused: $reply"
        return 1
    fi
    while :; do
        reply=$(mig_qmp "$from" '{"execute":"query-migrate"}')
        st=$(python3 -c 'import json,sys; r=json.loads(sys.stdin.read())["return"]; ram=r.get("ram",{}); print(r.get("status","?"), ram.get("dirty-sync-count","-"), r.get("downtime","-"), "MiB sent:", ram.get("transferred",0)>>20, "pages normal/zero:", ram.get("normal","-"), ram.get("duplicate","-"), r.get("error-desc",""))' <<<"$reply" 2>/dev/null)
        case "$st" in
        completed*)
            MIG_WHY="completed in $(elapsed "$t0") s (status, dirty syncs, downtime ms, ...: $st)"
            return 0
            ;;
        failed* | cancelled*)
            MIG_WHY="$st"
            return 1
            ;;
        esac
        if [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$mig_wait" ]; then
            MIG_WHY="not completed after $mig_wait s (last: $st)"
            mig_qmp "$from" '{"execute":"migrate_cancel"}' >/dev/null
            return 1
        fi
        sleep 0.5
    done
}

# mig_pid N: the pid of QEMU N itself (QPID[N] is the timeout(1) around it).
mig_pid() {
    pgrep -P "${QPID[$1]}" | head -n1
}

# mig_compare_ram FROM TO: the exact oracle (ramcmp.py): source (stopped) and paused
# destination RAM byte for byte. Sets RAM_WHY and RAM_DIFF (differing pages).
mig_compare_ram() {
    local out lowmem=$((1 << 62))
    # q35 maps RAM past 2 GiB at 4 GiB once it holds 2.75 GiB or more.
    (($(mem_bytes "$mem") >= 0xb0000000)) && lowmem=$((1 << 31))
    out=$(python3 "$VM_DIR/ramcmp.py" "$(mig_pid "$1")" "$(mig_pid "$2")" "$lowmem" 2>&1)
    local rc=$?
    RAM_WHY=$out
    RAM_DIFF=$(sed -n 's/.*differ=\([0-9]*\).*/\1/p' <<<"$out")
    [ "$rc" = 0 ]
}

# mem_bytes SIZE: QEMU's -m size (K, M, G suffixes) in bytes.
mem_bytes() {
    local n=${1%[KMGkmg]}
    case "$1" in
    *[Kk]) echo $((n << 10)) ;;
    *[Mm]) echo $((n << 20)) ;;
    *[Gg]) echo $((n << 30)) ;;
    *) echo $((n << 20)) ;;
    esac
}

# mig_passes N: how many load passes QEMU N's console shows.
mig_passes() {
    tr -d '\r' <"$LOGDIR/console.$1.log" 2>/dev/null | grep -c '^MIGRATE-PASS [0-9]'
}

# mig_sync_pass N WHERE: wait for QEMU N's next pass to start (start), or for 70 % of
# a pass after that, measured on the pass before (late); any: no wait.
mig_sync_pass() {
    local n=$1 where=$2 c t0 t1 w=0
    [ "$where" = any ] && return 0
    c=$(mig_passes "$n")
    until (($(mig_passes "$n") > c)) || ((w > 3000)); do sleep 0.1; w=$((w + 1)); done
    [ "$where" = start ] && return 0
    t0=$(now)
    c=$(mig_passes "$n")
    w=0
    until (($(mig_passes "$n") > c)) || ((w > 3000)); do sleep 0.1; w=$((w + 1)); done
    t1=$(elapsed "$t0")
    sleep "$(awk -v d="$t1" 'BEGIN { printf "%.1f", d * 0.7 }')"
}

scenario_main() {
    # Guest RAM: 1 GiB less 8 KiB, on purpose not a multiple of 256 KiB. QEMU up to 8.2
    # (Debian 12 has 7.2) loses TCG guest writes during migration when a RAM block's size
    # is a multiple of 64 pages: cpu_physical_memory_sync_dirty_bitmap()'s 64-pages-at-a-
    # time path clears the dirty bits without resetting the vCPUs' TLB write entries to
    # "not dirty", so later stores by the guest's CPU to those pages are never marked and
    # the destination gets stale memory (page tables, slab lists: the guest crashes).
    # Fixed upstream in QEMU 9.0 (03bfc2188f "physmem: Fix migration dirty bitmap
    # coherency with TCG memory access"). Any other size takes the page-by-page path,
    # which resets the TLB. VMTEST_MIGRATE_MEM=1G shows the bug (tests/vm/README.md).
    local disk_mib=64 queues=${VMTEST_MIGRATE_QUEUES:-2} mem=${VMTEST_MIGRATE_MEM:-1048568K}
    local img=$RUN/disk.img backend=${VMTEST_BACKEND:-vhost-mpath}
    # What the migration matrix (tests/vm/migrate-matrix) varies; see tests/vm/README.md.
    local load=${VMTEST_MIGRATE_LOAD:-verify} image=${VMTEST_MIGRATE_IMAGE:-sparse}
    local at=${VMTEST_MIGRATE_AT:-any} event_idx=${VMTEST_MIGRATE_EVENT_IDX:-}
    local -a modes qemu_bin=(qemu-system-x86_64)
    IFS=, read -r -a modes <<<"${VMTEST_MIGRATE_MODES:-paused,once}"
    if [ -n "${VMTEST_MIGRATE_QEMU:-}" ]; then
        # A QEMU built from source has no firmware of its own: Debian's.
        qemu_bin=("$VMTEST_MIGRATE_QEMU" -L /usr/share/qemu -L /usr/share/seabios -L /usr/lib/ipxe/qemu)
    fi
    [ "$load" = wide ] && disk_mib=256
    local ram_compared=0 ram_differ=0 at_once=0 RAM_WHY RAM_DIFF mode
    local migrations=${VMTEST_MIGRATIONS:-6} mig_wait=${VMTEST_MIGRATE_WAIT:-120}
    local qtimeout=${VMTEST_TIMEOUT:-900} gtimeout diag_env="" k from to sock done_n=0
    local -a QPID=()
    gtimeout=$((qtimeout - 30))
    # The run's own limit must cover the migrations under TCG.
    if [ "${VMTEST_MIGRATE_NO_READ_LOG:-0}" = 1 ]; then
        diag_env="VHOST_MPATH_DIAG_NO_DIRTY_LOG_READS=1"
        log "negative control: read buffers are not marked in the dirty log"
    fi

    if [ "$image" = written ]; then
        # Every block written before the guest starts (no holes for the paths to read).
        head -c "$((disk_mib << 20))" /dev/urandom >"$img"
    else
        truncate -s "${disk_mib}M" "$img"
    fi
    mkdir -p "$RUN/mig"
    cp "$VM_DIR/guest-lib.sh" "$RUN/mig/guest-lib.sh"
    cp "$VM_DIR/scenarios/migrate.guest.sh" "$RUN/mig/guest.sh"
    cat >"$RUN/mig/params" <<EOF
DISK_BYTES=$((disk_mib << 20))
W_OFF=$((1 << 20))
W_SLICE=$((4 << 20))
W_SLICES=8
R_OFF=$((40 << 20))
R_SIZE=$((16 << 20))
H_OFF=$((56 << 20))
H_SIZE=$((4 << 20))
H_BUFFERS=${VMTEST_MIGRATE_HELD_BUFFERS:-8}
MAILBOX_OFF=$(((disk_mib << 20) - 4096))
LOAD_MAX_S=$((qtimeout - 120))
CACHE_VERIFIES=${VMTEST_MIGRATE_CACHE_VERIFIES:-3}
LOAD=$load
CPU_LOAD=${VMTEST_MIGRATE_CPU_LOAD:-0}
X_OFF=$((64 << 20))
X_JOB=$((64 << 20))
EOF
    cat >"$RUN/mig/init" <<'EOF'
#!/bin/sh
# /mig/init for scenario migrate: the test initramfs's mounts and modules, no 9p.
export PATH=/bin:/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
for m in virtio_pci virtio_blk; do modprobe $m; done
wd=0
for arg in $(cat /proc/cmdline); do case "$arg" in vmtest.timeout=*) wd=${arg#vmtest.timeout=} ;; esac; done
echo "VMTEST-BEGIN uptime=$(cut -d' ' -f1 /proc/uptime)"
cd /mig
sh /mig/guest.sh &
spid=$!
( sleep "$wd"; echo "VMTEST-WATCHDOG: guest script still running after $wd s";
  for d in /sys/block/vd*; do echo "VMTEST-DIAG ${d##*/}: inflight(r w)=$(cat $d/inflight)"; done
  echo "VMTEST-RC=98"; poweroff -f ) &
wpid=$!
wait $spid
rc=$?
kill $wpid 2>/dev/null
echo "VMTEST-RC=$rc"
echo "VMTEST-END"
poweroff -f
EOF
    # held-reads: the guest's check that read data held across a switch-over is right.
    local held_bin=${HELD_READS_BIN:-}
    if [ -z "$held_bin" ]; then
        for held_bin in "$REPO/target/release/held-reads" "$REPO/target/debug/held-reads"; do
            [ -x "$held_bin" ] && break
        done
    fi
    [ -x "$held_bin" ] || { fail "no held-reads binary ($held_bin): cargo build -p vhost-mpath-tests --bins"; return 1; }
    mig_initramfs "$RUN/mig.cpio.gz" || { fail "could not build the extra initramfs"; return 1; }
    cat "$INITRD" "$RUN/mig.cpio.gz" >"$RUN/initrd"
    log "initrd: $(du -h "$RUN/initrd" | cut -f1) (test initramfs + fio, dd, cmp, libraries, guest script)"

    local pid_a="" pid_b=""
    if [ "$backend" != virtio ]; then
        mig_daemon A "$RUN/a.sock" || { fail "backend A did not start"; return 1; }
        pid_a=$BACKEND_PID
        mig_daemon B "$RUN/b.sock" || { fail "backend B did not start"; return 1; }
        pid_b=$BACKEND_PID
    fi

    mig_qemu 0 "$RUN/a.sock"
    if mig_wait_console 0 'MIGRATE-PASS 1' 600; then
        pass "guest booted on QEMU 0 (backend A) and completed a load pass"
    else
        fail "guest on QEMU 0 did not start its load (see console.0.log)"
        tr -d '\r' <"$LOGDIR/console.0.log" | tail -n 30
        return 1
    fi

    for ((k = 1; k <= migrations; k++)); do
        from=$((k - 1))
        to=$k
        if ((k % 2)); then sock=$RUN/b.sock; else sock=$RUN/a.sock; fi
        mode=${modes[(k - 1) % ${#modes[@]}]}
        mig_qemu "$to" "$sock" "unix:$RUN/mig.$to" "$mode"
        # The destination must be listening before `migrate`.
        local w=0
        until [ -S "$RUN/mig.$to" ] || ((w > 300)); do
            sleep 0.1
            w=$((w + 1))
        done
        mig_sync_pass "$from" "$at"
        if mig_migrate "$from" "$to"; then
            pass "migration $k ($mode, QEMU $from -> QEMU $to on backend $(basename "$sock" .sock | tr a-b A-B)): $MIG_WHY"
            done_n=$k
            if [ "$mode" = paused ]; then
                ram_compared=$((ram_compared + 1))
                if mig_compare_ram "$from" "$to"; then
                    pass "migration $k: destination RAM equals the source's ($RAM_WHY)"
                else
                    fail "migration $k: destination RAM differs from the source's ($RAM_WHY)"
                    ram_differ=$((ram_differ + ${RAM_DIFF:-0}))
                fi
                mig_qmp "$to" '{"execute":"cont"}' >/dev/null
            else
                at_once=$((at_once + 1))
            fi
        else
            fail "migration $k (QEMU $from -> QEMU $to): $MIG_WHY"
            kill "${QPID[to]}" 2>/dev/null
            to=$from
            break
        fi
        mig_qmp "$from" '{"execute":"quit"}' >/dev/null 2>&1
        wait "${QPID[from]}" 2>/dev/null
        # Under load on the destination for a while before the next one.
        if ! mig_wait_console "$to" 'MIGRATE-PASS' "${VMTEST_MIGRATE_GAP_WAIT:-300}"; then
            mig_dump_queues "no load pass after migration $k"
            fail "guest on QEMU $to completed no load pass after migration $k"
            break
        fi
    done

    # Stop the load: the mailbox in the disk's last 4 KiB.
    printf 'MIGRATE-STOP' | dd of="$img" bs=4096 seek=$(((disk_mib << 20) / 4096 - 1)) conv=notrunc,sync,fsync status=none
    # The guest verifies everything and powers off; a crashed one never does.
    if ! mig_wait_console "$to" '^VMTEST-END' "${VMTEST_MIGRATE_END_WAIT:-300}"; then
        mig_dump_queues "the guest did not finish"
        log "the guest on QEMU $to did not finish: stopping it"
        kill "${QPID[to]}" 2>/dev/null
    fi
    wait "${QPID[to]}"
    local qrc=$?
    local grc
    grc=$(tr -d '\r' <"$LOGDIR/console.$to.log" | sed -n 's/^VMTEST-RC=\([0-9]*\)$/\1/p' | tail -n1)
    for ((k = 0; k <= to; k++)); do
        cat "$LOGDIR/console.$k.log" >>"$LOGDIR/console.log"
    done
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG)|^MIGRATE-PASS-FAIL|^HELD-(STALE|SUMMARY|ERROR)' | head -n 80 | sed 's/^/guest /'
    if tr -d '\r' <"$LOGDIR/console.log" | grep -q '^HELD-STALE'; then
        fail "held-reads found read data that was wrong in guest memory after a switch-over ($(tr -d '\r' <"$LOGDIR/console.log" | grep -c '^HELD-STALE') stale buffer(s), HELD-STALE lines above): pages the device wrote were not sent again"
    fi
    if tr -d '\r' <"$LOGDIR/console.log" | grep -qE 'Kernel panic|BUG: |Oops: '; then
        fail "the guest kernel crashed (QEMU $(grep -lE 'Kernel panic|BUG: |Oops: ' "$LOGDIR"/console.[0-9]*.log | xargs -n1 basename | tr '\n' ' ')): with VMTEST_MIGRATE_MEM a multiple of 256 KiB that is QEMU 7.2's TCG dirty-tracking bug (docs/MIGRATION.md)"
    fi
    if tr -d '\r' <"$LOGDIR/console.log" | grep -q '^MIGRATE-PASS-FAIL'; then
        fail "fio saw I/O errors or verify mismatches during the load (MIGRATE-PASS-FAIL lines above)"
    fi
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^qemu-system' | sort | uniq -c | sed 's/^/qemu: /'
    if [ "$done_n" = "$migrations" ]; then
        pass "all $migrations migrations completed"
    else
        fail "$done_n of $migrations migrations completed"
    fi
    if [ "${grc:-255}" = 0 ]; then
        pass "guest checks on the final host (VMTEST-RC=0, qemu rc $qrc)"
    else
        fail "guest checks (VMTEST-RC=${grc:-none}, qemu rc $qrc)"
    fi
    # One line for tests/vm/migrate-matrix: what this run asserted, counted.
    local panics verify_fails
    panics=$(grep -lE 'Kernel panic|BUG: |Oops: ' "$LOGDIR"/console.[0-9]*.log 2>/dev/null | wc -l)
    verify_fails=$(tr -d '\r' <"$LOGDIR/console.log" | grep -cE '^MIGRATE-PASS-FAIL|^FAIL: final verification|^HELD-STALE')
    echo "MIGRATE-SUMMARY backend=$backend done=$done_n asked=$migrations at_once=$at_once compared=$ram_compared differing_pages=$ram_differ panics=$panics verify_errors=$verify_fails guest_rc=${grc:-none}"
    [ "$backend" = virtio ] && return 0
    BACKEND_PID=$pid_a
    vm_stop_backend A || fail "backend A did not exit 0 on SIGTERM"
    BACKEND_PID=$pid_b
    vm_stop_backend B || fail "backend B did not exit 0 on SIGTERM"
}
