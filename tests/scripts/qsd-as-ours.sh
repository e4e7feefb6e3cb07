#!/bin/sh
# Stands in for our daemon: takes vhost-mpath's command line and runs
# qemu-storage-daemon instead. Used to check the harness and the benchmark
# (VHOST_MPATH_BIN=tests/scripts/qsd-as-ours.sh). Serves the first --path only.
# QSD_AS_OURS_NULL=1 swaps the file for a null device (the tests must then fail).
set -eu
socket= path= queues=1 writable=on ro=off
while [ $# -gt 0 ]; do
    case "$1" in
        --socket-path) socket=$2; shift 2 ;;
        --path) [ -n "$path" ] || path=$2; shift 2 ;;
        --num-queues) queues=$2; shift 2 ;;
        --read-only) writable=off ro=on; shift ;;
        *) echo "qsd-as-ours: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$path" in
    null:*)
        size=$(echo "${path#null:}" | sed 's/K$/*1024/; s/M$/*1048576/; s/G$/*1073741824/; s/T$/*1099511627776/')
        blockdev="driver=null-co,node-name=f0,size=$(( $size )),read-zeroes=on,read-only=$ro" ;;
    *)
        file=${path%%,*}
        if [ "${QSD_AS_OURS_NULL:-0}" = 1 ]; then
            blockdev="driver=null-co,node-name=f0,size=$(stat -c %s "$file"),read-zeroes=on,read-only=$ro"
        else
            blockdev="driver=file,node-name=f0,filename=$file,cache.direct=off,aio=io_uring,discard=unmap,read-only=$ro"
        fi ;;
esac
exec "${QSD_BIN:-qemu-storage-daemon}" --blockdev "$blockdev" \
    --export "type=vhost-user-blk,id=e0,node-name=f0,addr.type=unix,addr.path=$socket,writable=$writable,num-queues=$queues"
