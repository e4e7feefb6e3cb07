# Scenario readme-qemu (sourced by tests/vm/run): the README's commands, run as written,
# so that the README cannot drift from what is tested.
#
# - The daemon: the README's "Two commands" configuration (configs/demo.toml, copied
#   into the run folder so that its `../state/demo.img` is a fresh sparse 1 GiB image
#   there, never the user's), with `--socket-path` pointing at the run's socket.
# - QEMU: the command of "Attaching a QEMU guest", cut from README.md between the
#   `qemu-cmd` markers (continuation lines joined, shlex-split, the trailing `...`
#   dropped, /tmp/vhost-mpath.sock replaced by the run's socket), plus only what a test
#   guest needs, appended: `-accel tcg` (no KVM assumed), `-nodefaults -no-user-config
#   -display none -no-reboot -serial stdio` (console to console.log), `-kernel`,
#   `-initrd`, `-append` (tests/vm's kernel and initramfs) and the two 9p shares (/usr,
#   the run's share) that every guest test uses.
# - The upgrade procedure of "Restart, crash and upgrade", while the guest does I/O:
#   the guest half of `reconnect` in its busy mode (region 1 written in 1 MiB
#   O_DIRECT+fsync chunks and region 0 read back all through the restart, every chunk
#   compared). On the guest's request the host does the README's steps: (1) a new
#   binary installed beside the running one and checked with --print-capabilities,
#   (2) `kill -TERM` on the running daemon, which must exit 0 within
#   READMEQ_STOP_MAX_S (default 2) s, (3) the new binary started at once on the same
#   configuration and socket; QEMU (reconnect=1) must reconnect within
#   READMEQ_CONN_MAX_S (default 5) s. The new daemon must log that it resubmitted the
#   requests the old one left in the inflight region (or that there were none).
# Host, after the guest is off: the new daemon exits 0 on SIGTERM; the image holds both
# regions and zeros elsewhere.
# shellcheck shell=bash

# shellcheck source=reconnect.sh
. "$VM_DIR/scenarios/reconnect.sh" # reconnect_connections, reconnect_wait_for

# readme_qemu_cmd SOCK: the README's QEMU command, one argument per line (NUL-separated).
readme_qemu_cmd() {
    python3 - "$REPO/README.md" "$1" <<'EOF'
import re, shlex, sys
readme, sock = sys.argv[1:3]
text = open(readme).read()
m = re.search(r"<!-- qemu-cmd:begin -->\s*```sh\n(.*?)```\s*<!-- qemu-cmd:end -->", text, re.S)
if not m:
    sys.exit("README.md: no qemu-cmd block")
args = shlex.split(m.group(1).replace("\\\n", " "))
if args[0] != "qemu-system-x86_64":
    sys.exit(f"README.md qemu-cmd: starts with {args[0]!r}, not qemu-system-x86_64")
if args[-1] != "...":
    sys.exit("README.md qemu-cmd: expected a trailing '...' (the guest's own options)")
args = args[:-1]
hits = [i for i, a in enumerate(args) if "/tmp/vhost-mpath.sock" in a]
if len(hits) != 1:
    sys.exit(f"README.md qemu-cmd: expected one /tmp/vhost-mpath.sock, found {len(hits)}")
args[hits[0]] = args[hits[0]].replace("/tmp/vhost-mpath.sock", sock)
for want in ("vhost-user-blk-pci", "share=on", "reconnect=1"):
    if not any(want in a for a in args):
        sys.exit(f"README.md qemu-cmd lacks {want}")
sys.stdout.write("\0".join(args) + "\0")
EOF
}

