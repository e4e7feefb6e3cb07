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
