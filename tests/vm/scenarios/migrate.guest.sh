#!/bin/sh
# Guest half of scenario migrate (busybox sh, run by /mig/init from the initramfs: no 9p
# share is mounted, so nothing blocks migration; see migrate.sh). Everything it needs
# (fio and its libraries, GNU dd) came with the extra initramfs; results go to the
# console only (PASS/FAIL/INFO lines, then VMTEST-RC from /mig/init).
#
# Layout of /dev/vda (params): region W (randwrite + verify as it goes, fio
# --verify=crc32c --verify_backlog), region R (written once, then read back and verified
# in passes with direct reads at QD 16, and through the page cache alongside), region H
# (held-reads: read into buffers held for several rounds and verified again), and
# the mailbox (last 4 KiB): the host writes MIGRATE-STOP there after its last migration.
# The load runs in passes until the mailbox says stop, then everything is verified once
# more on the final host.
. /mig/params
. /mig/guest-lib.sh
FIO=/usr/bin/fio

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -b /dev/vda ] || { bad "/dev/vda missing"; exit 1; }
bytes=$(($(cat /sys/block/vda/size) * 512))
if [ "$bytes" = "$DISK_BYTES" ]; then ok "/dev/vda: $bytes bytes"; else bad "/dev/vda: $bytes bytes, want $DISK_BYTES"; fi
if $FIO --version >/dev/null 2>&1; then
    info "fio $($FIO --version) runs from the initramfs"
else
    bad "fio does not run in the guest: $($FIO --version 2>&1 | head -n 3 | tr '\n' ' ')"
    ls -la /usr /usr/bin /usr/lib64 /lib64 2>&1 | head -n 20 | sed 's/^/INFO: /'
    exit 1
fi

mailbox() {
    $DD if=/dev/vda bs=4096 count=1 skip=$((MAILBOX_OFF / 4096)) iflag=direct status=none 2>/dev/null |
        tr -d '\000' | head -c 32
}

# Common fio options: errors and mismatches end the job with a non-zero status and a
# message on the console.
common="--eta=never --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --group_reporting"

# Region R: written once (sequential 64 KiB), verified by every pass below.
t0=$(t)
if $FIO --name=r-fill --filename=/dev/vda --offset=$R_OFF --size=$R_SIZE --rw=write --bs=64k \
    --iodepth=8 $common --do_verify=0 --output=/tmp/fill.out; then
    ok "region R ($((R_SIZE / MiB)) MiB at $((R_OFF / MiB)) MiB) written ($(echo "$t0 $(t)" | awk '{printf "%.1f", $2 - $1}') s)"
else
    bad "region R fill failed: $(tail -n 5 /tmp/fill.out | tr '\n' ' ')"
    exit 1
fi

# One pass, two jobs at once: region W slice (pass-dependent) random writes verified as
# they go, and region R read back with direct reads at QD 16.
run_pass() {
    p=$1
    woff=$((W_OFF + (p % W_SLICES) * W_SLICE))
    $FIO --output=/tmp/pass.out $common \
        --name=w --filename=/dev/vda --offset=$woff --size=$W_SLICE --rw=randwrite --bs=4k \
        --iodepth=16 --verify_backlog=64 --randseed=$p \
        --name=r --filename=/dev/vda --offset=$R_OFF --size=$R_SIZE --rw=write --bs=64k \
        --iodepth=16 --verify_only=1 2>/tmp/pass.err
    frc=$?
    if [ $frc != 0 ]; then
        # fio's mismatch reports go to stderr, its summary (err=84: EILSEQ, a verify
        # failure) to --output: kept apart, or one overwrites the other.
        pass_failed "pass $p: fio rc $frc: $(grep -hiE 'verify|error|bad|crc' /tmp/pass.err /tmp/pass.out | head -n 6 | tr '\n' ' ')"
        cat /tmp/pass.err /tmp/pass.out >>/tmp/errors.full
    fi
}

