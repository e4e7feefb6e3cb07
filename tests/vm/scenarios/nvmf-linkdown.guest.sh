#!/bin/sh
# Guest half of scenario nvmf-linkdown (see nvmf-linkdown.sh). busybox sh.
. /hostwork/params
. /hostwork/nvme-lib.sh

NQN=nqn.2024-01.example:nvmf-linkdown
nvmf_netns_target "$NQN" "$NS_MIB" || exit 1
nvmf_paths "$NQN" || exit 1
ok "NVMe/TCP paths over veth: a=$NG1 ($CTRL1, h1 -> 10.0.1.2) b=$NG2 ($CTRL2, h2 -> 10.0.2.2)"

opt=""
if [ "$IO_TIMEOUT_MS" != 0 ]; then
    if ! daemon_accepts_path_option "io-timeout-ms=$IO_TIMEOUT_MS"; then
        bad "the daemon does not accept the path option io-timeout-ms (run with LINKDOWN_IO_TIMEOUT_MS=0 to see the kernel's own recovery)"
        exit 1
    fi
    opt=",io-timeout-ms=$IO_TIMEOUT_MS"
    info "paths with io-timeout-ms=$IO_TIMEOUT_MS: a stall must end within $MAX_STALL_MS ms"
else
    info "paths without io-timeout-ms: the kernel's keep-alive recovery decides (stall bound $MAX_STALL_MS ms)"
fi
start_daemon daemon --num-queues 2 --policy round-robin --rpc-socket "$RPC_SOCK" \
    --recovery-probes "$RECOVERY_PROBES" \
    --path "$NG1,name=a$opt" --path "$NG2,name=b$opt" || {
    bad "daemon did not start"
    exit 1
}
wait_rpc_socket || exit 1

t0=$(t)
"$BIN/vhost-verify" --socket "$SOCK" --queues 2 --qd 16 --req-kib 64 --region-mib "$REGION_MIB" \
    --seed 200 --duration-s "$DURATION" --no-zeroes \
    --expect-capacity "$((NS_MIB * 1048576))" --expect-block-size 512 >/tmp/verify.out 2>&1 &
vpid=$!

sleep "$CUT_AT"
kill -0 $vpid 2>/dev/null || bad "the client ended before the link was cut"
iob=$(rpc field get_stats b reads)
info "t=$(since "$t0") s: path b has served $iob reads; cutting its link (ip link set h2 down)"
tc0=$(t)
$IP link set h2 down || bad "ip link set h2 down"
if w=$(rpc wait-state b failed "$((MAX_STALL_MS / 1000 + 5))"); then
    ok "path b marked failed $(since "$tc0") s after the link went down"
else
    bad "path b not marked failed: $w"
fi
rest=$(echo "$DOWN_S $(since "$tc0")" | awk '{ d = $1 - $2; print (d > 0 ? d : 0) }')
sleep "$rest"
info "t=$(since "$t0") s: link down for $(since "$tc0") s; bringing it back (ip link set h2 up)"
info "path b while down (get_stats): $(rpc field get_stats b state errors failures probes)"
tu=$(t)
$IP link set h2 up || bad "ip link set h2 up"
if w=$(rpc wait-state b usable "$RECOVER_S"); then
    ok "path b usable again $(since "$tu") s after the link came back (reconnect + $RECOVERY_PROBES good probes)"
    if w=$(rpc wait-io b 10); then
        ok "path b carries I/O again ($(echo "$w" | cut -d' ' -f2) requests within $(echo "$w" | cut -d' ' -f1) s)"
    elif kill -0 $vpid 2>/dev/null; then
        bad "path b usable but idle: $w"
    else
        bad "path b usable, but the client had already finished (raise LINKDOWN_DURATION): $w"
    fi
else
    bad "path b did not return: $w"
fi

wait $vpid
vrc=$?
grep '^VERIFY' /tmp/verify.out
stop_daemon
drc=$?

# The stall: the slowest batch of requests (all submitted at once, on both queues) of
# any pass; the client waits for the whole batch, so this is the longest gap in progress.
stall=$(sed -n 's/^VERIFY total: .*write .* slowest batch \([0-9]*\) ms; read .* slowest batch \([0-9]*\) ms;.*/\1 \2/p' /tmp/verify.out |
    awk '{ print ($1 > $2 ? $1 : $2) }')
slowpass=$(awk '/^VERIFY pass/ { w = $0; sub(/.*write .* slowest batch /, "", w); sub(/ ms.*/, "", w)
    r = $0; sub(/.*read .* slowest batch /, "", r); sub(/ ms.*/, "", r)
    m = (w + 0 > r + 0 ? w + 0 : r + 0); if (m > best) { best = m; line = $3 } } END { print line }' /tmp/verify.out)
if [ $vrc = 0 ]; then
    ok "client: zero errors, every pass verified over ${DURATION} s with path b's link cut for ${DOWN_S} s"
else
    bad "client exit $vrc"
    grep '^VERIFY-ERROR' /tmp/verify.out | head -n 5
fi
if [ -z "$stall" ]; then
    bad "no stall figure in the client's output"
else
    why="(io-timeout-ms $IO_TIMEOUT_MS + the kernel's timeout-timer slack, one reconnect and 1 s)"
    if [ "$stall" -le "$MAX_STALL_MS" ]; then
        ok "stall: slowest batch $stall ms (pass $slowpass) <= $MAX_STALL_MS ms $why"
    else
        bad "stall: slowest batch $stall ms (pass $slowpass) > $MAX_STALL_MS ms $why"
    fi
fi
# When the aborted commands came back: a late one shows a stall that is the kernel's.
grep 'failing .* over' /hostwork/daemon.log | sed -n 's/^\[[^T]*T\([0-9]*\):\([0-9]*\):\([0-9.]*\)Z.*/\1 \2 \3/p' |
    awk '{ s = $1 * 3600 + $2 * 60 + $3; if (n == 0 || s < a) a = s; if (n == 0 || s > b) b = s; n++ }
        END { if (n) printf "INFO: %d failover(s) from path b logged (rate-limited), the last %.3f s after the first\n", n, b - a }'
[ $drc = 0 ] && ok "daemon exited 0 on SIGTERM" || bad "daemon exit status $drc after SIGTERM"
grep -E "WARN|ERROR" /hostwork/daemon.log | head -n 8 | sed 's/^/INFO: daemon: /' | cut -c1-300
exit $rc
