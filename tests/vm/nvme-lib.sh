# Host-side helpers for the NVMe scenarios (sourced by scenarios/nvme-*.sh after lib.sh).
# The guest gets two NVMe controllers of one subsystem sharing namespace 1 (and, with
# NVME_SECOND_NS=1, a second shared namespace 2 on its own image), booted with
# nvme_core.multipath=N so that each controller has its own /dev/ngXnY. The daemon and
# the vhost-verify client run inside the guest from $SHARE/bin (/hostwork/bin).
# shellcheck shell=bash

NVME_PCI_A=0000:01:00.0
NVME_PCI_B=0000:02:00.0
NVME_NQN=nqn.2024-01.example:subsys0
NVME_UUID=6a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d
NVME_EUI64=0x5254000012345678

# nvme_prepare_bins: the daemon and the clients into $SHARE/bin. VHOST_MPATH_BIN as for
# vhost-blk; VHOST_VERIFY_BIN / VHOST_LOAD_BIN, else target/release/vhost-verify and
# vhost-load, built when cargo is there (incremental: about a second when up to date);
# rpc.py (JSON-RPC client for the daemon's --rpc-socket, run with the host's python3).
nvme_prepare_bins() {
    local bin vbin lbin
    bin=${VHOST_MPATH_BIN:-}
    if [ -z "$bin" ]; then
        for bin in "$REPO/target/release/vhost-mpath" "$REPO/target/debug/vhost-mpath"; do
            [ -x "$bin" ] && break
        done
    fi
    [ -x "$bin" ] || { fail "no vhost-mpath binary ($bin): cargo build --release -p vhost-mpath"; return 1; }
    vbin=${VHOST_VERIFY_BIN:-}
    lbin=${VHOST_LOAD_BIN:-}
    if [ -z "$vbin" ] || [ -z "$lbin" ]; then
        [ -n "$vbin" ] || vbin=$REPO/target/release/vhost-verify
        [ -n "$lbin" ] || lbin=$REPO/target/release/vhost-load
        if command -v cargo >/dev/null; then
            (cd "$REPO" && cargo build --release -q -p vhost-mpath-tests --bin vhost-verify --bin vhost-load) ||
                { fail "cargo build of vhost-verify / vhost-load failed"; return 1; }
        fi
    fi
    [ -x "$vbin" ] || { fail "no vhost-verify binary ($vbin): cargo build --release -p vhost-mpath-tests --bin vhost-verify"; return 1; }
    [ -x "$lbin" ] || { fail "no vhost-load binary ($lbin): cargo build --release -p vhost-mpath-tests --bin vhost-load"; return 1; }
    mkdir -p "$SHARE/bin"
    cp "$bin" "$SHARE/bin/vhost-mpath"
    cp "$vbin" "$SHARE/bin/vhost-verify"
    cp "$lbin" "$SHARE/bin/vhost-load"
    cp "$VM_DIR/rpc.py" "$SHARE/bin/rpc.py"
    cp "$VM_DIR/nvme-guest-lib.sh" "$SHARE/nvme-lib.sh"
    log "binaries: $bin, $vbin, $lbin"
}

# nvme_qemu_args IMG LBA_SIZE [IMG2]: sets NVME_QEMU_ARGS (controllers ctrl0/ctrl1 on
# root ports rp0/rp1, namespace 1 on IMG, namespace 2 on IMG2 if given) and QMP at
# $RUN/qmp.sock.
nvme_qemu_args() {
    local img=$1 lbs=$2 img2=${3:-}
    NVME_QEMU_ARGS=(
        -qmp "unix:$RUN/qmp.sock,server=on,wait=off"
        -device pcie-root-port,id=rp0,chassis=1,slot=1
        -device pcie-root-port,id=rp1,chassis=2,slot=2
        -device "nvme-subsys,id=subsys0,nqn=$NVME_NQN"
        -device nvme,id=ctrl0,serial=SER0001,subsys=subsys0,bus=rp0
        -device nvme,id=ctrl1,serial=SER0001,subsys=subsys0,bus=rp1
        -drive "file=$img,if=none,id=nsd1,format=raw,cache=writeback"
        -device "nvme-ns,id=ns1,drive=nsd1,nsid=1,shared=on,logical_block_size=$lbs,physical_block_size=$lbs,uuid=$NVME_UUID,eui64=$NVME_EUI64"
    )
    if [ -n "$img2" ]; then
        NVME_QEMU_ARGS+=(
            -drive "file=$img2,if=none,id=nsd2,format=raw"
            -device "nvme-ns,id=ns2,drive=nsd2,nsid=2,shared=on,logical_block_size=$lbs,physical_block_size=$lbs"
        )
    fi
}

