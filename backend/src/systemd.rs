//! systemd integration without libsystemd: socket activation
//! (`LISTEN_FDS`/`LISTEN_PID`, first fd 3) and `sd_notify` datagrams
//! (`READY=1`, `STOPPING=1`, `WATCHDOG=1`) to `$NOTIFY_SOCKET`.
//!
//! Both protocols are stable and tiny (sd_listen_fds(3), sd_notify(3)):
//! writing them here keeps a C library and its ABI out of the daemon.

use std::io;
use std::os::fd::IntoRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use log::{info, warn};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;

/// The socket systemd (or `systemd-socket-activate`) passed us, if any:
/// `LISTEN_PID` must name this process (else the variables were meant for
/// a parent and are ignored). Both variables are removed so that nothing
/// this process starts mistakes them for its own. Exactly one socket is
/// accepted: one daemon serves one disk on one socket. Call before any
/// thread starts (it changes the environment).
pub fn take_listen_fd() -> Result<Option<i32>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    let n: i32 = fds
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={fds:?}: not a number"))?;
    match n {
        0 => Ok(None),
        1 => {
            let err = |e: io::Error| format!("LISTEN_FDS=1 but fd {LISTEN_FDS_START}: {e}");
            let fd = crate::socket::inherited_fd(LISTEN_FDS_START).map_err(err)?;
            rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
                .map_err(|e| err(e.into()))?;
            // Handed on by number (Socket::Fd), taken again by serve.
            let _ = fd.into_raw_fd();
            Ok(Some(LISTEN_FDS_START))
        }
        n => Err(format!(
            "LISTEN_FDS={n}: expected one socket (one daemon serves one disk; \
             give the .socket unit a single ListenStream=)"
        )),
    }
}

/// The `sd_notify` channel: a datagram socket connected to `$NOTIFY_SOCKET`.
pub struct Notifier {
    sock: UnixDatagram,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace);
    /// `None` when unset, i.e. not started by systemd as `Type=notify`.
    pub fn from_env() -> Result<Option<Notifier>, String> {
        let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let target = target.to_string_lossy().into_owned();
        let err = |e: io::Error| format!("NOTIFY_SOCKET={target}: {e}");
        let addr = match target.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes()).map_err(err)?,
            None if target.starts_with('/') => SocketAddr::from_pathname(&target).map_err(err)?,
            None => return Err(format!("NOTIFY_SOCKET={target}: neither a path nor @name")),
        };
        let sock = UnixDatagram::unbound().map_err(err)?;
        sock.connect_addr(&addr).map_err(err)?;
        Ok(Some(Notifier { sock }))
    }

    /// Sends one state datagram (`READY=1`, `STOPPING=1`, ...).
    pub fn send(&self, state: &str) -> io::Result<()> {
        let n = self.sock.send(state.as_bytes())?;
        if n != state.len() {
            return Err(io::Error::other("short write"));
        }
        Ok(())
    }
}

/// Notifies `state` if systemd asked for notifications; failures are
/// logged, never fatal (the daemon serves the disk either way).
pub fn notify(state: &str) {
    match Notifier::from_env() {
        Ok(Some(n)) => {
            if let Err(e) = n.send(state) {
                warn!("sd_notify {state}: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => warn!("sd_notify {state}: {e}"),
    }
}

/// The watchdog period systemd expects (`WATCHDOG_USEC`, for this process
/// when `WATCHDOG_PID` is set): pings go out every half of it.
pub fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Starts the watchdog pinger when `WATCHDOG_USEC` is set. The pings come
/// from a thread of their own: they say the process is alive and not
/// wedged in a way that stops threads from running.
pub fn spawn_watchdog() -> Result<(), String> {
    let Some(every) = watchdog_interval() else {
        return Ok(());
    };
    let Some(n) = Notifier::from_env()? else {
        warn!("WATCHDOG_USEC is set but NOTIFY_SOCKET is not: no watchdog pings");
        return Ok(());
    };
    info!("systemd watchdog: WATCHDOG=1 every {every:?}");
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || loop {
            if let Err(e) = n.send("WATCHDOG=1") {
                warn!("sd_notify WATCHDOG=1: {e}");
            }
            std::thread::sleep(every);
        })
        .map_err(|e| format!("watchdog thread: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_path_notify_sockets() {
        let name = format!("vhost-mpath-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        let n = Notifier {
            sock: {
                let s = UnixDatagram::unbound().unwrap();
                s.connect_addr(&addr).unwrap();
                s
            },
        };
        n.send("READY=1").unwrap();
        let mut buf = [0u8; 64];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
    }
}
