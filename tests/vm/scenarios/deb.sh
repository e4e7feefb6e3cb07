# Scenario deb (sourced by tests/vm/run): the Debian package where it will run. A Debian
# 12 root (debootstrap minbase + systemd + man-db + bash-completion; built once and
# cached by tests/vm/deb-root) boots with systemd as PID 1 under TCG, as a snapshot of
# its ext4 image on virtio-blk; /debinit (appended to tests/vm/setup's initramfs) loads
# ext4 and hands over to systemd, whose vmtest.service runs deb.guest.sh.
#
# Host: packaging/build-deb --no-build (target/release/vhost-mpath must be built), the
# .deb and target/release/vhost-verify (the blkio client; needs only libc) on the share.
# Guest (deb.guest.sh): dpkg -i; the files where Debian wants them; `man vhost-mpath`
# and bash completion work; the service's `systemd-analyze security` exposure; then
# `systemctl enable --now vhost-mpath@disk0.socket` on the package's example config:
# socket activation (the service starts on the client's connection), READY (active),
# the user it runs as, the JSON-RPC socket in its runtime directory, the watchdog
# (pinged; a stopped daemon is killed and restarted), `kill -9` of the main pid with a
# client looping over the socket (systemd restarts the daemon, the next connection's
# I/O passes), `dpkg -r` stops the units.
# run-timeout: 420
# shellcheck shell=bash

scenario_main() {
    local t0 deb root rel=$REPO/target/release
    [ -x "$rel/vhost-mpath" ] && [ -x "$rel/vhost-verify" ] || {
        fail "build first: cargo build --release -p vhost-mpath -p vhost-mpath-tests --bins"
        return 1
    }
    t0=$(now)
    deb=$("$REPO/packaging/build-deb" --no-build 2>"$LOGDIR/build-deb.log") ||
        { fail "packaging/build-deb (log: $LOGDIR/build-deb.log)"; cat "$LOGDIR/build-deb.log"; return 1; }
    echo "TIME: package built: $(elapsed "$t0") s ($(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB)"
    t0=$(now)
    root=$("$VM_DIR/deb-root" 2>"$LOGDIR/deb-root.log") ||
        { fail "tests/vm/deb-root (log: $LOGDIR/deb-root.log)"; cat "$LOGDIR/deb-root.log"; return 1; }
    echo "TIME: Debian root ready: $(elapsed "$t0") s ($root)"

    cp "$deb" "$SHARE/vhost-mpath.deb"
    cp "$rel/vhost-verify" "$SHARE/vhost-verify"
    cp "$VM_DIR/scenarios/deb.guest.sh" "$SHARE/guest.sh"
    cat "$INITRD" "$root/rootfs-extra-$KVER.cpio.gz" >"$RUN/initrd"
    INITRD=$RUN/initrd VM_MEM=1G VM_APPEND="rdinit=/debinit" VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-300} \
        vm_boot -drive "file=$root/root.img,format=raw,if=virtio,snapshot=on"
    grep -a -E '^(PASS|FAIL|INFO|TIME)' "$LOGDIR/console.log" | tr -d '\r' | sed 's/^/guest /'
    vm_guest_verdict
}