# nvme_qemu_args_throttled IMG LBA_SIZE THROTTLE: as nvme_qemu_args (namespace 1 on IMG,
# ctrl0 at NVME_PCI_A, ctrl1 at NVME_PCI_B, one namespace identity), but path b's I/O
# goes through a QEMU throttle group (THROTTLE: its properties, e.g.
# "x-iops-total=2000,x-bps-total=20971520"): a token bucket on one path only.
# QEMU throttles a BlockBackend, and one shared nvme-ns is one BlockBackend for every
# controller; so each controller gets a subsystem of its own with the same NQN and its
# own nvme-ns (nsid 1, same UUID and EUI-64, share-rw) over one raw node, b's through a
# throttle filter node. The guest sees one subsystem: the same NQN, nsid and identifiers.
# QEMU numbers the controllers of each subsystem from cntlid 0, and Linux refuses two
# controllers with one cntlid in a subsystem: a placeholder controller (ctrl-ph, at
# NVME_PCI_PH) takes cntlid 0 in b's subsystem, so that ctrl1 is cntlid 1; the guest
# unbinds it (nvme_drop_placeholder in nvme-guest-lib.sh).
NVME_PCI_PH=0000:03:00.0
nvme_qemu_args_throttled() {
    local img=$1 lbs=$2 throttle=$3
    local ns="nsid=1,shared=on,share-rw=on,logical_block_size=$lbs,physical_block_size=$lbs,uuid=$NVME_UUID,eui64=$NVME_EUI64"
    NVME_QEMU_ARGS=(
        -qmp "unix:$RUN/qmp.sock,server=on,wait=off"
        -device pcie-root-port,id=rp0,chassis=1,slot=1
        -device pcie-root-port,id=rp1,chassis=2,slot=2
        -device pcie-root-port,id=rp2,chassis=3,slot=3
        -device "nvme-subsys,id=subsys-a,nqn=$NVME_NQN"
        -device "nvme-subsys,id=subsys-b,nqn=$NVME_NQN"
        -device nvme,id=ctrl0,serial=SER0001,subsys=subsys-a,bus=rp0
        -device nvme,id=ctrl-ph,serial=SER0001,subsys=subsys-b,bus=rp2
        -device nvme,id=ctrl1,serial=SER0001,subsys=subsys-b,bus=rp1
        -blockdev "driver=file,filename=$img,node-name=ns1-file,cache.direct=off"
        -blockdev driver=raw,file=ns1-file,node-name=ns1-raw
        -object "throttle-group,id=tg-b,$throttle"
        -blockdev driver=throttle,throttle-group=tg-b,file=ns1-raw,node-name=ns1-throttled
        -device "nvme-ns,id=ns1a,drive=ns1-raw,bus=ctrl0,$ns"
        -device "nvme-ns,id=ns1b,drive=ns1-throttled,bus=ctrl1,$ns"
    )
}

# nvme_qmp JSON...: send QMP commands (after the capabilities handshake), print replies.
nvme_qmp() {
    python3 - "$RUN/qmp.sock" "$@" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
f = s.makefile("rw")
def reply():
    while True:
        m = json.loads(f.readline())
        if "event" not in m:
            return m
f.readline()  # greeting
f.write(json.dumps({"execute": "qmp_capabilities"}) + "\n"); f.flush(); reply()
rc = 0
for cmd in sys.argv[2:]:
    f.write(cmd + "\n"); f.flush()
    r = reply()
    print(json.dumps(r))
    if "error" in r:
        rc = 1
sys.exit(rc)
PY
}

# nvme_guest_report: the guest's PASS/FAIL/INFO/TIME lines and VERIFY summaries.
nvme_guest_report() {
    tr -d '\r' <"$LOGDIR/console.log" |
        grep -E '^(PASS|FAIL|INFO|TIME|TABLE):|^LOAD-ERROR|^VERIFY(-ERROR| pass| total| device|-RESULT)|^VMTEST-(WATCHDOG|DIAG|INIT-FAIL)' |
        sed 's/^/guest /'
}

# nvme_collect_logs: daemon logs written by the guest into the share, kept with the run.
nvme_collect_logs() {
    local f
    for f in "$SHARE"/*.log; do
        [ -e "$f" ] && cp "$f" "$LOGDIR/guest-$(basename "$f")"
    done
}
