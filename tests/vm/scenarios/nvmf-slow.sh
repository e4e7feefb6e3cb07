# Scenario nvmf-slow (sourced by tests/vm/run): policies on two NVMe/TCP paths, one of
# them 30 ms slower (the seed's adaptive experiment, REFERENCE.md §4).
#
# Guest only (no emulated NVMe): an nvmet target in network namespace tgt on a brd RAM
# disk (NVMF_NS_MIB, default 64 MiB), reached over two veth pairs on two subnets
# (a: 10.0.1.2, b: 10.0.2.2), connected twice through /dev/nvme-fabrics
# (nvme_core.multipath=N: one ng node per controller). `tc qdisc add dev h2 root netem
# delay 30ms` slows path b (SLOW_DELAY_MS); path a gets a LAN-like 2 ms
# (SLOW_FAST_DELAY_MS, 0 = none) so that both paths are bound by latency, not by the TCG
# guest's CPU, whose speed on a shared 2-core host swings several-fold within seconds
# (without it the fast path saturates at QD 4-8 and the CPU, not the policy, decides).
# The daemon (`--num-queues 1`, paths `a,weight=4` and `b,weight=1`, `--rpc-socket`)
# serves vhost-load (tests/src/bin/vhost-load.rs): first SLOW_PREWARM (3) s of load
# under round-robin (TCP windows and the target settle), then per policy
# (SLOW_POLICIES) it switches over JSON-RPC (set_policy), warms up (SLOW_WARMUP s:
# adaptive and auto learn), resets the statistics, measures 4k random reads with
# SLOW_QD (16) in flight for SLOW_SECONDS s and reads the per-path split back
# (get_stats); SLOW_ROUNDS (10) rounds interleave the policies so that drift hits all
# alike. Prints the seed-style table (policy, IOPS, MiB/s, median round, mean / p99 /
# stddev latency, split) and checks the ordering on paired rounds: for each pair, the
# median over rounds of A's IOPS / B's IOPS in the same round (a TCG guest's speed
# swings within seconds; rounds a few seconds apart see the same machine).
# queue-depth above round-robin, auto above queue-depth and adaptive above round-robin,
# each by more than SLOW_MARGIN_PCT (5) percent; adaptive sends at most 25% of its I/O
# down the slow path; adaptive not below queue-depth by more than
# SLOW_ADAPTIVE_TIE_PCT (10) percent: weighting by 1/latency keeps as many requests on
# each path as queue-depth does (Little's law), so the two tie in steady state and the
# lead (printed) is noise-sized. ~120 s.
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local t0
    t0=$(now)
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvmf-slow.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
NS_MIB=${NVMF_NS_MIB:-64}
DELAY_MS=${SLOW_DELAY_MS:-30}
FAST_DELAY_MS=${SLOW_FAST_DELAY_MS:-2}
POLICIES=${SLOW_POLICIES:-round-robin,queue-depth,service-time,adaptive,auto}
BS_KIB=${SLOW_BS_KIB:-4}
QD=${SLOW_QD:-16}
MEASURE_S=${SLOW_SECONDS:-1}
WARMUP=${SLOW_WARMUP:-1}
PREWARM=${SLOW_PREWARM:-3}
ROUNDS=${SLOW_ROUNDS:-10}
MARGIN_PCT=${SLOW_MARGIN_PCT:-5}
ADAPTIVE_TIE_PCT=${SLOW_ADAPTIVE_TIE_PCT:-10}
LOAD_TIMEOUT=240
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"
    VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-300} VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" vm_boot
    nvme_collect_logs
    [ -s "$SHARE/load.out" ] && cp "$SHARE/load.out" "$LOGDIR/load.out"
    nvme_guest_report
    vm_guest_verdict
}
