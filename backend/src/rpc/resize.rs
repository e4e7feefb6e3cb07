//! `resize`: the disk takes its paths' new size (see `crate::resize`).

use serde_json::{json, Value};

use super::methods::{check_fields, opt_bool, opt_u64, Params, RpcContext};
use super::{RpcError, SERVER_ERROR};
use crate::device::ConfigNotice;
use crate::resize::{resize as do_resize, Refused};

/// `{"size"?, "force"?}` → the capacity before and after, and whether the
/// frontend was told.
pub(super) fn resize(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &["size", "force"])?;
    let want = opt_u64(p, "size", u64::MAX)?;
    let force = opt_bool(p, "force")?.unwrap_or(false);
    let r = do_resize(&ctx.disk, want, force, "resize").map_err(|e| match e {
        Refused::BadSize(m) => RpcError::params(m),
        Refused::Paths(m) => RpcError::new(SERVER_ERROR, m),
    })?;
    let frontend = match &r.notice {
        None => "unchanged".to_string(),
        Some(ConfigNotice::Sent) => "notified".to_string(),
        Some(ConfigNotice::NoChannel) => "no-channel".to_string(),
        Some(ConfigNotice::Failed(e)) => format!("failed: {e}"),
    };
    Ok(json!({
        "old_capacity_bytes": r.old_bytes,
        "capacity_bytes": r.new_bytes,
        "changed": r.old_bytes != r.new_bytes,
        "frontend": frontend,
    }))
}
