//! The socket: one thread accepts, one thread per client (a stalled or
//! flooding client only ever blocks itself; the data path never waits on
//! the control plane).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};
use serde_json::Value;

use super::framing::{Frame, Framer};
use super::methods::{handle_value, parse_error, RpcContext};
use super::{RpcError, INVALID_REQUEST, PARSE_ERROR};

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
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).map_err(|e| format!("rpc socket {}: {e}", path.display()))?;
    let mode = if cfg.group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("rpc socket {}: {e}", path.display()))?;
    if let Some(g) = &cfg.group {
        set_group(path, g)?;
    }
    info!("JSON-RPC on {}", path.display());
    let clients = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("rpc-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else { continue };
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

fn set_group(path: &std::path::Path, group: &str) -> Result<(), String> {
    let gid = std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.split(':');
                (f.next() == Some(group)).then(|| f.nth(1)?.parse::<u32>().ok())?
            })
        })
        .or_else(|| group.parse().ok())
        .ok_or_else(|| format!("--rpc-socket-group {group}: no such group"))?;
    std::os::unix::fs::chown(path, None, Some(gid))
        .map_err(|e| format!("rpc socket group {group}: {e}"))
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
