//! Diagnostic switches for tests: each breaks something on purpose, so that
//! a test can show what the normal code prevents. Never for production.

use std::sync::OnceLock;

/// The daemon kills itself (SIGKILL) the first time a worker is about to
/// signal the guest, after it published the used entries: the window in
/// which a crash leaves a completion the guest is never told about, unless
/// the next daemon signals the call fd it is given (as it does).
pub const DIE_BEFORE_CALL_ENV: &str = "VHOST_MPATH_DIAG_DIE_BEFORE_CALL";

/// See [`DIE_BEFORE_CALL_ENV`]; one atomic load when it is off.
pub fn die_before_call() {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var_os(DIE_BEFORE_CALL_ENV).is_some_and(|v| v == "1"));
    if on {
        log::warn!(
            "{DIE_BEFORE_CALL_ENV}: killing the daemon between publishing used entries and \
             signalling the guest"
        );
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// The daemon kills itself (SIGKILL) when the Nth used entry (N: the
/// variable's value) published while tracking inflight I/O is on the used
/// ring and the inflight region's used index has not followed: the window
/// the next daemon's repair of the last batch is for.
pub const DIE_BEFORE_INFLIGHT_USED_ENV: &str = "VHOST_MPATH_DIAG_DIE_BEFORE_INFLIGHT_USED";

/// See [`DIE_BEFORE_INFLIGHT_USED_ENV`]; one atomic load when it is off.
pub fn die_before_inflight_used() {
    static AT: OnceLock<u64> = OnceLock::new();
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let at = *AT.get_or_init(|| {
        std::env::var(DIE_BEFORE_INFLIGHT_USED_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    if at == 0 || SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 != at {
        return;
    }
    log::warn!(
        "{DIE_BEFORE_INFLIGHT_USED_ENV}: killing the daemon between the used ring's index and the \
         inflight region's"
    );
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
}