# LOAD=wide (the issue-44 report's load, VMTEST_MIGRATE_LOAD=wide): io_uring random
# writes of 4-64 KiB at QD 16 by two jobs, each over its own 64 MiB of region X, every
# block verified (crc32c) at the end of the pass; the seed is the pass number, so the
# final check knows what the last pass wrote.
wide_pass() {
    p=$1
    $FIO --output=/tmp/pass.out --eta=never --group_reporting --name=x --filename=/dev/vda \
        --ioengine=io_uring --direct=1 --rw=randwrite --bsrange=4k-64k --iodepth=16 \
        --numjobs=2 --offset=$X_OFF --offset_increment=$X_JOB --size=$X_JOB --randseed=$p \
        --verify=crc32c --verify_fatal=1 2>/tmp/pass.err
    frc=$?
    if [ $frc != 0 ]; then
        pass_failed "pass $p (wide): fio rc $frc: $(grep -hiE 'verify|error|bad|crc' /tmp/pass.err /tmp/pass.out | head -n 6 | tr '\n' ' ')"
        cat /tmp/pass.err /tmp/pass.out >>/tmp/errors.full
    fi
}

pass_failed() {
    echo "$1" >>/tmp/errors
    # At once on the console too: the host sees it even if the guest dies later.
    echo "MIGRATE-PASS-FAIL $1"
}

# Alongside: region R through the page cache. Each round drops the cache, reads R
# once (the device DMAs it into page-cache pages), then verifies it from the cache
# CACHE_VERIFIES times without reading the disk again: pages the device filled while
# a migration was copying memory must reach the destination with that data, or a
# later verify there sees what the page held before.
cache_loop() {
    k=0
    while [ ! -e /tmp/stop-cache ]; do
        echo 1 >/proc/sys/vm/drop_caches
        $DD if=/dev/vda of=/dev/null bs=1M skip=$((R_OFF / MiB)) count=$((R_SIZE / MiB)) status=none
        v=0
        while [ $v -lt $CACHE_VERIFIES ] && [ ! -e /tmp/stop-cache ]; do
            $FIO --output=/tmp/cache.out --eta=never --name=rc --filename=/dev/vda --offset=$R_OFF --size=$R_SIZE \
                --rw=write --bs=64k --ioengine=psync --direct=0 --invalidate=0 --verify=crc32c \
                --verify_fatal=1 --verify_only=1 2>/tmp/cache.err ||
                pass_failed "page-cache round $k verify $v: $(grep -hiE 'verify|error|bad|crc|offset|expected' /tmp/cache.err /tmp/cache.out | head -n 4 | tr '\n' ' ')"
            v=$((v + 1))
        done
        k=$((k + 1))
    done
    echo "$k" >/tmp/cache-rounds
}

# Alongside too: held-reads keeps what it read in H_BUFFERS buffers for as many rounds
# and verifies them again (it prints HELD-STALE on the console at once).
held_loop() {
    /usr/bin/held-reads --dev /dev/vda --offset $H_OFF --size $H_SIZE --buffers $H_BUFFERS \
        --stop-file /tmp/stop-cache
    echo $? >/tmp/held-rc
}

# CPU_LOAD=1 (VMTEST_MIGRATE_CPU_LOAD): the guest's CPU rewrites 32 MiB of tmpfs again
# and again beside the disk load, so the migration has pages that only the CPU writes
# (what QEMU 7.2's TCG dirty tracking loses with a RAM size a multiple of 256 KiB).
# With 2 vCPUs the writer has the second to itself (the disk load keeps to the first):
# no context switch flushes that vCPU's TLB, which is where QEMU 7.2 loses the writes.
if [ "${CPU_LOAD:-0}" = 1 ]; then
    pin=""
    if [ "$(grep -c ^processor /proc/cpuinfo)" -gt 1 ]; then
        $TASKSET -p 1 $$ >/dev/null
        pin="$TASKSET 2"
    fi
    $pin sh -c 'while [ ! -e /tmp/stop-cache ]; do
        '"$DD"' if=/dev/zero of=/tmp/cpu-load bs=1M count=32 conv=notrunc status=none
    done' &
fi
echo "MIGRATE-LOAD-RUNNING"
rm -f /tmp/stop-cache
cache_loop &
cpid=$!
held_loop &
hpid=$!
passes=0
t0=$(t)
while :; do
    if [ "$LOAD" = wide ]; then wide_pass $passes; else run_pass $passes; fi
    passes=$((passes + 1))
    m=$(mailbox)
    case "$m" in
    MIGRATE-STOP*) break ;;
    esac
    if [ "$(echo "$t0 $(t)" | awk '{print int($2 - $1)}')" -ge "$LOAD_MAX_S" ]; then
        bad "no MIGRATE-STOP from the host within $LOAD_MAX_S s of load"
        break
    fi
    echo "MIGRATE-PASS $passes"
