# Benchmark policy-real-bench (sourced by tests/vm/run; skipped by tests/vm/run-all
# unless named: `tests/vm/run policy-real-bench`). Issue 45, item 2, the guest's half:
# every policy side by side on two kinds of real path that are not pipes.
#
#   qemu-throttle  two emulated NVMe controllers reaching one namespace (one image,
#                  the same NQN, nsid, UUID and EUI-64), path b through a QEMU throttle
#                  group: a token bucket with a burst (PRB_THROTTLE, default
#                  x-iops-total=2000 with bursts to 4000 for 2 s, and 20 MiB/s). How the
#                  QEMU side is built (two subsystems of one NQN, a placeholder
#                  controller): nvme_qemu_args_throttled in nvme-lib.sh.
#   nvmf-netem     inside the guest an nvmet target on a brd RAM disk in network
#                  namespace tgt, reached over two veth pairs (nvmf_netns_target), each
#                  connected through /dev/nvme-fabrics: real TCP. tc netem on each host
#                  side: a gets PRB_NETEM_A (delay 1ms), b PRB_NETEM_B (delay 5ms rate
#                  200mbit).
#
# In each setup the daemon (in the guest, on the two ng nodes, nvme_core.multipath=N,
# `--num-queues 1 --rpc-socket`, pinned to vCPU 1; the client to vCPU 0) serves
# vhost-load (blkio, tests/src/bin/vhost-load.rs): PRB_PREWARM (2) s of load first,
# then per workload (PRB_WORKLOADS, "BS_KIB:QD:KIND ...", KIND randread, randwrite,
# seqwrite or seqread; default 4k randread QD32 and 64k seqwrite QD8) PRB_ROUNDS (5)
# interleaved rounds of every policy (PRB_POLICIES, default all seven; round r starts
# at the r-th policy, PRB_ROTATE=0 keeps the list's order): set_policy over
# JSON-RPC, PRB_WARMUP (1) s warm-up, reset_stats, PRB_SECONDS (2) s measured, get_stats
# for the per-path split. The table (printed, and saved as table.txt in the log folder):
# per setup and workload, each policy's median IOPS and MiB/s over the rounds, every
# round, path b's share of the I/O and its rate, and the ratio to the best other policy
# (of the medians, and the median of the per-round ratios: rounds seconds apart see the
# same machine). A benchmark: it fails only when something breaks (a daemon that does
# not start or exit 0, a failed request, a missing measurement), never on a ratio.
# ~9 min with the defaults (TCG guest, 2 shared host cores: absolute numbers are small).
# run-timeout: 1080
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local ns_mib=${PRB_NS_MIB:-128} img=$RUN/ns1.img t0
    local throttle=${PRB_THROTTLE:-x-iops-total=2000,x-iops-total-max=4000,x-iops-total-max-length=2,x-bps-total=20971520}
    t0=$(now)
    # Data in every block: reads of never-written blocks are answered without touching
    # the image file by some QEMU versions.
    dd if=/dev/urandom of="$img" bs=1M count="$ns_mib" status=none
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/policy-real-bench.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
PCI_A=$NVME_PCI_A
PCI_B=$NVME_PCI_B
PCI_PH=$NVME_PCI_PH
SETUPS="${PRB_SETUPS:-qemu-throttle nvmf-netem}"
THROTTLE="$throttle"
NETEM_A="${PRB_NETEM_A:-delay 1ms}"
NETEM_B="${PRB_NETEM_B:-delay 5ms rate 200mbit}"
NVMF_MIB=${PRB_NVMF_MIB:-64}
POLICIES=${PRB_POLICIES:-round-robin,queue-depth,service-time,adaptive,numa,active-standby,auto}
WORKLOADS="${PRB_WORKLOADS:-4:32:randread 64:8:seqwrite}"
ROUNDS=${PRB_ROUNDS:-5}
ROTATE_ORDER=${PRB_ROTATE:-1}
MEASURE_S=${PRB_SECONDS:-2}
WARMUP=${PRB_WARMUP:-1}
PREWARM=${PRB_PREWARM:-2}
PIN=${PRB_PIN:-1}
DAEMON_ARGS="${PRB_DAEMON_ARGS:-}"
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"
    nvme_qemu_args_throttled "$img" 4096 "$throttle"
    VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-1020} VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" \
        vm_boot "${NVME_QEMU_ARGS[@]}"
    nvme_collect_logs
    [ -s "$SHARE/bench.raw" ] && cp "$SHARE/bench.raw" "$LOGDIR/bench.raw"
    if [ -s "$SHARE/table.txt" ]; then
        cp "$SHARE/table.txt" "$LOGDIR/table.txt"
        echo "table: $LOGDIR/table.txt"
    else
        fail "no table from the guest"
    fi
    nvme_guest_report
    vm_guest_verdict
}
