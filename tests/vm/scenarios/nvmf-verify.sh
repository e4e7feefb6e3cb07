# Scenario nvmf-verify (sourced by tests/vm/run): the daemon on two NVMe/TCP paths.
#
# Guest only (no emulated NVMe): an nvmet target on a brd RAM disk (NVMF_NS_MIB, default
# 64 MiB, 512-byte blocks) with two TCP ports on loopback (4421, 4422; port 4422's ANA
# group set to non-optimized), the host side connected to both through /dev/nvme-fabrics
# (nvme_core.multipath=N: one ng node per controller). Checks: the daemon reads the ANA
# log page through admin passthrough (a optimized, b non-optimized), both controllers
# give the same namespace identity, and vhost-verify writes, flushes, reads back and
# compares 8 MiB (with write-zeroes and discard) over the two paths.
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local t0
    t0=$(now)
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvmf-verify.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
NS_MIB=${NVMF_NS_MIB:-64}
REGION_MIB=8
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"
    VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" vm_boot
    nvme_collect_logs
    nvme_guest_report
    vm_guest_verdict
}
