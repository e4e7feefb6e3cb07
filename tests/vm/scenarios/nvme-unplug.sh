# Scenario nvme-unplug (sourced by tests/vm/run): one NVMe controller is hot-removed
# (QMP device_del) while the daemon carries a write + read-back verification load over
# both controllers; the client must see zero errors.
#
# Same QEMU as nvme-verify (two controllers, shared namespace 1, 4 KiB blocks,
# nvme_core.multipath=N), namespace NVME_NS_MIB (default 256). Guest
# (nvme-unplug.guest.sh): `vhost-mpath --num-queues 2 --policy round-robin` over both ng
# nodes; vhost-verify with 2 queues repeats passes (write 16 MiB with a new seed, flush,
# read back, compare) for UNPLUG_DURATION s (default 30). At UNPLUG_AT s (default 5) the
# guest asks the host (file req.unplug on the share) to `device_del ctrl1`; after
# REPLUG_AFTER s more (default 8) to `device_add` it back, and reports the new ng node.
# Checks: client exit 0 (no request error, every pass verified), the removed controller's
# I/O stopped and the other carried on, the daemon saw the path error and failed I/O over,
# and exits 0 on SIGTERM. Printed: the stall (slowest batch of the pass hit by the removal),
# the daemon's first path error and failover lines, and per-pass rates.
# After device_add the controller comes back under a new ng node: the daemon must
# re-open the path there (it looks the controller up by PCI address), probe it back
# to usable, and send it I/O again (checked with `vhost-mpath stats --json`).
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

# unplug_wait_for COND SECONDS: poll every 0.1 s while QEMU runs; 1 on timeout or QEMU gone.
unplug_wait_for() {
    local t0
    t0=$(now)
    until eval "$1"; do
        kill -0 "$QEMU_PID" 2>/dev/null || return 1
        [ "$(elapsed "$t0" | cut -d. -f1)" -ge "$2" ] && return 1
        sleep 0.1
    done
}

scenario_main() {
    local ns_mib=${NVME_NS_MIB:-256} lbs=4096 img=$RUN/ns1.img t0 tq
    local duration=${UNPLUG_DURATION:-30} at=${UNPLUG_AT:-5} replug=${REPLUG_AFTER:-8}
    local VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-150}

    t0=$(now)
    truncate -s "${ns_mib}M" "$img"
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvme-unplug.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
PCI_A=$NVME_PCI_A
PCI_B=$NVME_PCI_B
NS_BYTES=$((ns_mib << 20))
LBA=$lbs
DURATION=$duration
UNPLUG_AT=$at
REPLUG_AFTER=$replug
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"

    nvme_qemu_args "$img" "$lbs"
    VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" vm_boot_start "${NVME_QEMU_ARGS[@]}"

    if unplug_wait_for "[ -e '$SHARE/req.unplug' ]" 90; then
        tq=$(now)
        if nvme_qmp '{"execute":"device_del","arguments":{"id":"ctrl1"}}' >"$LOGDIR/qmp-unplug.json"; then
            log "device_del ctrl1 sent"
            echo "$(elapsed "$tq")" >"$SHARE/ack.unplug"
        else
            fail "QMP device_del ctrl1: $(cat "$LOGDIR/qmp-unplug.json")"
            echo failed >"$SHARE/ack.unplug"
        fi
        if unplug_wait_for "[ -e '$SHARE/req.replug' ]" 90; then
            # The old device must be gone from QEMU before the id can be reused.
            unplug_wait_for "! nvme_qmp '{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"/machine/peripheral/ctrl1\"}}' >/dev/null 2>&1" 15
            if nvme_qmp '{"execute":"device_add","arguments":{"driver":"nvme","id":"ctrl1","serial":"SER0001","subsys":"subsys0","bus":"rp1"}}' >"$LOGDIR/qmp-replug.json"; then
                log "device_add ctrl1 sent"
                echo ok >"$SHARE/ack.replug"
            else
                fail "QMP device_add ctrl1: $(cat "$LOGDIR/qmp-replug.json")"
                echo failed >"$SHARE/ack.replug"
            fi
        else
            fail "no replug request from the guest"
        fi
    else
        fail "no unplug request from the guest within 90 s (or QEMU ended)"
    fi
    vm_boot_wait
    nvme_collect_logs
    nvme_guest_report
    vm_guest_verdict
}
