# Guest-side helpers for the NVMe scenarios (busybox sh; copied to /hostwork/nvme-lib.sh).
# shellcheck shell=dash  # busybox ash: `local` is available

rc=0
ok() { echo "PASS: $*"; }
bad() {
    echo "FAIL: $*"
    rc=1
}
info() { echo "INFO: $*"; }
t() { cut -d' ' -f1 /proc/uptime; }
since() { echo "$1 $(t)" | awk '{printf "%.1f", $2 - $1}'; }
BIN=/hostwork/bin
SOCK=/tmp/vhost-mpath.sock

# ng_for PCI_ADDR [NSID]: the /dev/ngXnY of namespace NSID (default 1) on the controller
# at PCI_ADDR (device numbering is not stable: map by controller, not by name).
ng_for() {
    local want=${2:-1} d target name nsid
    for d in /sys/class/nvme-generic/ng*; do
        [ -e "$d" ] || continue
        target=$(readlink -f "$d/device")
        case "$target" in */"$1"/nvme/nvme*) ;; *) continue ;; esac
        name=${d##*/}
        nsid=$(cat "/sys/block/nvme${name#ng}/nsid" 2>/dev/null)
        if [ "$nsid" = "$want" ]; then
            echo "/dev/$name"
            return 0
        fi
    done
    return 1
}

# ctrl_of PCI_ADDR: nvmeX of the controller at PCI_ADDR.
ctrl_of() {
    local d
    for d in /sys/class/nvme/nvme*; do
        case "$(readlink -f "$d/device")" in */"$1") echo "${d##*/}" && return 0 ;; esac
    done
    return 1
}

# wait_ng PCI_ADDR [NSID]: up to 10 s for the node to appear; prints it.
wait_ng() {
    local tries=0 node
    while [ $tries -lt 100 ]; do
        node=$(ng_for "$@") && { echo "$node"; return 0; }
        sleep 0.1
        tries=$((tries + 1))
    done
    return 1
}

# io_irqs CTRL: completion interrupts of the I/O queues (nvmeXq1..) of controller CTRL.
io_irqs() {
    awk -v c="$1" '$NF ~ ("^" c "q[1-9][0-9]*$") { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i } END { print n + 0 }' /proc/interrupts
}

# start_daemon LOGNAME ARGS...: the daemon in the background on $SOCK; waits (10 s) for
# the socket. Sets DAEMON_PID. Log: /hostwork/LOGNAME.log.
start_daemon() {
    local logname=$1 tries=0
    shift
    rm -f "$SOCK"
    "$BIN/vhost-mpath" --socket-path "$SOCK" "$@" >"/hostwork/$logname.log" 2>&1 &
    DAEMON_PID=$!
    while [ ! -S "$SOCK" ]; do
        if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
            wait "$DAEMON_PID"
            echo "daemon exited with $? before listening:"
            tail -n 20 "/hostwork/$logname.log"
            return 1
        fi
        [ $tries -ge 100 ] && { echo "daemon: no socket after 10 s"; return 1; }
        sleep 0.1
        tries=$((tries + 1))
    done
    return 0
}

# stop_daemon: SIGTERM, wait up to 10 s; returns its exit status (124: killed).
stop_daemon() {
    local tries=0
    kill -TERM "$DAEMON_PID" 2>/dev/null
    while kill -0 "$DAEMON_PID" 2>/dev/null; do
        if [ $tries -ge 100 ]; then
            kill -KILL "$DAEMON_PID"
            wait "$DAEMON_PID"
            return 124
        fi
        sleep 0.1
        tries=$((tries + 1))
    done
    wait "$DAEMON_PID"
}
