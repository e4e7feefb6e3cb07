//! The socket: one thread accepts, one thread per client (a stalled or
//! flooding client only ever blocks itself; the data path never waits on
//! the control plane). Only root, the daemon's user and members of the
//! configured group are served (SO_PEERCRED), whatever the socket's mode.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};
use serde_json::Value;

use super::framing::{Frame, Framer};
use super::methods::{handle_value, parse_error, RpcContext};
use super::{RpcError, INVALID_REQUEST, PARSE_ERROR};
use crate::ratelimit::RateLimitedLog;
use crate::socket::{daemon_uid, group_id, Peer};

/// Clients served at once; more are refused with an error.
const MAX_CLIENTS: usize = 32;
/// A client silent this long (mid-request or idle) is dropped.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

pub struct RpcServerConfig {
    pub socket: PathBuf,
    /// Group allowed to use the socket (mode 0660 instead of 0600).
    pub group: Option<String>,
}

/// Creates the socket (mode 0600, or 0660 for `group`) and serves it in
/// the background.
pub fn spawn(cfg: &RpcServerConfig, ctx: Arc<RpcContext>) -> Result<(), String> {
    let path = &cfg.socket;
    let gid = match &cfg.group {
        Some(g) => Some(group_id(g).map_err(|e| format!("--rpc-socket-group: {e}"))?),
        None => None,
    };
    let listener = crate::socket::listen(path, gid).map_err(|e| format!("rpc socket {e}"))?;
    info!("JSON-RPC on {}", path.display());
    let clients = Arc::new(AtomicUsize::new(0));
    let uid = daemon_uid();
    let mut refusals = RateLimitedLog::new();
    std::thread::Builder::new()
        .name("rpc-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else { continue };
                if let Err(why) = check_peer(&stream, uid, gid) {
                    refusals.warn(format_args!("rpc: refused a client: {why}"));
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = reply(
                        &mut stream,
                        &RpcError::new(super::SERVER_ERROR, &why).response(Value::Null),
                    );
                    continue;
                }
                if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                    clients.fetch_sub(1, Ordering::AcqRel);
                    let _ = reply(
                        &mut stream,
                        &RpcError::new(super::SERVER_ERROR, "too many clients")
                            .response(Value::Null),
                    );
                    continue;
                }
                let ctx = ctx.clone();
                let clients = clients.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("rpc-client".into())
                        .spawn(move || {
                            serve_client(stream, &ctx);
                            clients.fetch_sub(1, Ordering::AcqRel);
                        });
                if spawned.is_err() {
                    warn!("rpc: cannot start a client thread");
                }
            }
        })
        .map_err(|e| format!("rpc thread: {e}"))?;
    Ok(())
}

/// Root, the daemon's user or a member of the socket's group; else why not.
fn check_peer(stream: &UnixStream, uid: u32, gid: Option<u32>) -> Result<(), String> {
    let peer =
        Peer::of(stream).map_err(|e| format!("permission denied: no peer credentials ({e})"))?;
    if peer.allowed(uid, gid) {
        return Ok(());
    }
    let who = match gid {
        Some(g) => format!("root, the daemon's uid {uid}, nor in group {g}"),
        None => format!("root nor the daemon's uid {uid}"),
    };
    Err(format!(
        "permission denied: uid {} (pid {}) is neither {who}",
        peer.uid, peer.pid
    ))
}

fn reply(stream: &mut UnixStream, v: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(v).unwrap_or_default();
    text.push(b'\n');
    stream.write_all(&text)
}

fn serve_client(mut stream: UnixStream, ctx: &RpcContext) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IDLE_TIMEOUT));
    let mut framer = Framer::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        framer.push(&buf[..n]);
        while let Some(frame) = framer.next_frame() {
            let response = match frame {
                Frame::Text(text) => match serde_json::from_slice::<Value>(&text) {
                    Ok(v) => handle_value(ctx, v),
                    Err(e) => Some(parse_error(&e)),
                },
                Frame::Garbage => Some(
                    RpcError::new(
                        PARSE_ERROR,
                        "parse error: a request is a JSON object or array",
                    )
                    .response(Value::Null),
                ),
                Frame::TooLarge => {
                    let _ = reply(
                        &mut stream,
                        &RpcError::new(INVALID_REQUEST, "request larger than 1 MiB")
                            .response(Value::Null),
                    );
                    return;
                }
            };
            if let Some(r) = response {
                if reply(&mut stream, &r).is_err() {
                    return;
                }
            }
        }
    }
}
