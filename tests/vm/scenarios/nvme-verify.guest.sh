#!/bin/sh
# Guest half of scenario nvme-verify (see nvme-verify.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

A=$(wait_ng "$PCI_A") || {
    bad "no /dev/ng node for namespace 1 on $PCI_A (nodes: $(ls /dev/ng* 2>/dev/null | tr '\n' ' '))"
    exit 1
}
B=$(wait_ng "$PCI_B") || {
    bad "no /dev/ng node for namespace 1 on $PCI_B (nodes: $(ls /dev/ng* 2>/dev/null | tr '\n' ' '))"
    exit 1
}
CA=$(ctrl_of "$PCI_A")
CB=$(ctrl_of "$PCI_B")
ok "per-controller nodes of namespace 1: $A ($CA, $PCI_A) and $B ($CB, $PCI_B)"

blk=nvme${A#/dev/ng}
kbytes=$(($(cat /sys/block/$blk/size) * 512))
klbs=$(cat /sys/block/$blk/queue/logical_block_size)
info "kernel: $blk $kbytes bytes, lbs $klbs, max_hw_sectors_kb $(cat /sys/block/$blk/queue/max_hw_sectors_kb)," \
    "max_segments $(cat /sys/block/$blk/queue/max_segments), multipath=$(cat /sys/module/nvme_core/parameters/multipath)"
if [ "$kbytes" = "$NS_BYTES" ] && [ "$klbs" = "$LBA" ]; then
    ok "namespace is $NS_BYTES bytes in $LBA-byte blocks (kernel view)"
else
    bad "namespace is $kbytes bytes in $klbs-byte blocks, want $NS_BYTES in $LBA"
fi

# Refusals with a clear message, before any I/O.
expect_refusal() {
    what=$1
    pattern=$2
    shift 2
    out=$("$BIN/vhost-mpath" --socket-path /tmp/refused.sock "$@" 2>&1 </dev/null)
    code=$?
    if [ $code != 0 ] && echo "$out" | grep -q "$pattern"; then
        ok "$what refused (exit $code): $(echo "$out" | grep "$pattern" | tail -n 1 | cut -c1-300)"
    else
        bad "$what: exit $code, output: $(echo "$out" | tail -n 3)"
    fi
}
expect_refusal "controller node /dev/$CA" "controller node" --path "/dev/$CA,name=a"
if [ -x /usr/bin/setpriv ]; then
    # An unprivileged daemon: the namespace node is root's (0600).
    out=$(/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$BIN/vhost-mpath" --socket-path /tmp/refused.sock --path "$A,name=a" 2>&1 </dev/null)
    code=$?
    if [ $code != 0 ] && echo "$out" | grep -q "permission denied.*CAP_SYS_ADMIN"; then
        ok "unprivileged open refused with an explanation (exit $code): $(echo "$out" | tail -n 1 | cut -c1-160)..."
    else
        bad "unprivileged open: exit $code, output: $(echo "$out" | tail -n 3)"
    fi
fi
if [ -n "$PCI_NS2" ]; then
    B2=$(wait_ng "$PCI_B" 2) || bad "no /dev/ng node for namespace 2 on $PCI_B"
    [ -n "$B2" ] && expect_refusal "a path to another namespace ($A + $B2)" "same namespace" \
        --path "$A,name=a" --path "$B2,name=b"
fi

# reg_totals LOG: the daemon's per-connection registration counters, summed.
reg_totals() {
    sed -n 's/.*io_uring registration this connection: //p' "$1" | awk '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); t[kv[1]] += kv[2] } }
        END { if (NR) printf "fixed_buf=%d plain_buf=%d fixed_file=%d registrations=%d connections=%d", t["fixed_buf"], t["plain_buf"], t["fixed_file"], t["registrations"], NR }'
}

n=0
for policy in $POLICIES; do
    n=$((n + 1))
    if [ $n = 1 ]; then
        # The first policy also covers the last blocks and write-zeroes / discard.
        off_mib=$((NS_BYTES / 1048576 - REGION_MIB))
        extra=""
    else
        off_mib=$(((n - 2) * REGION_MIB))
        extra="--no-zeroes"
    fi
    # shellcheck disable=SC2086
    if ! start_daemon "daemon-$policy" --num-queues 2 --policy "$policy" $DAEMON_ARGS \
        --path "$A,name=a" --path "$B,name=b"; then
        bad "$policy: daemon did not start"
        continue
    fi
    [ $n = 1 ] && grep -h "NVMe namespace" "/hostwork/daemon-$policy.log" | sed 's/^.*INFO *[^ ]* /INFO: daemon: /'
    ia=$(io_irqs "$CA")
    ib=$(io_irqs "$CB")
    t0=$(t)
    # shellcheck disable=SC2086
    "$BIN/vhost-verify" --socket "$SOCK" --queues 2 --qd "$QD" --req-kib "$REQ_KIB" \
        --region-mib "$REGION_MIB" --offset-mib "$off_mib" --seed "$n" \
        --expect-capacity "$NS_BYTES" --expect-block-size "$LBA" $extra >/tmp/verify.out 2>&1
    vrc=$?
    dt=$(since "$t0")
    sed "s/^VERIFY/VERIFY [$policy]/" /tmp/verify.out | grep -v '^VERIFY \[[^]]*\] pass'
    da=$(($(io_irqs "$CA") - ia))
    db=$(($(io_irqs "$CB") - ib))
    # The daemon logs the connection's registration counts after its queue
    # threads stop; a SIGTERM sent before that (CI run of 331ef6c) ended the
    # process first and lost the line. Wait for it, up to 5 s.
    for _ in $(seq 50); do
        grep -q "io_uring registration this connection" "/hostwork/daemon-$policy.log" && break
        sleep 0.1
    done
    stop_daemon
    drc=$?
    if [ $vrc = 0 ]; then
        ok "$policy: $REGION_MIB MiB at $off_mib MiB written, flushed, read back and verified in $dt s (I/O interrupts: a +$da, b +$db)"
    else
        bad "$policy: vhost-verify exit $vrc (I/O interrupts: a +$da, b +$db)"
        tail -n 20 "/hostwork/daemon-$policy.log"
    fi
    case "$policy" in
    round-robin | queue-depth | service-time)
        if [ "$da" -gt 0 ] && [ "$db" -gt 0 ]; then
            ok "$policy: both paths carried I/O"
        else
            bad "$policy: I/O not on both paths (interrupts a +$da, b +$db)"
        fi
        ;;
    esac
    [ $drc = 0 ] || bad "$policy: daemon exit status $drc after SIGTERM"
    # The fixed-buffer path was taken (FIXED_BUFFERS=1, the daemon's default), not just
    # the I/O done: the daemon counts per connection which NVMe reads and writes went
    # with IORING_URING_CMD_FIXED and which with plain addresses.
    reg=$(reg_totals "/hostwork/daemon-$policy.log")
    if [ "$FIXED_BUFFERS" = 1 ]; then
        case "$reg" in
        "fixed_buf=0 "* | "") bad "$policy: no NVMe command used a fixed buffer ($reg)" ;;
        *) ok "$policy: io_uring registration: $reg" ;;
        esac
    else
        info "$policy: io_uring registration: $reg"
    fi
    echo "$policy $off_mib $n" >>/hostwork/regions
done
exit $rc
