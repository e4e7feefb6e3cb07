#!/bin/sh
# Guest half of scenario resize (see resize.sh): the disk grows twice while the guest
# runs (resize RPC, then the path checker alone) and a shrink is refused.
. /hostwork/guest-lib.sh

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -b /dev/vda ] || { bad "/dev/vda missing"; exit 1; }

bytes() { echo $(($(cat /sys/block/vda/size) * 512)); }
# wait_size BYTES SECONDS: polls /sys/block/vda/size every 20 ms; prints the seconds waited.
wait_size() {
    t0=$(t)
    while [ "$(bytes)" != "$1" ]; do
        if [ "$(awk -v a="$t0" -v b="$(t)" -v m="$2" 'BEGIN { print (b - a > m) }')" = 1 ]; then
            return 1
        fi
        sleep 0.02
    done
    awk -v a="$t0" -v b="$(t)" 'BEGIN { printf "%.2f\n", b - a }'
}
# ask STEP: ready.STEP, then wait (60 s) for the host's done.STEP; prints the seconds.
ask() {
    touch /hostwork/ready.$1
    t0=$(t)
    i=0
    while [ ! -e /hostwork/done.$1 ] && [ $i -lt 1200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -e /hostwork/done.$1 ] || { bad "step $1: no answer from the host"; exit 1; }
}
# pattern_at MIB: 1 MiB of pattern written there (O_DIRECT + fsync) and read back.
pattern_at() {
    $DD if=/hostwork/pattern.bin of=/dev/vda bs=1M count=1 seek="$1" oflag=direct conv=fsync,notrunc status=none ||
        { bad "write at $1 MiB failed"; return; }
    $DD if=/dev/vda of=/tmp/back bs=1M count=1 skip="$1" iflag=direct status=none ||
        { bad "read at $1 MiB failed"; return; }
    $DD if=/hostwork/pattern.bin of=/tmp/want bs=1M count=1 status=none
    if same /tmp/want /tmp/back; then ok "1 MiB at $1 MiB (the new region) written and read back"; else bad "data at $1 MiB differs"; fi
}

[ "$(bytes)" = $((64 * MiB)) ] && ok "size 64 MiB at boot" || bad "size $(bytes) at boot, want 64 MiB"

ask 1
if w=$(wait_size $((96 * MiB)) 2); then
    ok "step 1 (resize RPC): the guest sees 96 MiB ${w} s after the host's call returned"
    echo "TIME: step 1 size visible ${w} s after resize returned"
    pattern_at 80
else
    bad "step 1: size $(bytes) 2 s after resize, want $((96 * MiB))"
fi

ask 2
if w=$(wait_size $((128 * MiB)) 4); then
    ok "step 2 (path checker): the guest sees 128 MiB ${w} s after the host saw the resize logged"
    pattern_at 120
else
    bad "step 2: size $(bytes) 4 s after the checker's resize, want $((128 * MiB))"
fi

ask 3
sleep 1
[ "$(bytes)" = $((128 * MiB)) ] && ok "step 3: refused shrink, the guest keeps 128 MiB" || bad "step 3: size $(bytes) after a refused shrink"

n=$(dmesg | grep -c 'vda.*new size')
dmesg | grep 'vda.*new size' | sed 's/^/INFO: dmesg: /'
[ "$n" = 2 ] && ok "dmesg has 2 'new size' lines" || bad "dmesg has $n 'new size' lines, want 2"
exit $rc
