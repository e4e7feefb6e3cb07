//! The daemon's life: open the disk, then serve one frontend connection
//! after another on the same listening socket until a signal stops it.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::{error, info, warn};
use rustix::fs::FileType;
use rustix::net::{sockopt, AddressFamily, SocketType};
use vhost::vhost_user::{BackendReqHandler, Listener};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use crate::config::{ensure_image, Settings, Socket};
use crate::device::BlkDevice;
use crate::disk::Disk;
use crate::vhost_user::Handler;
use crate::{metrics, rpc, shutdown};

/// How long a stop signal waits for in-flight I/O before exiting anyway.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(30);

/// The device of the current connection, for the signal thread and
/// `get_queues`.
static CURRENT: Mutex<Option<BlkDevice>> = Mutex::new(None);

/// Start-up failures (bad config, missing device): exit code 2.
#[derive(Debug)]
pub struct StartError(pub String);

pub fn open_disk(s: &Settings) -> Result<Disk, StartError> {
    if let Some((file, size)) = &s.image {
        ensure_image(file, *size).map_err(StartError)?;
    }
    Disk::open(s).map_err(StartError)
}

fn listener(s: &Settings) -> Result<Listener, StartError> {
    match &s.socket {
        Socket::Path(p) => {
            let gid = match &s.socket_group {
                Some(g) => Some(
                    crate::socket::group_id(g)
                        .map_err(|e| StartError(format!("--socket-group: {e}")))?,
                ),
                None => None,
            };
            let l = crate::socket::listen(p, gid).map_err(|e| StartError(format!("socket {e}")))?;
            Ok(Listener::from(l))
        }
        Socket::Fd(fd) => {
            let not_socket = || StartError(format!("--fd {fd}: not an open socket"));
            let owned = crate::socket::inherited_fd(*fd).map_err(|_| not_socket())?;
            let st = rustix::fs::fstat(&owned).map_err(|_| not_socket())?;
            if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
                return Err(not_socket());
            }
            // A datagram socket or an unlistened one (a wrong .socket unit)
            // would fail every accept: refuse it at start-up instead.
            if sockopt::socket_domain(&owned).ok() != Some(AddressFamily::UNIX)
                || sockopt::socket_type(&owned).ok() != Some(SocketType::STREAM)
                || sockopt::socket_acceptconn(&owned).ok() != Some(true)
            {
                return Err(StartError(format!(
                    "fd {fd} (--fd or socket activation): not a listening Unix stream socket \
                     (a .socket unit needs ListenStream=)"
                )));
            }
            Ok(Listener::from(std::os::unix::net::UnixListener::from(
                owned,
            )))
        }
    }
}

