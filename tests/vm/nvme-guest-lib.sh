# Guest-side helpers for the NVMe scenarios (busybox sh; copied to /hostwork/nvme-lib.sh).
# shellcheck shell=dash  # busybox ash: `local` is available

. /hostwork/guest-lib.sh
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

# nvme_drop_placeholder PH_PCI PCI: the QEMU of nvme_qemu_args_throttled has a
# placeholder controller at PH_PCI holding cntlid 0 in path b's subsystem; Linux sees
# one subsystem (one NQN) and refuses whichever of it and the controller at PCI (also
# cntlid 0) comes second. Waits (10 s) until both probes are over (controller live, or
# refused and unbound), unbinds the placeholder and binds PCI again if it was refused.
nvme_drop_placeholder() {
    local ph=$1 pci=$2 D=/sys/bus/pci/drivers/nvme tries=0 p c settled
    while [ $tries -lt 100 ]; do
        settled=1
        for p in "$ph" "$pci"; do
            [ -e "$D/$p" ] || continue
            c=$(ctrl_of "$p") && [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] || settled=0
        done
        [ $settled = 1 ] && break
        sleep 0.1
        tries=$((tries + 1))
    done
    [ -e "$D/$ph" ] && echo "$ph" >"$D/unbind"
    if [ ! -e "$D/$pci" ]; then
        info "controller $pci lost the cntlid race to the placeholder: bound again"
        echo "$pci" >"$D/bind"
    fi
}

# io_irqs CTRL: completion interrupts of the I/O queues (nvmeXq1..) of controller CTRL.
io_irqs() {
    awk -v c="$1" '$NF ~ ("^" c "q[1-9][0-9]*$") { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i } END { print n + 0 }' /proc/interrupts
}

