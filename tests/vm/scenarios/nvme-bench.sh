# Benchmark nvme-bench (sourced by tests/vm/run; skipped by tests/vm/run-all unless named:
# `tests/vm/run nvme-bench`). Results and interpretation: docs/BENCHMARKS-NVME.md.
#
# Same QEMU as nvme-verify (two emulated NVMe controllers of one subsystem sharing
# namespace 1, 4 KiB blocks, nvme_core.multipath=N), the guest booted with
# nvme.poll_queues=BENCH_POLL_QUEUES (default 1; 0: no polled variant). Inside the guest,
# for each workload (BENCH_WORKLOADS, "BS_KIB:QD ...", default "4:32 128:8"; random
# reads, BENCH_SECONDS s each, default 3) and each variant (BENCH_VARIANTS, default
# "plain files fixed polled"), on path a's ng node:
#   fio-V      fio --ioengine=io_uring_cmd --cmd_type=nvme with the variant's options:
#              plain: none; files: --registerfiles; fixed: --fixedbufs --registerfiles;
#              polled: --fixedbufs --registerfiles --hipri
#   daemon-V   vhost-mpath --num-queues 1 --path NG_A with the matching flags (plain:
#              --fixed-buffers false --registered-files false; files: --fixed-buffers
#              false; fixed: the defaults; polled: --io-poll true), driven by vhost-load
#              (blkio); its per-connection counters must show the variant's path taken
# With BENCH_TWO_PATHS=1 also fio-2paths (one job per ng node) and daemon-2paths
# (round-robin over both), fixed variant (daemon on vCPU 1, client on vCPU 0 with
# BENCH_PIN=1, the default; fio unpinned).
# BENCH_REPS (3) rounds interleave the cells; the table shows medians and every round
# and the guest's CPU use (both vCPUs, /proc/stat). BENCH_DAEMON_ARGS adds daemon flags
# (e.g. "--poll-us 50"). The host's CPU use per QEMU thread over the run (hostcpu.py):
# the host's cores, shared by the vCPUs and the device emulation, are the real limit.
# Ratios per variant: daemon-V / fio-V (ratio of medians, and median of the per-round
# ratios); a TARGET line says whether daemon-fixed / fio-fixed >= 0.95. The scenario
# fails when a cell fails or a daemon variant did not take its path, not on the target.
# ~6 min with BENCH_REPS=3.
# run-timeout: 720
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local ns_mib=${NVME_NS_MIB:-256} lbs=4096 img=$RUN/ns1.img t0
    t0=$(now)
    # Data in every block: reads of never-written blocks are answered without touching
    # the image file by some QEMU versions.
    dd if=/dev/urandom of="$img" bs=1M count="$ns_mib" status=none
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvme-bench.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
PCI_A=$NVME_PCI_A
PCI_B=$NVME_PCI_B
WORKLOADS="${BENCH_WORKLOADS:-4:32 128:8}"
MEASURE_S=${BENCH_SECONDS:-3}
REPS=${BENCH_REPS:-3}
DAEMON_ARGS="${BENCH_DAEMON_ARGS:-}"
PIN=${BENCH_PIN:-1}
VARIANTS="${BENCH_VARIANTS:-plain files fixed polled}"
TWO_PATHS=${BENCH_TWO_PATHS:-0}
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"
    nvme_qemu_args "$img" "$lbs"
    VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-600} VM_MEM=1024M \
        VM_APPEND="nvme_core.multipath=N nvme.poll_queues=${BENCH_POLL_QUEUES:-1}" \
        vm_boot_start -name vmtest,debug-threads=on "${NVME_QEMU_ARGS[@]}"
    # Host CPU per QEMU thread while the guest measures (QEMU_PID is timeout(1); QEMU is
    # its child): shows whether the host's cores, not the paths, are the limit.
    local qpid="" i
    for i in $(seq 50); do
        qpid=$(cat "/proc/$QEMU_PID/task/$QEMU_PID/children" 2>/dev/null | awk '{ print $1 }')
        [ -n "$qpid" ] && break
        sleep 0.1
    done
    [ -n "$qpid" ] && python3 "$VM_DIR/hostcpu.py" "$qpid" 8 >"$LOGDIR/hostcpu.txt" 2>&1 &
    vm_boot_wait
    wait
    [ -s "$LOGDIR/hostcpu.txt" ] && cat "$LOGDIR/hostcpu.txt"
    nvme_collect_logs
    [ -s "$SHARE/bench.raw" ] && cp "$SHARE/bench.raw" "$LOGDIR/bench.raw"
    [ -s "$SHARE/table.out" ] && cp "$SHARE/table.out" "$LOGDIR/table.out"
    nvme_guest_report
    vm_guest_verdict
}
