#!/bin/sh
# Guest half of scenario deb (see deb.sh): runs as root under systemd (PID 1) in a
# Debian 12 root, from vmtest.service.
. /hostwork/guest-lib.sh
W=/hostwork
SOCK=/run/vhost-mpath/disk0.sock
UNIT=vhost-mpath@disk0.service
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 MANPAGER=cat MANWIDTH=100
prop() { systemctl show -P "$1" "$UNIT"; }
# wait_until SECONDS CMD...: poll every 0.1 s.
wait_until() {
    n=$(($1 * 10))
    shift
    while [ $n -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}
# verify SEED LOG: one write-flush-read-compare pass over 4 MiB; a request that takes
# 10 s is a failure (libblkio does not notice a backend that died with requests in flight).
verify() {
    $W/vhost-verify --socket $SOCK --queues 2 --qd 8 --req-kib 64 --region-mib 4 --seed "$1" \
        --timeout-s 10 >"$2" 2>&1
}

[ "$(cat /proc/1/comm)" = systemd ] && ok "systemd is PID 1 ($(systemctl --version | head -n1))" ||
    bad "PID 1 is $(cat /proc/1/comm)"
info "systemd reached vmtest.service at uptime $(t) s"

# ---------------------------------------------------------------- install
t0=$(t)
if dpkg -i $W/vhost-mpath.deb >/tmp/dpkg.log 2>&1; then
    ok "dpkg -i $(dpkg-query -W -f '${Package} ${Version}' vhost-mpath) ($(echo "$t0 $(t)" | awk '{printf "%.1f", $2 - $1}') s)"
else
    bad "dpkg -i: $(tail -n 5 /tmp/dpkg.log | tr '\n' ';')"
    exit 1
fi
v=$(/usr/bin/vhost-mpath --version)
[ "$v" = "vhost-mpath $(dpkg-query -W -f '${Version}' vhost-mpath | sed 's/-[^-]*$//')" ] &&
    ok "/usr/bin/vhost-mpath --version: $v" || bad "--version says '$v'"
grep -q '^ExecStart=/usr/bin/vhost-mpath --config /etc/vhost-mpath/%i.toml' /lib/systemd/system/vhost-mpath@.service &&
    ok "the unit starts /usr/bin/vhost-mpath" || bad "ExecStart of the installed unit"
grep -qx /etc/vhost-mpath/example.toml /var/lib/dpkg/info/vhost-mpath.conffiles &&
    ok "/etc/vhost-mpath/example.toml is a conffile" || bad "example.toml is no conffile"
id vhost-mpath >/tmp/id 2>&1 && grep -q '(disk)' /tmp/id && getent group kvm >/dev/null &&
    ok "user: $(cat /tmp/id)" || bad "user vhost-mpath / group kvm: $(cat /tmp/id)"
[ "$(stat -c '%G %a' /etc/vhost-mpath)" = "vhost-mpath 2775" ] &&
    ok "/etc/vhost-mpath is the service's to rewrite (save_config)" ||
    bad "/etc/vhost-mpath: $(stat -c '%U:%G %a' /etc/vhost-mpath)"
docs=$(ls /usr/share/doc/vhost-mpath/ | tr '\n' ' ')
for f in README.md CHANGELOG.md OPERATIONS.md copyright examples; do
    case " $docs" in *" $f "*) ;; *) bad "/usr/share/doc/vhost-mpath lacks $f ($docs)" ;; esac
done
info "docs: $docs"

# ---------------------------------------------------------------- man page, completions
if man vhost-mpath >/tmp/man.txt 2>/tmp/man.err && grep -q -- '--no-path-timeout' /tmp/man.txt &&
    grep -q 'vhost-mpath-stats(1)' /tmp/man.txt && grep -q /etc/vhost-mpath/INSTANCE.toml /tmp/man.txt; then
    ok "man vhost-mpath ($(wc -l </tmp/man.txt) lines: options, subcommands, FILES)"
else
    bad "man vhost-mpath: $(head -c 300 /tmp/man.err)"
fi
man vhost-mpath-stats 2>/dev/null | grep -q -- '--watch' && ok "man vhost-mpath-stats" ||
    bad "man vhost-mpath-stats"