# start_daemon LOGNAME ARGS...: the daemon in the background on $SOCK; waits (10 s) for
# the socket. Sets DAEMON_PID. Log: /hostwork/LOGNAME.log. DAEMON_PREFIX (e.g.
# "taskset -c 1") goes before the command.
start_daemon() {
    local logname=$1 tries=0
    shift
    rm -f "$SOCK"
    # shellcheck disable=SC2086
    $DAEMON_PREFIX "$BIN/vhost-mpath" --socket-path "$SOCK" "$@" >"/hostwork/$logname.log" 2>&1 &
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

# ---------------------------------------------------------------- NVMe/TCP over veth
# A target in its own network namespace, so that traffic to it crosses a veth pair that
# tc can slow (netem) and `ip link set ... down` can cut. Two pairs, two subnets:
#   path 1: host h1 10.0.1.1 <-> t1 10.0.1.2 (netns tgt), nvmet port 1
#   path 2: host h2 10.0.2.1 <-> t2 10.0.2.2 (netns tgt), nvmet port 2
# iproute2 and tc are the host's (/usr share): busybox's ip lacks netns and veth.
IP=/usr/bin/ip
TC=/usr/sbin/tc
NVMF_HOSTNQN=nqn.2024-01.example:host

# nvmf_netns_target NQN NS_MIB: modules, a brd RAM disk of NS_MIB MiB, netns tgt with
# the two veth pairs, one nvmet subsystem NQN on /dev/ram0 exported on both ports
# (trsvcid 4420). Returns non-zero (after a FAIL line) on the first step that fails.
nvmf_netns_target() {
    local nqn=$1 mib=$2 m i S P
    for m in configfs nvmet nvmet_tcp nvme_fabrics nvme_tcp veth sch_netem; do
        modprobe "$m" || { bad "modprobe $m"; return 1; }
    done
    modprobe brd rd_nr=1 rd_size=$((mib * 1024)) || { bad "modprobe brd"; return 1; }
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    $IP link set lo up
    $IP netns add tgt || { bad "ip netns add tgt"; return 1; }
    $IP -n tgt link set lo up
    for i in 1 2; do
        $IP link add "h$i" type veth peer name "t$i" &&
            $IP link set "t$i" netns tgt &&
            $IP addr add "10.0.$i.1/24" dev "h$i" &&
            $IP -n tgt addr add "10.0.$i.2/24" dev "t$i" &&
            $IP link set "h$i" up &&
            $IP -n tgt link set "t$i" up || { bad "veth pair h$i/t$i"; return 1; }
    done
    S=/sys/kernel/config/nvmet/subsystems/$nqn
    mkdir "$S" && echo 1 >"$S/attr_allow_any_host" &&
        mkdir "$S/namespaces/1" &&
        echo /dev/ram0 >"$S/namespaces/1/device_path" &&
        echo 1 >"$S/namespaces/1/enable" || { bad "nvmet subsystem $nqn"; return 1; }
    for i in 1 2; do
        P=/sys/kernel/config/nvmet/ports/$i
        mkdir "$P" &&
            echo tcp >"$P/addr_trtype" &&
            echo ipv4 >"$P/addr_adrfam" &&
            echo "10.0.$i.2" >"$P/addr_traddr" &&
            echo 4420 >"$P/addr_trsvcid" || { bad "nvmet port $i"; return 1; }
        # Enabling the port (the link) opens its listening socket in the caller's
        # network namespace: it must be tgt's. (`ip netns exec` would remount /sys and
        # lose configfs; nsenter only switches the network namespace.)
        /usr/bin/nsenter --net=/run/netns/tgt ln -s "$S" "$P/subsystems/$nqn" ||
            { bad "nvmet port $i: link subsystem"; return 1; }
    done
}

# nvmf_connect I NQN: connect path I (1 or 2) through /dev/nvme-fabrics. keep-alive 5 s,
# reconnect every 2 s, give the controller up after 30 s without a connection, and
# fast_io_fail_tmo=0: while the controller reconnects, I/O it had not started fails at
# once instead of waiting for the next reconnect (the daemon fails it over; the README's
# "NVMe paths" recommends the same).
nvmf_connect() {
    echo "transport=tcp,traddr=10.0.$1.2,trsvcid=4420,nqn=$2,hostnqn=$NVMF_HOSTNQN,keep_alive_tmo=5,ctrl_loss_tmo=30,reconnect_delay=2,fast_io_fail_tmo=0" \
        >/dev/nvme-fabrics
}

# ng_tcp_addr TRADDR: the ng node of namespace 1 on the TCP controller connected to TRADDR.
ng_tcp_addr() {
    local c d
    for c in /sys/class/nvme/nvme*; do
        grep -q "traddr=$1," "$c/address" 2>/dev/null || continue
        for d in "$c"/ng*n1; do
            [ -e "$d" ] && echo "/dev/${d##*/}" && return 0
        done
    done
    return 1
}

# nvmf_paths NQN: connect both paths, wait (10 s) for their ng nodes; sets NG1, NG2,
# CTRL1, CTRL2 (nvmeX of each path).
nvmf_paths() {
    local tries=0 i
    for i in 1 2; do
        nvmf_connect "$i" "$1" || { bad "connect path $i (10.0.$i.2)"; return 1; }
    done
    until NG1=$(ng_tcp_addr 10.0.1.2) && NG2=$(ng_tcp_addr 10.0.2.2); do
        [ $tries -ge 100 ] && {
            bad "no ng nodes for both TCP controllers (nodes: $(ls /dev/ng* 2>/dev/null | tr '\n' ' '))"
            return 1
        }
        sleep 0.1
        tries=$((tries + 1))
    done
    CTRL1=$(basename "$(dirname "$(readlink -f "/sys/class/nvme-generic/${NG1#/dev/}")")")
    CTRL2=$(basename "$(dirname "$(readlink -f "/sys/class/nvme-generic/${NG2#/dev/}")")")
}

# rpc ARGS...: the JSON-RPC helper (rpc.py) on the daemon's control socket $RPC_SOCK.
RPC_SOCK=/tmp/vhost-mpath-rpc.sock
rpc() {
    /usr/bin/python3 "$BIN/rpc.py" "$RPC_SOCK" "$@"
}

# wait_rpc_socket: waits up to 10 s for the control socket $RPC_SOCK (the daemon
# creates it after the vhost-user socket that start_daemon waits for).
wait_rpc_socket() {
    local tries=0
    while [ ! -S "$RPC_SOCK" ] && [ $tries -lt 100 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done
    [ -S "$RPC_SOCK" ] || { bad "no JSON-RPC socket $RPC_SOCK"; return 1; }
}

# daemon_accepts_path_option KEY=VALUE: whether this daemon knows a path option (an
# unknown one is refused while the command line is parsed, before any device is opened).
daemon_accepts_path_option() {
    ! timeout 10 "$BIN/vhost-mpath" --socket-path /nonexistent/probe.sock --path "null:1M,$1" 2>&1 |
        grep -q "unknown path option"
}