done
touch /tmp/stop-cache
wait $cpid
wait $hpid
case "$(cat /tmp/held-rc)" in
0) ok "held reads: every buffer held across the migrations verified" ;;
1) bad "held reads: read data held in guest memory was wrong after a switch-over (HELD-STALE lines)" ;;
*) bad "held reads: held-reads failed (rc $(cat /tmp/held-rc), HELD-ERROR line)" ;;
esac
info "page cache: $(cat /tmp/cache-rounds) rounds of read once + verify $CACHE_VERIFIES times from the cache"
info "load: $passes passes in $(echo "$t0 $(t)" | awk '{printf "%.1f", $2 - $1}') s"

if [ -s /tmp/errors ]; then
    bad "load: $(wc -l </tmp/errors) pass(es) with I/O errors or verify mismatches: $(head -n 3 /tmp/errors | tr '\n' ';')"
    # fio's own words on each mismatch first (EILSEQ, err=84, is its verify failure).
    grep -ihE 'verify|bad |crc|expected|received|offset' /tmp/errors.full | head -n 20 | sed 's/^/INFO: fio mismatch: /'
    head -n 60 /tmp/errors.full | sed 's/^/INFO: fio: /'
else
    ok "load: $passes passes of writes and reads, every block verified (crc32c), 0 errors, 0 mismatches"
fi

# After the last migration: region W slice by slice as its last pass wrote it (pass p
# wrote slice p % W_SLICES with seed p), and region R, verified once more.
vrc=0
p=$((passes - 1))
n=0
if [ "$LOAD" = wide ]; then
    # Region X as the last pass wrote it (its seed); region W was never written.
    n=$W_SLICES
    $FIO --output=/tmp/final.out --eta=never --group_reporting --name=xv --filename=/dev/vda \
        --ioengine=io_uring --direct=1 --rw=randwrite --bsrange=4k-64k --iodepth=16 \
        --numjobs=2 --offset=$X_OFF --offset_increment=$X_JOB --size=$X_JOB --randseed=$p \
        --verify=crc32c --verify_fatal=1 --verify_only=1 || {
        vrc=1
        echo "region X (pass $p): $(grep -hiE 'verify|error|bad|crc' /tmp/final.out | head -n 3 | tr '\n' ' ')" >>/tmp/final-errors
    }
fi
while [ $p -ge 0 ] && [ $n -lt $W_SLICES ]; do
    woff=$((W_OFF + (p % W_SLICES) * W_SLICE))
    $FIO --output=/tmp/final.out $common --name=wv --filename=/dev/vda --offset=$woff --size=$W_SLICE \
        --rw=randwrite --bs=4k --iodepth=16 --randseed=$p --verify_only=1 || {
        vrc=1
        echo "slice $((p % W_SLICES)) (pass $p): $(grep -hiE 'verify|error|bad|crc' /tmp/final.out | head -n 3 | tr '\n' ' ')" >>/tmp/final-errors
    }
    p=$((p - 1))
    n=$((n + 1))
done
$FIO --output=/tmp/final.out $common --name=rv --filename=/dev/vda --offset=$R_OFF --size=$R_SIZE \
    --rw=write --bs=64k --iodepth=16 --verify_only=1 || {
    vrc=1
    echo "region R: $(grep -hiE 'verify|error|bad|crc' /tmp/final.out | head -n 3 | tr '\n' ' ')" >>/tmp/final-errors
}
if [ $vrc = 0 ]; then
    ok "final: region R and the last write of each region $([ "$LOAD" = wide ] && echo X || echo W) slice verify on the final host"
else
    bad "final verification: $(head -n 3 /tmp/final-errors | tr '\n' ';')"
fi
if dmesg | grep -iE 'blk_update_request|I/O error|virtio.*(error|broken)|Buffer I/O' >/tmp/kerr; then
    bad "guest kernel log: $(head -n 3 /tmp/kerr | tr '\n' ';')"
else
    ok "guest kernel log: no I/O or virtio errors"
fi
exit $rc
