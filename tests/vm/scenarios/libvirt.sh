# Scenario libvirt (sourced by tests/vm/run): the README's libvirt XML, run by a real
# libvirt. Debian 12's libvirtd 9.0 is started here without systemd (`virtlogd -d`,
# `libvirtd -d`; an already running libvirtd is used and left running); the daemon
# listens on a 0660 socket of group kvm (`--socket-group kvm`), as QEMU's user
# (libvirt-qemu, in kvm) needs; a TCG domain (type='qemu') with direct kernel boot
# (tests/vm/work's kernel and initramfs) gets the README's <memoryBacking> and
# vhostuser <disk> (extracted from README.md between the libvirt-xml markers, socket
# path replaced), and the two 9p shares of the other scenarios.
#
# Checks: libvirt refuses <serial> and <readonly/> on a vhostuser disk (why the README
# says to set them on the daemon); the domain starts; QEMU runs as libvirt-qemu with
# vhost-user-blk-pci and shared memfd memory; the guest half of vhost-blk
# (vhost-blk.guest.sh: 64 MiB, 2 queues, 16 MiB pattern written with O_DIRECT + fsync
# on both queues, read back, compared) passes; the guest sees the serial given to the
# daemon; the domain is destroyed and undefined; the daemon exits 0 on SIGTERM; the
# image holds the pattern. Needs: tests/install-deps (libvirt packages, the
# libvirt-qemu user and kvm group).
# shellcheck shell=bash

# Domain and libvirt daemons of this run, for the cleanup.
LV_DOMAIN=
LV_NAME=
LV_PIDS=()
# /dev/kvm's mode and owner before this run changed them ("600 root:root"), if it did.
LV_KVM_MODE=

