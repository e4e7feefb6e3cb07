#!/bin/sh
# Guest half of scenario reconnect (runs under busybox sh from /hostwork; see reconnect.sh).
# Region k (REGION_MIB MiB at offset REGION_OFF_k MiB) holds slice k of pattern.bin.
# Region 0 is written and verified first; then for each round r (mode idle or busy) the
# guest asks the host to restart the backend (file restart-request.r) and the host
# answers with restarted.r once QEMU is connected to the new backend process.
#   idle: no I/O on /dev/vda while the backend is away; afterwards the earlier regions
#         are read back and region r is written and read back.
#   busy: region r is written (1 MiB direct chunks, fsync each) in passes on CPU 0 and
#         region 0 is read back (direct, 1 MiB chunks) on CPU 1 all through the restart;
#         the I/O must stall (longest chunk >= STALL_MIN_S) and then complete correctly.
# Finally every region is read back once more.
. /hostwork/params
. /hostwork/guest-lib.sh
since() { echo "$1 $(t)" | awk '{printf "%.2f", $2 - $1}'; }
# ge A B: A >= B for decimals.
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

off_of() { eval echo "\$REGION_OFF_$1"; }

# wait_file PATH SECONDS: poll (0.1 s) for PATH on the share; 1 on timeout or when
# the host gave up (/hostwork/abort).
wait_file() {
    n=0
    while [ ! -e "$1" ]; do
        [ $n -ge $(($2 * 10)) ] && return 1
        [ -e /hostwork/abort ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}

# write_region K: REGION_MIB MiB of slice K at its offset, O_DIRECT + fsync.
write_region() {
    $DD if=/tmp/exp.$1 of=/dev/vda bs=1M count=$REGION_MIB seek=$(off_of $1) \
        oflag=direct conv=fsync,notrunc status=none
}
# verify_region K WHAT: read back with O_DIRECT (64 KiB requests) and compare.
verify_region() {
    t0=$(t)
    if $DD if=/dev/vda of=/tmp/rb bs=64k count=$((REGION_MIB * 16)) skip=$(($(off_of $1) * 16)) \
        iflag=direct status=none && same /tmp/rb /tmp/exp.$1; then
        ok "$2: region $1 ($REGION_MIB MiB at $(off_of $1) MiB) reads back correctly ($(since $t0) s)"
    else
        bad "$2: region $1 ($REGION_MIB MiB at $(off_of $1) MiB) differs"
    fi
    rm -f /tmp/rb
}

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -b /dev/vda ] || { bad "/dev/vda missing"; exit 1; }
bytes=$(($(cat /sys/block/vda/size) * 512))
if [ "$bytes" = "$DISK_BYTES" ]; then ok "/dev/vda: $bytes bytes"; else bad "/dev/vda: $bytes bytes, want $DISK_BYTES"; fi

# The expected contents of every region, in guest RAM.
k=0
for _ in $MODES x; do
    $DD if=/hostwork/pattern.bin of=/tmp/exp.$k bs=1M count=$REGION_MIB skip=$((k * REGION_MIB)) status=none
    k=$((k + 1))
done

t0=$(t)
if write_region 0; then
    ok "before any restart: direct write of region 0 ($REGION_MIB MiB at $REGION_OFF_0 MiB, $(since $t0) s)"
else
    bad "before any restart: direct write of region 0 failed"
fi
verify_region 0 "before any restart"

# Busy round: chunked writer of region R on CPU 0, until a pass ends after restarted.R.
busy_writer() {
    r=$1 pass=0 n=0
    : >/tmp/wlat.$r
    while :; do
        pass=$((pass + 1))
        c=0
        while [ $c -lt $REGION_MIB ]; do
            c0=$(t)
            if ! $TASKSET -c 0 $DD if=/tmp/exp.$r of=/dev/vda bs=256k count=4 skip=$((c * 4)) \
                seek=$((($(off_of $r) + c) * 4)) oflag=direct conv=fsync,notrunc status=none; then
                echo "write error pass $pass chunk $c" >>/tmp/werr.$r
            fi
            echo "$(since $c0) $pass $c $c0" >>/tmp/wlat.$r
            c=$((c + 1))
            n=$((n + 1))
        done
        [ -e /hostwork/restarted.$r ] && break
        [ -e /hostwork/abort ] && { echo "host gave up: $(cat /hostwork/abort)" >>/tmp/werr.$r; break; }
        [ $pass -ge $BUSY_MAX_PASSES ] && { echo "no restart after $pass passes" >>/tmp/werr.$r; break; }
    done
    echo "$pass" >/tmp/wpasses.$r
}
# Reader of region 0 on CPU 1, chunk by chunk, until the writer is done.
busy_reader() {
    r=$1
    : >/tmp/rlat.$r
    while [ ! -e /tmp/wdone.$r ]; do
        c=0
        while [ $c -lt $REGION_MIB ] && [ ! -e /tmp/wdone.$r ]; do
            c0=$(t)
            if ! $TASKSET -c 1 $DD if=/dev/vda of=/tmp/rchunk bs=256k count=4 skip=$(((REGION_OFF_0 + c) * 4)) \
                iflag=direct status=none; then
                echo "read error chunk $c" >>/tmp/rerr.$r
            elif ! $DD if=/tmp/exp.0 bs=1M count=1 skip=$c status=none | same - /tmp/rchunk >/dev/null; then
                echo "region 0 chunk $c differs" >>/tmp/rerr.$r
            fi
            echo "$(since $c0) $c $c0" >>/tmp/rlat.$r
            c=$((c + 1))
        done
    done
}
maxlat() { sort -rn "$1" | head -n 1; }
# Samples /sys/block/vda/inflight every 0.1 s until the writer is done; keeps the
# longest run of samples with requests in flight (seconds) and the most in flight.
inflight_sampler() {
    r=$1 run=0 longest=0 most=0
    while [ ! -e /tmp/wdone.$r ]; do
        set -- $(cat /sys/block/vda/inflight)
        n=$(($1 + $2))
        if [ $n -gt 0 ]; then run=$((run + 1)); else run=0; fi
        [ $run -gt $longest ] && longest=$run
        [ $n -gt $most ] && most=$n
        sleep 0.1
    done
    echo "$longest $most" >/tmp/infl.$r
}

