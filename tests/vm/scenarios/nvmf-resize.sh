# Scenario nvmf-resize (sourced by tests/vm/run): online resize (issue 46), NVMe variant.
#
# Guest only (no emulated NVMe): an nvmet target whose namespace is a file in tmpfs
# (NVMF_RESIZE_OLD_MIB, default 64 MiB; a file, because a brd RAM disk cannot grow), two
# TCP ports on loopback (127.0.0.1 and 127.0.0.2, both trsvcid 4420: the lib's
# ng_tcp_addr then tells the two controllers apart), connected twice through
# /dev/nvme-fabrics (nvme_core.multipath=N: one ng node per controller). The daemon runs
# on both ng nodes with --rpc-socket. Then the file grows to NVMF_RESIZE_NEW_MIB (96) and
# `revalidate_size` is written on the target (a Namespace Attribute Changed event; the
# host kernel rescans). Nothing tells the daemon: its size watch (Identify Namespace on
# each path every second) must notice by itself. Checks, each able to fail:
#   - before: get_stats capacity_bytes is the old size; a client's region past it is
#     refused (beyond the disk);
#   - the daemon logs "capacity changed from OLD to NEW bytes (path checker)" within 5 s;
#   - get_stats shows NEW within 5 s (a poller on its own RPC connection, every 10 ms);
#   - get_paths size_bytes of both paths is NEW; the host kernel's nvmeXnY of both
#     controllers shows NEW (the AEN arrived);
#   - a fresh vhost-verify connection sees capacity NEW and writes, flushes, reads back and
#     compares the whole new region (OLD..NEW);
#   - exactly one "capacity changed" line; the daemon exits 0 on SIGTERM.
# Negative controls: VMTEST_SIZE_WATCH_MS=0 (the daemon's size watch off) must fail the
# log line, get_stats, get_paths and vhost-verify checks. NVMF_RESIZE_REVALIDATE=0 grows
# the file without revalidate_size: it passes too, as nvmet (Linux 6.1) re-reads the
# file's size at each Identify Namespace, so the daemon's own Identify finds the growth
# (and makes nvmet send the event the kernel then follows).
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local t0
    t0=$(now)
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvmf-resize.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
OLD_MIB=${NVMF_RESIZE_OLD_MIB:-64}
NEW_MIB=${NVMF_RESIZE_NEW_MIB:-96}
REVALIDATE=${NVMF_RESIZE_REVALIDATE:-1}
SIZE_WATCH_MS=${VMTEST_SIZE_WATCH_MS:-}
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"
    VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" vm_boot
    nvme_collect_logs
    nvme_guest_report
    vm_guest_verdict
}