lv_virsh() { timeout 60 virsh -q -c qemu:///system "$@"; }

lv_cleanup() {
    local rc=$? pid
    if [ -n "$LV_DOMAIN" ]; then
        lv_virsh destroy "$LV_DOMAIN" >/dev/null 2>&1
        lv_virsh undefine "$LV_DOMAIN" >/dev/null 2>&1
    fi
    # QEMU's log under /var/log/libvirt/qemu (a copy is in LOGDIR).
    [ -n "${LV_NAME:-}" ] && rm -f "/var/log/libvirt/qemu/$LV_NAME.log"
    for pid in "${LV_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null
    done
    if [ -n "$LV_KVM_MODE" ]; then
        chown "${LV_KVM_MODE#* }" /dev/kvm && chmod "${LV_KVM_MODE%% *}" /dev/kvm
    fi
    (exit "$rc")
    vm_cleanup
}

# lv_start_daemon NAME PIDFILE CMD...: start a self-daemonizing libvirt daemon.
lv_start_daemon() {
    local name=$1 pidfile=$2
    shift 2
    "$@" -d -p "$pidfile" || { fail "$name -d failed"; return 1; }
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
    [ -s "$pidfile" ] || { fail "$name wrote no pid file"; return 1; }
    LV_PIDS=("$(cat "$pidfile")" "${LV_PIDS[@]}")
    log "$name started (pid $(cat "$pidfile"))"
}

# The README's <memoryBacking> and vhostuser <disk>, with the socket path replaced.
lv_readme_xml() {
    python3 - "$REPO/README.md" "$1" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- libvirt-xml:begin -->\s*```xml\n(.*?)```\s*<!-- libvirt-xml:end -->", text, re.S)
if not m:
    sys.exit("README.md: no libvirt-xml block")
block = m.group(1)
parts = []
for pat in (r"<memoryBacking>.*?</memoryBacking>", r"<disk type='vhostuser'.*?</disk>"):
    p = re.search(pat, block, re.S)
    if not p:
        sys.exit(f"README.md libvirt block lacks {pat}")
    parts.append(p.group(0))
paths = re.findall(r"path='([^']*\.sock)'", parts[1])
if len(paths) != 1:
    sys.exit("README.md libvirt disk: expected one socket path")
print(parts[0])
print("@@DEVICES@@")
print(parts[1].replace(paths[0], sys.argv[2]))
EOF
}

# lv_domain_xml NAME MEMBACKING DISK: the test domain around the README's parts.
lv_domain_xml() {
    local name=$1 membacking=$2 disk=$3
    cat <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>512</memory>
  <vcpu>2</vcpu>
  $membacking
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>$LV_PUB/vmlinux</kernel>
    <initrd>$LV_PUB/initramfs.cpio.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1 vmtest.script=/hostwork/guest.sh vmtest.timeout=$LV_GTIMEOUT</cmdline>
  </os>
  <cpu mode='maximum'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    $disk
    <filesystem type='mount' accessmode='squash'>
      <source dir='/usr'/>
      <target dir='hostusr'/>
      <readonly/>
    </filesystem>
    <filesystem type='mount' accessmode='squash'>
      <source dir='$SHARE'/>
      <target dir='hostwork'/>
    </filesystem>
    <serial type='file'>
      <source path='$LOGDIR/console.log'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
}

scenario_main() {
    local disk_mib=64 pat_mib=16 off_mib=8 tail_mib=1 queues=2 serial=vmp-libvirt-test
    local tail_off_mib=$((disk_mib - tail_mib))
    local img=$RUN/disk.img sock bin parts membacking disk name qpid quser state t0 i rc
    local qtimeout=${VMTEST_TIMEOUT:-150}
    LV_GTIMEOUT=${VMTEST_GUEST_TIMEOUT:-$((qtimeout - 30))}
    trap lv_cleanup EXIT

    for c in libvirtd virtlogd virsh; do
        command -v "$c" >/dev/null || { fail "$c missing: run tests/install-deps"; return 1; }
    done
    getent passwd libvirt-qemu >/dev/null && getent group kvm >/dev/null ||
        { fail "no libvirt-qemu user or kvm group: run tests/install-deps"; return 1; }

    # QEMU runs as libvirt-qemu: what it opens (kernel, initramfs, socket, 9p share)
    # must be reachable by that user. RUN itself stays unlistable (0711).
    chmod 0711 "$RUN"
    LV_PUB=$RUN/pub
    mkdir -m 0755 "$LV_PUB"
    cp "$VMLINUX" "$LV_PUB/vmlinux"
    cp "$INITRD" "$LV_PUB/initramfs.cpio.gz"
    sock=$LV_PUB/vhost.sock

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
    chmod -R a+rwX "$SHARE"

    bin=$(vm_daemon_bin) || return 1
    # shellcheck disable=SC2086  # VHOST_MPATH_ARGS: extra flags, word-split on purpose
    vm_start_backend vhost-mpath "$sock" "$bin" --socket-path "$sock" --socket-group kvm \
        --num-queues "$queues" --serial "$serial" \
        --path "$img,name=a" --path "$img,name=b" ${VHOST_MPATH_ARGS:-} ||
        { fail "backend vhost-mpath did not start"; return 1; }
    if [ "$(stat -c '%a %G' "$sock")" = "660 kvm" ]; then
        pass "vhost-user socket is 0660, group kvm"
    else
        fail "vhost-user socket is $(stat -c '%a %G' "$sock"), want 660 kvm"
    fi

    # libvirt without systemd: virtlogd (console and domain logs) and libvirtd.
    if lv_virsh version >/dev/null 2>&1; then
        log "libvirtd already running: using it (and leaving it running)"
    else
        mkdir -p /var/log/libvirt/qemu /var/lib/libvirt /run/libvirt
        lv_start_daemon virtlogd "$RUN/virtlogd.pid" virtlogd || return 1
        if [ -e /dev/kvm ] && ! runuser -u libvirt-qemu -- test -r /dev/kvm -a -w /dev/kvm 2>/dev/null; then
            # Without udev, /dev/kvm stays root-only 0600: libvirt's capability probe (run
            # with CAP_DAC_OVERRIDE) finds KVM while its access check as libvirt-qemu does
            # not, and it re-probes QEMU for ever (every define hangs). Debian's udev makes
            # it root:kvm 0660; do the same for the run and put it back afterwards. (The
            # domain is TCG either way; hiding /dev/kvm in a mount namespace breaks
            # libvirt's own /dev namespace for QEMU.)
            LV_KVM_MODE=$(stat -c '%a %U:%G' /dev/kvm)
            chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
            log "/dev/kvm was $LV_KVM_MODE: root:kvm 0660 for this run (as udev sets it)"
        fi
        lv_start_daemon libvirtd "$RUN/libvirtd.pid" libvirtd || return 1
        for i in $(seq 100); do
            lv_virsh version >/dev/null 2>&1 && break
            sleep 0.2
        done
        lv_virsh version >/dev/null 2>&1 || { fail "libvirtd does not answer"; return 1; }
    fi
    pass "libvirt $(lv_virsh version | sed -n 's/^Running against daemon: //p;s/^Using library: //p' | head -n1) answers"
    echo "TIME: prepare + backend + libvirtd up: $(elapsed "$t0") s"

    parts=$(lv_readme_xml "$sock") || { fail "README libvirt XML: $parts"; return 1; }
    membacking=${parts%%@@DEVICES@@*}
    disk=${parts#*@@DEVICES@@}
    name=vmp-libvirt-$$
    LV_NAME=$name

    # What the README says libvirt refuses on a vhostuser disk.
    local opt bad_disk err
    declare -A LV_WORD=(["<serial>x</serial>"]=serial ["<readonly/>"]=readonly)
    for opt in "<serial>x</serial>" "<readonly/>"; do
        bad_disk=${disk/<\/disk>/$opt<\/disk>}
        lv_domain_xml "$name-refused" "$membacking" "$bad_disk" >"$RUN/refused.xml"
        # The good domain must define (checked below): a refusal for another reason
        # would not prove anything, so the error must name the option.
        if err=$(lv_virsh define "$RUN/refused.xml" 2>&1); then
            lv_virsh undefine "$name-refused" >/dev/null 2>&1
            fail "libvirt accepted $opt on a vhostuser disk (README says it refuses it)"
        elif echo "$err" | grep -qi "${LV_WORD[$opt]}"; then
            pass "libvirt refuses $opt on a vhostuser disk: $(echo "$err" | tail -n1)"
        else
            fail "libvirt refused the domain with $opt for another reason: $err"
        fi
    done

    lv_domain_xml "$name" "$membacking" "$disk" >"$LOGDIR/domain.xml"
    : >"$LOGDIR/console.log"
    LV_DOMAIN=$name
    if ! err=$(lv_virsh define "$LOGDIR/domain.xml" 2>&1); then
        fail "virsh define: $err"
        return 1
    fi
    QEMU_T0=$(now)
    lv_virsh start "$name" >"$LOGDIR/virsh-start.log" 2>&1
    rc=$?
    if [ "$rc" != 0 ]; then
        cp "/var/log/libvirt/qemu/$name.log" "$LOGDIR/libvirt-qemu.log" 2>/dev/null
        fail "virsh start: status $rc (124: timed out) $(cat "$LOGDIR/virsh-start.log")" \
            "$(grep -o 'Unable to connect.*' "$LOGDIR/libvirt-qemu.log" | tail -n1)"
        return 1
    fi
    pass "domain $name started"
    cp "/var/log/libvirt/qemu/$name.log" "$LOGDIR/libvirt-qemu.log" 2>/dev/null
    qpid=$(cat "/run/libvirt/qemu/$name.pid" 2>/dev/null)
    quser=$(ps -o user= -p "${qpid:-0}" 2>/dev/null)
    if [ "$quser" = libvirt-qemu ]; then
        pass "QEMU (pid $qpid) runs as libvirt-qemu"
    else
        fail "QEMU runs as '${quser:-?}' (pid ${qpid:-?}), want libvirt-qemu"
    fi
    if grep -q 'vhost-user-blk-pci' "$LOGDIR/libvirt-qemu.log" &&
        grep -q 'memory-backend-memfd.*"share":true\|memory-backend-memfd.*share=on' "$LOGDIR/libvirt-qemu.log"; then
        pass "QEMU command line has vhost-user-blk-pci and shared memfd guest memory"
    else
        fail "QEMU command line lacks vhost-user-blk-pci or shared memfd memory (see $LOGDIR/libvirt-qemu.log)"
    fi

    # Wait for the guest's verdict (then destroy the domain) or its power-off, bounded.
    QEMU_RC=0
    while :; do
        tr -d '\r' <"$LOGDIR/console.log" | grep -q '^VMTEST-RC=' && break
        state=$(lv_virsh domstate "$name" 2>/dev/null | head -n1)
        [ "$state" = "shut off" ] && break
        if [ "$(elapsed "$QEMU_T0" | cut -d. -f1)" -ge "$qtimeout" ]; then
            log "domain still '$state' after $qtimeout s"
            QEMU_RC=124
            break
        fi
        sleep 0.2
    done
    GUEST_TIME=$(elapsed "$QEMU_T0")
    local how="powered off by the guest"
    if lv_virsh destroy "$name" >/dev/null 2>&1; then
        how="destroyed"
    fi
    state=$(lv_virsh domstate "$name" 2>/dev/null | head -n1)
    if [ "$state" = "shut off" ] && lv_virsh undefine "$name" >/dev/null; then
        pass "domain $how, then undefined"
        LV_DOMAIN=
    else
        fail "domain $name: state '$state' after destroy, or undefine failed"
    fi
    cp "/var/log/libvirt/qemu/$name.log" "$LOGDIR/libvirt-qemu.log" 2>/dev/null

    GUEST_RC=$(tr -d '\r' <"$LOGDIR/console.log" | sed -n 's/^VMTEST-RC=\([0-9]*\)$/\1/p' | tail -n1)
    [ -n "$GUEST_RC" ] || GUEST_RC=255
    tr -d '\r' <"$LOGDIR/console.log" | grep -E '^(PASS|FAIL|INFO|TIME):|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' | sed 's/^/guest /'
    vm_guest_verdict
    if tr -d '\r' <"$LOGDIR/console.log" | grep -q "serial='$serial'"; then
        pass "guest sees the serial given to the daemon ($serial)"
    else
        fail "guest does not see serial '$serial'"
    fi
    if grep -q 'frontend connected' "$LOGDIR/vhost-mpath.log"; then
        pass "libvirt's QEMU connected to the daemon"
    else
        fail "the daemon never saw a frontend"
    fi

    vm_stop_backend vhost-mpath
    rc=$?
    if [ "$rc" = 0 ]; then
        pass "backend exited 0 on SIGTERM"
    else
        fail "backend exit status $rc after SIGTERM (124: did not exit in time)"
    fi

    local MiB=$((1 << 20))
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
}