# What bash does on TAB: the completion loader finds the script by the command's name.
comp=$(bash -c '. /usr/share/bash-completion/bash_completion
    _completion_loader vhost-mpath
    COMP_WORDS=(vhost-mpath st); COMP_CWORD=1; COMP_LINE="vhost-mpath st"; COMP_POINT=14
    _vhost__mpath vhost-mpath st vhost-mpath; echo "${COMPREPLY[*]}"' 2>&1)
[ "$comp" = stats ] && ok "bash completes 'vhost-mpath st' to '$comp'" || bad "bash completion: '$comp'"
head -n1 /usr/share/zsh/vendor-completions/_vhost-mpath | grep -q '^#compdef vhost-mpath' &&
    ok "zsh completion installed" || bad "zsh completion missing"

# ---------------------------------------------------------------- hardening
systemd-analyze security --no-pager "$UNIT" >/tmp/security.txt 2>&1
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' /tmp/security.txt)
info "systemd-analyze security $UNIT: exposure $score"
# What still counts (lines that end in their exposure).
grep -E ' [0-9]\.[0-9]$' /tmp/security.txt | sed 's/  */ /g; s/^/INFO:   /'
awk -v s="${score:-99}" 'BEGIN { exit !(s <= 1.4) }' && ok "exposure $score <= 1.4" ||
    bad "exposure ${score:-?} > 1.4 (4.2 before the hardening)"

# ---------------------------------------------------------------- the instance
sed 's/example/disk0/g; s/size = "1G"/size = "64M"/' /etc/vhost-mpath/example.toml >/etc/vhost-mpath/disk0.toml
# The watchdog period is the one thing the test changes: 4 s instead of 30 s, so that a
# missed ping shows within the test's time.
mkdir -p /etc/systemd/system/$UNIT.d
printf '[Service]\nWatchdogSec=4s\n' >/etc/systemd/system/$UNIT.d/test-watchdog.conf
systemctl daemon-reload
if systemctl enable --now vhost-mpath@disk0.socket >/tmp/enable.log 2>&1; then
    ok "systemctl enable --now vhost-mpath@disk0.socket"
else
    bad "enable: $(cat /tmp/enable.log)"
    exit 1
fi
[ "$(stat -c '%F %U:%G %a' $SOCK)" = "socket root:kvm 660" ] && ok "$SOCK: root:kvm 0660" ||
    bad "$SOCK: $(stat -c '%F %U:%G %a' $SOCK 2>&1)"
[ "$(prop ActiveState)" = inactive ] && ok "no daemon before the first connection" ||
    bad "service already $(prop ActiveState) before any connection"

t0=$(t)
if verify 1 /tmp/v1.log; then
    ok "first connection: the socket started the daemon, 4 MiB written and verified ($(echo "$t0 $(t)" | awk '{printf "%.1f", $2 - $1}') s)"
else
    bad "vhost-verify through the activated socket: $(tail -n 3 /tmp/v1.log | tr '\n' ';')"
fi
pid=$(prop MainPID)
[ "$(prop ActiveState)/$(prop SubState)" = active/running ] && [ "$(prop Type)" = notify ] &&
    ok "READY: $UNIT active/running (Type=notify), main pid $pid" ||
    bad "$UNIT: $(prop ActiveState)/$(prop SubState)"
[ "$(stat -c %U /proc/$pid)" = vhost-mpath ] && ok "the daemon runs as $(stat -c %U /proc/$pid)" ||
    bad "the daemon runs as $(stat -c %U /proc/$pid 2>&1)"
caps=$(sed -n 's/^CapEff:\t*//p' /proc/$pid/status)
[ "$caps" = 0000000000000000 ] && ok "no effective capabilities" || bad "CapEff $caps"
/usr/bin/vhost-mpath paths --config /etc/vhost-mpath/disk0.toml >/tmp/paths.txt 2>&1 &&
    [ "$(grep -c usable /tmp/paths.txt)" = 2 ] &&
    ok "vhost-mpath paths over /run/vhost-mpath/disk0/rpc.sock: 2 usable paths" ||
    bad "vhost-mpath paths: $(head -c 300 /tmp/paths.txt)"
# save_config: the service rewrites its own config (a temporary file and a rename in
# /etc/vhost-mpath, which the package made the service group's); later restarts read it.
if /usr/bin/vhost-mpath rpc --config /etc/vhost-mpath/disk0.toml save_config >/tmp/save.txt 2>&1 &&
    grep -q '"paths": *2' /tmp/save.txt && [ "$(stat -c %U /etc/vhost-mpath/disk0.toml)" = vhost-mpath ]; then
    ok "save_config rewrote /etc/vhost-mpath/disk0.toml as the service's user"
else
    bad "save_config: $(tr '\n' ' ' </tmp/save.txt | head -c 300), owner $(stat -c %U /etc/vhost-mpath/disk0.toml)"
fi
[ "$(stat -c '%U %a' /var/lib/vhost-mpath/disk0.img)" = "vhost-mpath 600" ] &&
    ok "the image was created by the service, mode 0600 (UMask=0077)" ||
    bad "image: $(stat -c '%U %a' /var/lib/vhost-mpath/disk0.img 2>&1)"

# Watchdog: pings arrive (the timestamp moves) and the daemon outlives 2 periods.
w1=$(prop WatchdogTimestampMonotonic)
sleep 9
w2=$(prop WatchdogTimestampMonotonic)
[ "$(prop WatchdogUSec)" = 4s ] && [ "$w2" -gt "$w1" ] && [ "$(prop MainPID)" = "$pid" ] &&
    ok "watchdog: pinged ($w1 -> $w2 us), same pid after 9 s with WatchdogSec=4s" ||
    bad "watchdog: WatchdogUSec=$(prop WatchdogUSec) $w1 -> $w2, pid $pid -> $(prop MainPID)"

# ---------------------------------------------------------------- kill -9 under a client
# libblkio does not reconnect (QEMU does: scenario daemon-crash): the client here is a
# loop of connections, each a write-flush-read-compare pass; the one the kill cuts may
# fail, every later one must pass, and none may be refused (the socket stays, held by
# systemd, while the daemon restarts).
rm -f /tmp/loop.*
(
    i=0
    while [ ! -e /tmp/loop.stop ]; do
        i=$((i + 1))
        if verify $((100 + i)) /tmp/loop.$i.log; then echo "$i ok $(t)"; else echo "$i fail $(t)"; fi >>/tmp/loop.res
    done
) &
lpid=$!
wait_until 60 grep -qs ok /tmp/loop.res || bad "the looping client never passed before the kill"
restarts=$(prop NRestarts)
tk=$(t)
kill -9 "$pid"
info "kill -9 $pid at $tk"
if wait_until 30 sh -c "[ \"\$(systemctl show -P MainPID $UNIT)\" != $pid ] && [ \"\$(systemctl show -P MainPID $UNIT)\" != 0 ] && [ \"\$(systemctl show -P ActiveState $UNIT)\" = active ]"; then
    ok "systemd restarted the daemon: pid $pid -> $(prop MainPID), NRestarts $restarts -> $(prop NRestarts), active again after $(echo "$tk $(t)" | awk '{printf "%.1f", $2 - $1}') s"
else
    bad "no restart after kill -9: $(prop ActiveState) pid $(prop MainPID)"
fi
# Two passes that started after the restart.
tr=$(t)
wait_until 60 sh -c "awk -v t=$tr '\$2 == \"ok\" && \$3 > t { n++ } END { exit !(n >= 2) }' /tmp/loop.res"
touch /tmp/loop.stop
wait $lpid
after=$(awk -v t="$tk" '$3 > t' /tmp/loop.res)
fails=$(echo "$after" | grep -c fail)
oks=$(echo "$after" | grep -c ok)
info "client passes after the kill: $(echo "$after" | awk '{printf "%s:%s ", $1, $2}')"
if [ "$oks" -ge 2 ] && [ "$fails" -le 1 ]; then
    ok "the client's I/O resumed: $oks passes after the kill, $fails cut by it"
else
    bad "after the kill: $oks passes, $fails failed"
fi
if grep -l -i 'refused\|No such file' /tmp/loop.*.log >/dev/null 2>&1; then
    bad "a connection was refused during the restart: $(grep -h -i 'refused\|No such file' /tmp/loop.*.log | head -n 2)"
else
    ok "no connection refused while the daemon restarted"
fi

# A stopped daemon misses its pings: systemd kills it (watchdog) and restarts it.
pid=$(prop MainPID)
restarts=$(prop NRestarts)
kill -STOP "$pid"
tk=$(t)
if wait_until 20 sh -c "[ \"\$(systemctl show -P MainPID $UNIT)\" != $pid ] && [ \"\$(systemctl show -P ActiveState $UNIT)\" = active ]"; then
    journalctl -u $UNIT --no-pager -o cat | grep -q 'Watchdog timeout' &&
        ok "watchdog: a stopped daemon was killed ('Watchdog timeout') and restarted after $(echo "$tk $(t)" | awk '{printf "%.1f", $2 - $1}') s" ||
        bad "restarted, but the journal names no watchdog timeout"
else
    bad "a stopped daemon was not restarted within 20 s: $(prop ActiveState) $(prop Result)"
fi
verify 7 /tmp/v7.log && ok "I/O after the watchdog restart" || bad "I/O after the watchdog restart: $(tail -n 2 /tmp/v7.log)"
journalctl -u $UNIT --no-pager -o cat >$W/journal.txt 2>&1

# ---------------------------------------------------------------- removal
if dpkg -r vhost-mpath >/tmp/rm.log 2>&1 && [ "$(prop ActiveState)" != active ] &&
    [ "$(systemctl show -P ActiveState vhost-mpath@disk0.socket)" != active ] && [ ! -e $SOCK ]; then
    ok "dpkg -r stopped the socket and the service"
else
    bad "dpkg -r: $(tail -n 3 /tmp/rm.log | tr '\n' ';') service $(prop ActiveState), socket $(systemctl show -P ActiveState vhost-mpath@disk0.socket)"
fi
exit $rc
