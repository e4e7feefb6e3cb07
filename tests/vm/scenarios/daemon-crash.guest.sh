#!/bin/sh
# Guest half of scenario daemon-crash (busybox sh from /hostwork; see daemon-crash.sh).
# fio rounds (2 jobs of JOB_MIB MiB 4 KiB random writes at QD 32, crc32c verified
# while running) until the host has done its kills, then one verify-only pass; the
# kernel log must hold no I/O or virtio errors.
. /hostwork/params
. /hostwork/guest-lib.sh

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -b /dev/vda ] || { bad "/dev/vda missing"; exit 1; }
FIO="/usr/bin/fio --name=crash --filename=/dev/vda --direct=1 --ioengine=libaio --iodepth=32
    --bs=4k --size=${JOB_MIB}M --offset_increment=${JOB_MIB}M --numjobs=2 --cpus_allowed_policy=split
    --cpus_allowed=0-1 --verify=crc32c --verify_fatal=1 --group_reporting --output-format=json --output=/tmp/fio.json"
# check_round JSON WANT_KIB write|verify: fio's JSON says no error, WANT_KIB read
# (verified) and, for a write round, written.
check_round() {
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
s = open(sys.argv[1]).read()
# fio puts its warnings before the JSON.
j = json.loads(s[s.index("{"):])["jobs"][0]
want, write = int(sys.argv[2]), sys.argv[3] == "write"
w, r = j["write"]["io_kbytes"], j["read"]["io_kbytes"]
ok = j["error"] == 0 and r == want and (w == want or not write)
print(f"error={j['error']} written={w} KiB verified={r} KiB (want {want})")
sys.exit(0 if ok else 1)
PY
}
want=$((2 * JOB_MIB * 1024))
echo 1 >/hostwork/load-started
round=0 failed=0
while [ $round -lt $MAX_ROUNDS ]; do
    round=$((round + 1))
    t0=$(t)
    if $FIO --rw=randwrite --verify_backlog=64 >/tmp/fio.err 2>&1; then
        if res=$(check_round /tmp/fio.json $want write); then
            info "round $round: $res ($(echo "$t0 $(t)" | awk '{printf "%.1f", $2 - $1}') s)"
        else
            bad "round $round: $res"
            failed=1
        fi
    else
        bad "round $round: fio failed: $(grep -v '^$' /tmp/fio.err | head -n 5 | tr '\n' ';')"
        failed=1
    fi
    [ $failed = 1 ] && break
    [ -e /hostwork/kills-done ] && break
done
echo 1 >/hostwork/load-ended
if [ $failed = 0 ]; then
    if [ -e /hostwork/kills-done ]; then
        ok "$round fio write+verify rounds completed without an error across $(cat /hostwork/kills-done) daemon kills"
    else
        bad "the host did not finish its kills within $MAX_ROUNDS rounds"
    fi
    if $FIO --rw=randwrite --verify_only >/tmp/fio.err 2>&1 &&
        res=$(check_round /tmp/fio.json $want verify); then
        ok "final verify-only pass: $res"
    else
        bad "final verify-only pass: $(grep -v '^$' /tmp/fio.err | head -n 5 | tr '\n' ';') $res"
    fi
fi
errs=$(dmesg | grep -v 'ommand line' |
    grep -iE 'I/O error|blk_update_request|virtio.*(err|broken|fail)|vd[a-z].*(err|fail)|Buffer I/O|timing out|timed out|blocked for more' | head -n 5)
if [ -z "$errs" ]; then
    ok "no I/O or virtio errors in the kernel log"
else
    bad "kernel log: $(echo "$errs" | tr '\n' ';')"
fi
exit $rc