scenario_main() {
    local region_mib=8 queues=2 gap=0
    local sock=$RUN/vhost.sock backend=vhost-mpath img=$RUN/state/demo.img
    local stop_max=${READMEQ_STOP_MAX_S:-2} conn_max=${READMEQ_CONN_MAX_S:-5}
    local bin new t0 ts tx tu tc rc disk_bytes k off
    local -a readme test_opts

    bin=$(vm_daemon_bin) || return 1

    mapfile -d '' readme < <(readme_qemu_cmd "$sock") || true
    if [ "${#readme[@]}" -lt 2 ]; then
        fail "could not cut the QEMU command from README.md (qemu-cmd markers)"
        return 1
    fi
    pass "README QEMU command: ${readme[*]}"

    # The README's daemon: configs/demo.toml (its image relative to the config file).
    mkdir -p "$RUN/configs" "$RUN/state" "$RUN/new"
    cp "$REPO/configs/demo.toml" "$RUN/configs/demo.toml"
    vm_start_backend vhost-mpath.0 "$sock" "$bin" --config "$RUN/configs/demo.toml" --socket-path "$sock" ||
        { fail "the README's daemon (configs/demo.toml) did not start"; return 1; }
    local pid0=$BACKEND_PID
    disk_bytes=$(stat -c %s "$img" 2>/dev/null)
    [ -n "$disk_bytes" ] || { fail "no image at $img (configs/demo.toml's [image])"; return 1; }

    python3 -c '
import random, sys
sys.stdout.buffer.write(random.Random(0x726561646d65).randbytes(int(sys.argv[1]) << 20))
' $((2 * region_mib)) >"$SHARE/pattern.bin"
    cp "$VM_DIR/scenarios/reconnect.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
DISK_BYTES=$disk_bytes
REGION_MIB=$region_mib
MODES='busy'
REGION_OFF_0=4
REGION_OFF_1=20
RESTART_WAIT_S=60
STALL_MIN_S=0.5
BUSY_MAX_PASSES=200
EOF

    test_opts=(-accel tcg -nodefaults -no-user-config -display none -no-reboot -serial stdio
        -kernel "$VMLINUX" -initrd "$INITRD"
        -append "console=ttyS0 quiet panic=-1 vmtest.script=/hostwork/guest.sh vmtest.timeout=$((${VMTEST_TIMEOUT:-150} - 30))"
        -virtfs local,path=/usr,mount_tag=hostusr,security_model=none,readonly=on
        -virtfs "local,path=$SHARE,mount_tag=hostwork,security_model=none")
    echo "${readme[*]} ${test_opts[*]}" >"$LOGDIR/qemu.cmd"
    QEMU_T0=$(now)
    QEMU_TIMEOUT=${VMTEST_TIMEOUT:-150}
    timeout -k 5 "$QEMU_TIMEOUT" "${readme[@]}" "${test_opts[@]}" </dev/null >"$LOGDIR/console.log" 2>&1 &
    QEMU_PID=$!
    BG_PIDS+=("$QEMU_PID")

    local ok_round=0
    if ! reconnect_wait_for "[ -e '$SHARE/restart-request.1' ]" 90; then
        fail "no restart request from the guest within 90 s (or QEMU ended)"
        echo "no restart request seen" >"$SHARE/abort"
    else
        # Step 1: the new binary beside the running one, checked.
        cp "$bin" "$RUN/new/vhost-mpath"
        new=$RUN/new/vhost-mpath
        if "$new" --print-capabilities >"$LOGDIR/capabilities.txt" 2>&1; then
            pass "upgrade step 1: the new binary runs (--print-capabilities)"
        else
            fail "upgrade step 1: $new --print-capabilities failed"
        fi
        # Step 2: SIGTERM to the running daemon, under the guest's I/O.
        ts=$(now)
        BACKEND_PID=$pid0
        vm_stop_backend vhost-mpath.0
        rc=$?
        tx=$(now)
        if [ "$rc" = 0 ] && python3 -c "import sys; sys.exit(not $(elapsed "$ts" "$tx") <= $stop_max)"; then
            pass "upgrade step 2: the running daemon exited 0 $(elapsed "$ts" "$tx") s after SIGTERM (at most $stop_max s)"
        else
            fail "upgrade step 2: exit status $rc $(elapsed "$ts" "$tx") s after SIGTERM (want 0 within $stop_max s)"
        fi
        # Step 3: the new one, same configuration and socket, at once.
        if vm_start_backend vhost-mpath.1 "$sock" "$new" --config "$RUN/configs/demo.toml" --socket-path "$sock"; then
            tu=$(now)
            if reconnect_wait_for '[ "$(reconnect_connections)" -gt 0 ]' 30; then
                tc=$(now)
                if python3 -c "import sys; sys.exit(not $(elapsed "$tu" "$tc") <= $conn_max)"; then
                    pass "upgrade step 3: QEMU reconnected to the new daemon $(elapsed "$tu" "$tc") s after it came up (SIGTERM to reconnect $(elapsed "$ts" "$tc") s)"
                    ok_round=1
                else
                    fail "upgrade step 3: QEMU reconnected only $(elapsed "$tu" "$tc") s after the new daemon came up (want at most $conn_max s)"
                    ok_round=1
                fi
            else
                fail "upgrade step 3: QEMU did not reconnect within 30 s"
            fi
        else
            fail "upgrade step 3: the new daemon did not start"
        fi
        if [ "$ok_round" = 1 ]; then
            echo "backend=vhost-mpath.1 gap=0s" >"$SHARE/restarted.1.tmp"
            mv "$SHARE/restarted.1.tmp" "$SHARE/restarted.1"
        else
            echo "upgrade failed" >"$SHARE/abort"
        fi
    fi

    vm_boot_wait
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^qemu-system' | sort | uniq -c | sed 's/^/qemu: /'
    vm_guest_verdict
    if [ "$ok_round" = 1 ]; then
        local resub
        resub=$(grep -hoE 'inflight region: [0-9]+ requests? to resubmit' "$LOGDIR/vhost-mpath.1.log" | head -n 3 | tr '\n' ';')
        echo "INFO: new daemon: ${resub:-no inflight requests to resubmit logged}"
        vm_stop_backend vhost-mpath.1 && pass "the new daemon exited 0 on SIGTERM" ||
            fail "the new daemon did not exit 0 on SIGTERM"
    fi

    # Host-side view: both regions, zeros elsewhere (the image is sparse: cmp is quick).
    local MiB=$((1 << 20))
    for k in 0 1; do
        off=$((k == 0 ? 4 : 20))
        if cmp -n $((region_mib * MiB)) -i "$((k * region_mib * MiB)):$((off * MiB))" "$SHARE/pattern.bin" "$img"; then
            pass "image holds region $k at $off MiB"
        else
            fail "image region $k at $off MiB differs from the pattern"
        fi
    done
    if cmp -s -n $((4 * MiB)) "$img" /dev/zero &&
        cmp -s -n $((8 * MiB)) -i "$((12 * MiB)):0" "$img" /dev/zero &&
        cmp -s -n $((disk_bytes - 28 * MiB)) -i "$((28 * MiB)):0" "$img" /dev/zero; then
        pass "image is zero outside the regions"
    else
        fail "image not zero outside the regions"
    fi
}
