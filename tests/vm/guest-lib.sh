# Helpers every guest script shares (busybox sh; copied to /hostwork/guest-lib.sh by
# vm_init_run). Result lines PASS/FAIL/INFO; rc is 1 once anything failed.
# shellcheck shell=dash

rc=0
ok() { echo "PASS: $*"; }
bad() {
    echo "FAIL: $*"
    rc=1
}
info() { echo "INFO: $*"; }
# t: seconds since boot.
t() { cut -d' ' -f1 /proc/uptime; }

# GNU dd and taskset come from the host's /usr through the 9p share when present.
DD=/usr/bin/dd
$DD --version >/dev/null 2>&1 || DD="busybox dd"
TASKSET=/usr/bin/taskset
[ -x $TASKSET ] || TASKSET="busybox taskset"
MiB=1048576
# same FILE1 FILE2 [SKIP...]: GNU cmp stops at the first difference; busybox 1.35
# `cmp -n` prints every differing byte (megabytes of console output under TCG), so it
# only ever runs with -s.
same() {
    if [ -x /usr/bin/cmp ]; then
        out=$(/usr/bin/cmp "$@" 2>&1) && return 0
        echo "$out" | head -n 3
        return 1
    fi
    busybox cmp -s "$@"
}