/// The device of the connection being served (or awaited).
pub fn current_device() -> Option<BlkDevice> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Waits (up to `SHUTDOWN_DRAIN`) until no request is in flight.
fn wait_for_in_flight() {
    let start = Instant::now();
    loop {
        let n = CURRENT
            .lock()
            .map(|c| c.as_ref().map_or(0, |d| d.in_flight()))
            .unwrap_or(0);
        if n == 0 {
            return;
        }
        if start.elapsed() > SHUTDOWN_DRAIN {
            warn!("{n} requests still in flight after {SHUTDOWN_DRAIN:?}; exiting");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn_signal_thread(
    socket: Socket,
    rpc_socket: Option<std::path::PathBuf>,
) -> Result<(), StartError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| StartError(format!("signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                crate::systemd::notify("STOPPING=1");
                shutdown::request();
                // First: holding the workers below would stall a teardown.
                crate::teardown::wait(SHUTDOWN_DRAIN);
                let dev = CURRENT.lock().map(|c| c.clone()).unwrap_or(None);
                let tracked = dev.as_ref().is_some_and(|d| d.tracks_inflight());
                if tracked {
                    info!("signal {sig}: no new requests; the inflight region holds what is in flight");
                } else {
                    info!("signal {sig}: no new requests, waiting for in-flight I/O");
                }
                // With inflight tracking the frontend's region is consistent
                // once no worker is publishing a used entry: the next daemon
                // resubmits the rest. The workers stay held until exit.
                let _held = dev.as_ref().filter(|_| tracked).map(|d| d.hold_workers());
                if !tracked {
                    wait_for_in_flight();
                }
                if let Socket::Path(p) = &socket {
                    let _ = std::fs::remove_file(p);
                }
                if let Some(p) = &rpc_socket {
                    let _ = std::fs::remove_file(p);
                }
                info!("stopped");
                std::process::exit(0);
            }
        })
        .map_err(|e| StartError(format!("signal thread: {e}")))?;
    Ok(())
}

/// Serves frontends until a signal stops the process.
pub fn run(s: &Settings, disk: Disk) -> Result<(), StartError> {
    let disk = Arc::new(disk);
    let metrics = match &s.metrics_listen {
        Some(addr) => Some(metrics::spawn(addr, disk.clone()).map_err(StartError)?),
        None => None,
    };
    if let Some(sock) = &s.rpc_socket {
        let ctx = Arc::new(rpc::RpcContext {
            disk: disk.clone(),
            num_queues: s.num_queues,
            queue_size: s.queue_size,
            lab: s.lab,
            config_file: s.config_file.clone(),
            metrics,
        });
        let cfg = rpc::RpcServerConfig {
            socket: sock.clone(),
            group: s.rpc_socket_group.clone(),
        };
        rpc::spawn(&cfg, ctx).map_err(StartError)?;
    }
    crate::checker::spawn(disk.clone()).map_err(StartError)?;
    crate::ana::spawn(disk.clone());
    spawn_signal_thread(s.socket.clone(), s.rpc_socket.clone())?;
    // Last: the vhost-user socket appearing tells QEMU and the tests that
    // everything else (the control socket included) is ready.
    let listener = listener(s)?;
    // accept() answers None on a non-blocking socket (an inherited fd can
    // be one): the loop below would spin.
    listener
        .set_nonblocking(false)
        .map_err(|e| StartError(format!("socket: {e}")))?;
    info!(
        "serving {} bytes in blocks of {} over {} path(s), policy {}, {} queue(s) on {} thread(s)",
        disk.capacity_bytes(),
        disk.block_size,
        disk.engine.paths().len(),
        disk.engine.policy_name().as_str(),
        s.num_queues,
        s.queue_threads()
    );
    // The disk is open and the socket listens: systemd may start QEMU.
    crate::systemd::notify("READY=1");
    crate::systemd::spawn_watchdog().map_err(StartError)?;
    loop {
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let dev = BlkDevice::new(
            disk.clone(),
            s.num_queues,
            s.queue_size,
            Duration::from_micros(u64::from(s.poll_us)),
            s.submit_batch,
            mem.clone(),
        )
        .map_err(|e| StartError(format!("io_uring: {e}")))?;
        dev.offer_inflight(s.inflight);
        dev.set_registration(s.registration);
        let handler = Handler::new(dev.clone(), mem, s.queue_threads())
            .map_err(|e| StartError(format!("queue threads: {e}")))?;
        let handler = Arc::new(Mutex::new(handler));
        *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(dev.clone());
        // The last connection's device went with that: its guest memory too.
        crate::vhost_user::sweep_left();
        // A second descriptor of the connection: the serve loop peeks at
        // the messages through it (see `backend_channel`).
        let accepted = listener.accept().and_then(|s| match s {
            Some(s) => Ok(Some((
                s.try_clone()
                    .map_err(vhost::vhost_user::Error::SocketError)?,
                s,
            ))),
            None => Ok(None),
        });
        let (peek, mut conn) = match accepted {
            Ok(Some((peek, s))) => (peek, BackendReqHandler::from_stream(s, handler.clone())),
            Ok(None) => continue,
            Err(e) => {
                error!("accepting a frontend: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        info!("frontend connected");
        crate::teardown::connected(conn.as_raw_fd());
        let connected = Instant::now();
        // Any error ends the connection: the frontend reconnects and sets
        // the device up again.
        loop {
            // The backend request channel's descriptor, before the crate
            // takes it (see `backend_channel`).
            if let Some(fd) = crate::vhost_user::backend_channel::peek_backend_req_fd(peek.as_fd())
            {
                dev.stash_backend_req_fd(fd);
            }
            if let Err(e) = conn.handle_request() {
                match e {
                    vhost::vhost_user::Error::Disconnected
                    | vhost::vhost_user::Error::PartialMessage => {
                        info!("frontend disconnected")
                    }
                    e => info!("frontend connection ended: {e}"),
                }
                break;
            }
        }
        crate::teardown::begin();
        drop(conn);
        // Its second descriptor too: the frontend sees the end only then.
        drop(peek);
        handler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop_threads();
        // Late completions of the old frontend go nowhere: its guest may
        // already reuse that memory.
        dev.discard_in_flight();
        // The pages pinned as fixed buffers go back now, not when the next
        // frontend's device replaces this one.
        dev.forget_memory();
        let r = dev.reg_stats();
        if r.fixed_buf + r.plain_buf + r.fixed_file > 0 {
            info!(
                "io_uring registration this connection: fixed_buf={} plain_buf={} fixed_file={} \
                 polled={} registrations={} registered_bytes={}",
                r.fixed_buf,
                r.plain_buf,
                r.fixed_file,
                r.polled,
                r.registrations,
                r.registered_bytes
            );
        }
        info!(
            "connection closed after {:.1?}: queues stopped",
            connected.elapsed()
        );
        crate::teardown::end();
        if shutdown::requested() {
            // The signal thread ends the process (sockets removed, "stopped").
            loop {
                std::thread::park();
            }
        }
    }
}
