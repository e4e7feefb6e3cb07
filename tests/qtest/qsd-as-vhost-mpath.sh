#!/usr/bin/env bash
# Takes the qemu-storage-daemon command line of QEMU's vhost-user-blk qtest
# (tests/qtest/vhost-user-blk-test.c) and serves each export with a
# vhost-mpath daemon instead, on the listening socket the test passed:
#   --blockdev driver=file,node-name=diskI,filename=IMG
#   --export type=vhost-user-blk,id=diskI,addr.type=fd,addr.str=FD,node-name=diskI,writable=on,num-queues=N
# becomes `vhost-mpath --fd FD --path IMG,name=a --num-queues N` (one daemon
# per export). The test stops it with SIGTERM and wants exit status 0.
# $VHOST_MPATH_BIN names the daemon (default: target/release/vhost-mpath).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${VHOST_MPATH_BIN:-$here/target/release/vhost-mpath}
declare -A file
exports=()
field() { # field KEY OPTS: the value of KEY= in a comma-separated list
    local kv
    IFS=, read -ra kv <<<"$2"
    for x in "${kv[@]}"; do
        [ "${x%%=*}" = "$1" ] && { echo "${x#*=}"; return; }
    done
    echo ""
}
while [ $# -gt 0 ]; do
    case $1 in
    --blockdev)
        [ "$(field driver "$2")" = file ] || { echo "qsd-as-vhost-mpath: only driver=file: $2" >&2; exit 2; }
        file[$(field node-name "$2")]=$(field filename "$2")
        shift 2 ;;
    --export)
        [ "$(field type "$2")" = vhost-user-blk ] && [ "$(field addr.type "$2")" = fd ] ||
            { echo "qsd-as-vhost-mpath: only vhost-user-blk exports on an fd: $2" >&2; exit 2; }
        exports+=("$2")
        shift 2 ;;
    *) echo "qsd-as-vhost-mpath: unknown argument $1" >&2; exit 2 ;;
    esac
done
cmd_of() { # the daemon's command line for one export
    local e=$1 node fd nq ro=()
    node=$(field node-name "$e"); fd=$(field addr.str "$e"); nq=$(field num-queues "$e")
    [ "$(field writable "$e")" = on ] || ro=(--read-only)
    echo "$bin --fd $fd --path ${file[$node]},name=a --num-queues ${nq:-1} ${ro[*]:-}"
}
if [ ${#exports[@]} -eq 1 ]; then
    # shellcheck disable=SC2046
    exec $(cmd_of "${exports[0]}")
fi
pids=()
for e in "${exports[@]}"; do
    # shellcheck disable=SC2046
    $(cmd_of "$e") &
    pids+=($!)
done
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap stop TERM INT
status=0
for p in "${pids[@]}"; do
    # `wait` returns early when a trapped signal arrives: wait until the
    # process is gone, then take the status bash kept for it.
    while kill -0 "$p" 2>/dev/null; do wait "$p" || true; done
    rc=0
    wait "$p" || rc=$?
    [ "$rc" -eq 0 ] || status=$rc
done
exit $status
