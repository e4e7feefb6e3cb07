# Scenario nvme-verify (sourced by tests/vm/run): the daemon on two real NVMe paths.
#
# QEMU: two NVMe controllers (ctrl0 at 0000:01:00.0, ctrl1 at 0000:02:00.0) of one
# subsystem sharing namespace 1 (NVME_NS_MIB, default 256 MiB, NVME_LBA-byte blocks,
# default 4096) plus a shared namespace 2 of the same size; guest kernel booted with
# nvme_core.multipath=N.
# Guest (nvme-verify.guest.sh): finds the ng node of each controller by PCI address;
# checks that the daemon refuses a controller node, an unprivileged open and a path to
# namespace 2, each with a clear message; then for every policy (NVME_POLICIES, default
# all) starts
# `vhost-mpath --num-queues 2 --policy P --path NG_A,name=a --path NG_B,name=b` and runs
# vhost-verify (blkio client, 2 queues): capacity and block size equal the namespace's,
# an 8 MiB pattern written, flushed, read back and compared (the first policy at the end
# of the namespace, with write-zeroes and discard too); round-robin, queue-depth and
# service-time must send I/O down both controllers (per-controller I/O queue interrupts);
# the daemon exits 0 on SIGTERM; NVMe reads and writes went with io_uring fixed buffers
# (the daemon's per-connection counters; NVME_DAEMON_ARGS adds daemon flags, and with
# `--fixed-buffers false` in them the counters are only reported).
# Host: the namespace image holds each policy's pattern at its region.
# shellcheck shell=bash

# shellcheck source=../nvme-lib.sh
. "$VM_DIR/nvme-lib.sh"

scenario_main() {
    local ns_mib=${NVME_NS_MIB:-256} lbs=${NVME_LBA:-4096} region_mib=8
    local img=$RUN/ns1.img img2=$RUN/ns2.img t0
    local policies=${NVME_POLICIES:-round-robin queue-depth service-time adaptive numa active-standby auto}

    t0=$(now)
    truncate -s "${ns_mib}M" "$img"
    # Same size as namespace 1: only the namespace identity tells them apart.
    truncate -s "${ns_mib}M" "$img2"
    nvme_prepare_bins || return 1
    cp "$VM_DIR/scenarios/nvme-verify.guest.sh" "$SHARE/guest.sh"
    cat >"$SHARE/params" <<EOF
PCI_A=$NVME_PCI_A
PCI_B=$NVME_PCI_B
PCI_NS2=$NVME_PCI_B
NS_BYTES=$((ns_mib << 20))
LBA=$lbs
REGION_MIB=$region_mib
REQ_KIB=${NVME_REQ_KIB:-64}
QD=16
POLICIES="$policies"
DAEMON_ARGS="${NVME_DAEMON_ARGS:-}"
FIXED_BUFFERS=$(case "${NVME_DAEMON_ARGS:-}" in *"--fixed-buffers false"* | *"--fixed-buffers=false"*) echo 0 ;; *) echo 1 ;; esac)
EOF
    echo "TIME: prepare: $(elapsed "$t0") s"

    nvme_qemu_args "$img" "$lbs" "$img2"
    VM_MEM=1024M VM_APPEND="nvme_core.multipath=N" vm_boot "${NVME_QEMU_ARGS[@]}"
    nvme_collect_logs
    nvme_guest_report
    vm_guest_verdict

    # The data is on the namespace: 64 KiB of each policy's region, past the blocks the
    # first policy zeroed, equal the client's pattern (splitmix64 per 8-byte word).
    if [ -s "$SHARE/regions" ]; then
        if python3 - "$img" "$SHARE/regions" <<'PY'; then
import struct, sys
M = (1 << 64) - 1
def word(seed, idx):
    z = ((seed * 0x9E3779B97F4A7C15) + idx + 0x632BE59BD9B4E019) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
bad = 0
with open(sys.argv[1], "rb") as img:
    for line in open(sys.argv[2]):
        policy, off_mib, seed = line.split()
        off = (int(off_mib) << 20) + (256 << 10)
        img.seek(off)
        got = img.read(64 << 10)
        want = b"".join(struct.pack("<Q", word(int(seed), off // 8 + i)) for i in range(len(got) // 8))
        if got != want:
            print(f"FAIL: image at {off} does not hold the {policy} pattern")
            bad = 1
sys.exit(bad)
PY
            pass "namespace image holds every policy's pattern ($(wc -l <"$SHARE/regions") regions)"
        else
            fail "namespace image does not hold the written patterns"
        fi
    else
        fail "guest recorded no verified regions"
    fi
}