r=0
for mode in $MODES; do
    r=$((r + 1))
    case $mode in
    idle)
        # Let in-flight work settle so that nothing is queued while the backend restarts.
        sync
        tr0=$(t)
        echo "$tr0" >/hostwork/restart-request.$r
        if ! wait_file /hostwork/restarted.$r $RESTART_WAIT_S; then
            bad "round $r (idle): host did not restart the backend within $RESTART_WAIT_S s ($(cat /hostwork/abort 2>/dev/null))"
            exit 1
        fi
        info "round $r (idle): host restarted the backend ($(cat /hostwork/restarted.$r)); guest waited $(since $tr0) s"
        k=0
        while [ $k -lt $r ]; do
            verify_region $k "round $r (idle), after restart"
            k=$((k + 1))
        done
        t0=$(t)
        if write_region $r; then
            ok "round $r (idle), after restart: direct write of region $r ($(since $t0) s)"
        else
            bad "round $r (idle), after restart: direct write of region $r failed"
        fi
        verify_region $r "round $r (idle), after restart"
        ;;
    busy)
        rm -f /tmp/wdone.$r /tmp/werr.$r /tmp/rerr.$r
        tr0=$(t)
        (
            busy_writer $r
            touch /tmp/wdone.$r
        ) &
        wp=$!
        busy_reader $r &
        rp=$!
        inflight_sampler $r &
        ip=$!
        # Ask for the restart once the writer has completed a chunk: I/O is flowing.
        i=0
        while [ ! -s /tmp/wlat.$r ] && [ $i -lt 300 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        echo "$(t)" >/hostwork/restart-request.$r
        info "round $r (busy): restart requested with I/O running ($(wc -l </tmp/wlat.$r) chunks written so far)"
        wait $wp
        wait $rp
        wait $ip
        set -- $(cat /tmp/infl.$r)
        infl="requests in flight for up to ~$(($1 / 10)).$(($1 % 10)) s in a row (0.1 s samples), at most $2 at once"
        passes=$(cat /tmp/wpasses.$r 2>/dev/null)
        chunks=$(wc -l </tmp/wlat.$r)
        rchunks=$(wc -l </tmp/rlat.$r)
        wmax=$(maxlat /tmp/wlat.$r)
        rmax=$(maxlat /tmp/rlat.$r)
        if [ -e /hostwork/restarted.$r ]; then
            info "round $r (busy): host restarted the backend ($(cat /hostwork/restarted.$r))"
        else
            bad "round $r (busy): host never reported the restart"
        fi
        info "round $r (busy): writer $chunks x 1 MiB chunks in $passes passes, longest chunk ${wmax%% *} s (pass/chunk/start: ${wmax#* });" \
            "reader $rchunks chunks, longest ${rmax%% *} s; $infl; $(since $tr0) s in all"
        if [ -s /tmp/werr.$r ]; then
            bad "round $r (busy): writer: $(head -n 3 /tmp/werr.$r | tr '\n' ';')"
        else
            ok "round $r (busy): every direct write chunk completed without error across the restart"
        fi
        if [ -s /tmp/rerr.$r ]; then
            bad "round $r (busy): reader of region 0: $(head -n 3 /tmp/rerr.$r | tr '\n' ';')"
        else
            ok "round $r (busy): every direct read chunk of region 0 matched across the restart"
        fi
        if ge "${wmax%% *}" "$STALL_MIN_S"; then
            ok "round $r (busy): I/O stalled while the backend was away (longest write chunk ${wmax%% *} s >= $STALL_MIN_S s) and resumed"
        else
            bad "round $r (busy): no write chunk took >= $STALL_MIN_S s: the restart did not happen under I/O"
        fi
        k=0
        while [ $k -le $r ]; do
            verify_region $k "round $r (busy), after restart"
            k=$((k + 1))
        done
        ;;
    *)
        bad "unknown mode $mode"
        ;;
    esac
done

k=0
for _ in $MODES x; do
    verify_region $k "final"
    k=$((k + 1))
done
exit $rc
