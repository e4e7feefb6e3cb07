#!/bin/sh
# Guest half of scenario vhost-blk (runs under busybox sh from /hostwork; see vhost-blk.sh).
# GNU dd comes from the host's /usr through the 9p share.
. /hostwork/params
. /hostwork/guest-lib.sh

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
if [ ! -b /dev/vda ]; then
    bad "/dev/vda missing (block devices: $(ls /sys/block | tr '\n' ' '))"
    exit 1
fi
ok "/dev/vda present"

bytes=$(($(cat /sys/block/vda/size) * 512))
if [ "$bytes" = "$DISK_BYTES" ]; then ok "size $bytes bytes"; else bad "size $bytes bytes, want $DISK_BYTES"; fi
nq=$(ls /sys/block/vda/mq | wc -l)
if [ "$nq" = "$QUEUES" ]; then ok "$nq blk-mq queues"; else bad "$nq blk-mq queues, want $QUEUES"; fi
if [ "$(cat /sys/block/vda/ro)" = 0 ]; then ok "writable"; else bad "read-only"; fi
q=/sys/block/vda/queue
info "serial='$(cat /sys/block/vda/serial 2>/dev/null)' lbs=$(cat $q/logical_block_size) pbs=$(cat $q/physical_block_size)" \
    "max_hw_kb=$(cat $q/max_hw_sectors_kb) max_segs=$(cat $q/max_segments) cache=$(cat $q/write_cache)" \
    "discard_max=$(cat $q/discard_max_hw_bytes) wz_max=$(cat $q/write_zeroes_max_bytes)"

# Completion interrupts per virtqueue (MSI-X vectors "virtioN-req.Q" in /proc/interrupts).
vq_irqs() {
    awk -v q="req.$1" '$NF ~ /^virtio[0-9]+-req\.[0-9]+$/ && substr($NF, index($NF, "-") + 1) == q {
        for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i } END { print n + 0 }' /proc/interrupts
}
irq0_before=$(vq_irqs 0)
irq1_before=$(vq_irqs 1)

# Write: 16 MiB pattern at OFF_MIB as two halves in parallel, one per CPU (CPU n -> hctx n).
half=$((PAT_MIB / 2))
t0=$(t)
$TASKSET -c 0 $DD if=/hostwork/pattern.bin of=/dev/vda bs=1M count=$half seek=$OFF_MIB \
    oflag=direct conv=fsync,notrunc status=none &
p0=$!
$TASKSET -c 1 $DD if=/hostwork/pattern.bin of=/dev/vda bs=1M count=$half skip=$half seek=$((OFF_MIB + half)) \
    oflag=direct conv=fsync,notrunc status=none &
p1=$!
wait $p0
r0=$?
wait $p1
r1=$?
if [ $r0 = 0 ] && [ $r1 = 0 ]; then
    ok "direct write of $PAT_MIB MiB at $OFF_MIB MiB ($(echo "$t0 $(t)" | awk '{printf "%.2f", $2 - $1}') s)"
else
    bad "direct write failed (rc $r0 / $r1)"
fi
# Last MiB(s) of the disk: the first TAIL_MIB of the pattern.
if $DD if=/hostwork/pattern.bin of=/dev/vda bs=1M count=$TAIL_MIB seek=$TAIL_OFF_MIB \
    oflag=direct conv=fsync,notrunc status=none; then
    ok "direct write of $TAIL_MIB MiB at $TAIL_OFF_MIB MiB (end of disk)"
else
    bad "direct write at end of disk failed"
fi
# Writing past the end must fail.
if $DD if=/hostwork/pattern.bin of=/dev/vda bs=1M count=1 seek=$((DISK_BYTES / MiB)) \
    oflag=direct conv=notrunc status=none 2>/dev/null; then
    bad "write past the end of the disk succeeded"
else
    ok "write past the end of the disk refused"
fi

# Read back with O_DIRECT in 64 KiB requests, again split across both CPUs.
t0=$(t)
$TASKSET -c 0 $DD if=/dev/vda of=/tmp/rb0 bs=64k count=$((half * 16)) skip=$((OFF_MIB * 16)) \
    iflag=direct status=none &
p0=$!
$TASKSET -c 1 $DD if=/dev/vda of=/tmp/rb1 bs=64k count=$((half * 16)) skip=$(((OFF_MIB + half) * 16)) \
    iflag=direct status=none &
p1=$!
wait $p0
r0=$?
wait $p1
r1=$?
cat /tmp/rb0 /tmp/rb1 >/tmp/readback
if [ $r0 = 0 ] && [ $r1 = 0 ] && same /tmp/readback /hostwork/pattern.bin; then
    ok "direct read-back of $PAT_MIB MiB matches ($(echo "$t0 $(t)" | awk '{printf "%.2f", $2 - $1}') s)"
else
    bad "direct read-back differs from the pattern (rc $r0 / $r1)"
fi
$DD if=/dev/vda of=/tmp/tail bs=1M count=$TAIL_MIB skip=$TAIL_OFF_MIB iflag=direct status=none
if same -n $((TAIL_MIB * MiB)) /tmp/tail /hostwork/pattern.bin; then
    ok "direct read-back of the last $TAIL_MIB MiB matches"
else
    bad "last $TAIL_MIB MiB differ from the pattern"
fi
# A region never written reads as zeros.
$DD if=/dev/vda of=/tmp/zero bs=1M count=$OFF_MIB iflag=direct status=none
if same -n $((OFF_MIB * MiB)) /tmp/zero /dev/zero; then
    ok "unwritten first $OFF_MIB MiB read as zeros"
else
    bad "unwritten first $OFF_MIB MiB not zero"
fi

# Both virtqueues carried requests: each one's completion interrupt fired.
irq0=$(($(vq_irqs 0) - irq0_before))
irq1=$(($(vq_irqs 1) - irq1_before))
if [ "$irq0" -gt 0 ] && [ "$irq1" -gt 0 ]; then
    ok "completions on both virtqueues (interrupts: req.0 +$irq0, req.1 +$irq1)"
else
    bad "completions not on both virtqueues (interrupts: req.0 +$irq0, req.1 +$irq1)"
    grep virtio /proc/interrupts
fi
exit $rc
