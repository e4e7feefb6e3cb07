#!/bin/sh
# Guest half of scenario qos (see qos.sh): fio on /dev/vda (O_DIRECT, libaio) under the
# daemon's QoS limits; the host changes them between steps (ready.N -> done.N).
. /hostwork/guest-lib.sh

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -b /dev/vda ] || { bad "/dev/vda missing"; exit 1; }

# ask STEP: ready.STEP, then wait (60 s) for the host's done.STEP (it set the limits).
ask() {
    touch /hostwork/ready.$1
    i=0
    while [ ! -e /hostwork/done.$1 ] && [ $i -lt 1200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -e /hostwork/done.$1 ] || { bad "step $1: no answer from the host"; exit 1; }
}

# rate RW BS QD SECONDS [RAMP]: fio's terse (v3) line -> "IOPS BYTES_PER_S" of the
# measured part (after the ramp). Fields: read io KiB 6, runtime ms 9; write 47, 50.
rate() {
    /usr/bin/fio --name=q --filename=/dev/vda --direct=1 --ioengine=libaio --size=48M \
        --rw="$1" --bs="$2" --iodepth="$3" --runtime="$4" --ramp_time="${5:-0}" --time_based \
        --minimal 2>/tmp/fio.err | tail -n 1 | awk -F';' -v bs="$2" '
        function num(s) { return s ~ /k$/ ? s * 1024 : s }
        { kb = $6 + $47; ms = $9 > $50 ? $9 : $50
          if (ms > 0) printf "%.1f %.0f\n", kb * 1024 / num(bs) * 1000 / ms, kb * 1024 * 1000 / ms }'
}

# within5 WHAT GOT LIMIT UNIT
within5() {
    if awk -v g="$2" -v l="$3" 'BEGIN { d = g - l; exit !(d <= l * 0.05 && -d <= l * 0.05) }'; then
        ok "$1: $2 $4 (limit $3, $(awk -v g="$2" -v l="$3" 'BEGIN { printf "%+.1f%%", (g / l - 1) * 100 }'))"
    else
        bad "$1: $2 $4, not within 5% of the limit $3"
    fi
}

# a) total_iops_sec=500 (the daemon's --qos). The first second is fio's ramp: the bucket
# starts empty and lets a tenth of a second's worth through at once.
set -- $(rate randread 4k 16 10 1)
within5 "a) 4k randread QD16, 10 s, total_iops_sec=500" "${1:-0}" 500 IOPS
set -- $(rate randwrite 4k 16 10 1)
within5 "a) 4k randwrite QD16, 10 s, total_iops_sec=500" "${1:-0}" 500 IOPS

# b) total_bytes_sec=8000000
ask 2
set -- $(rate read 64k 8 10 1)
within5 "b) 64k read QD8, 10 s, total_bytes_sec=8000000" "${2:-0}" 8000000 B/s
set -- $(rate write 64k 8 10 1)
within5 "b) 64k write QD8, 10 s, total_bytes_sec=8000000" "${2:-0}" 8000000 B/s

# c) burst from idle: total_iops_sec=200, _max=1000, _max_length=2. QEMU's bucket
# (size max * max_length = 2000 ops) keeps leaking at 200/s while the burst fills it at
# 1000/s, so the burst lasts 2 * 1000 / 800 = 2.5 s; then 200/s. The first second may
# reach 1100: the bucket that holds the burst to 1000/s starts empty too and lets its
# tenth of a second (100) through at once.
ask 3
rm -f /tmp/burst_iops.*
/usr/bin/fio --name=burst --filename=/dev/vda --direct=1 --ioengine=libaio --size=48M \
    --rw=randread --bs=4k --iodepth=16 --runtime=7 --time_based --minimal \
    --write_iops_log=/tmp/burst --log_avg_msec=1000 >/dev/null 2>/tmp/fio.err
prof=$(awk -F', *' '$3 == 0 { printf "%s ", $2 }' /tmp/burst_iops.1.log 2>/dev/null)
info "c) burst profile, IOPS per second: $prof"
set -- $prof
if [ $# -ge 6 ]; then
    first=$1
    shift $(($# - 3))
    last=$(echo "$1 $2 $3" | awk '{ printf "%.1f", ($1 + $2 + $3) / 3 }')
    awk -v f="$first" 'BEGIN { exit !(f >= 600 && f <= 1155) }' &&
        ok "c) first second $first IOPS: the burst (limit 200, max 1000)" ||
        bad "c) first second $first IOPS, want 600..1155 (a burst at max 1000 + its first 100, over the limit 200)"
    within5 "c) last 3 s after the burst (seconds 5-7)" "$last" 200 IOPS
else
    bad "c) fio's IOPS log has $# samples: $(head -c 300 /tmp/fio.err)"
fi

# d) runtime change: the host watches the daemon's counters while this runs at 50 IOPS,
# calls set_qos total_iops_sec=500 and checks the speed-up (see qos.sh).
ask 4
set -- $(rate randread 4k 16 6)
info "d) 4k randread QD16 over 6 s across the change 50 -> 500 IOPS: ${1:-?} IOPS"

# e) no limits: the guest must be able to exceed every limit above, or they proved nothing.
ask 5
set -- $(rate randread 4k 16 3)
awk -v g="${1:-0}" 'BEGIN { exit !(g >= 1200) }' &&
    ok "e) no limit: 4k randread QD16 $1 IOPS (over the 1000 of the burst)" ||
    bad "e) no limit: 4k randread QD16 ${1:-0} IOPS, under 1200: the guest cannot test the limits"
set -- $(rate read 64k 8 3)
awk -v g="${2:-0}" 'BEGIN { exit !(g >= 12000000) }' &&
    ok "e) no limit: 64k read QD8 $2 B/s (over 8000000)" ||
    bad "e) no limit: 64k read QD8 ${2:-0} B/s, under 12000000: the guest cannot test the limit"
exit $rc
