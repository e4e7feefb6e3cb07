//! `set_qos` and `get_qos`: the disk's QoS limits at runtime (libvirt's
//! `<iotune>` names; see `crate::qos`).

use mpath::{QosLimits, QOS_FIELDS, QOS_VALUE_MAX};
use serde_json::{json, Value};

use super::methods::{check_fields, opt_u64, Params, RpcContext};
use super::RpcError;

/// Any of the limits by name → the limits now. Fields not given keep their
/// value; 0 removes a limit. The buckets start empty, as with QEMU.
pub(super) fn set_qos(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &QOS_FIELDS)?;
    let mut l = ctx.disk.qos.limits();
    for name in QOS_FIELDS {
        if let Some(v) = opt_u64(p, name, QOS_VALUE_MAX)? {
            if let Some(f) = l.field_mut(name) {
                *f = v;
            }
        }
    }
    l.validate().map_err(RpcError::params)?;
    ctx.disk.qos.set(l, ctx.disk.engine.now());
    Ok(qos_json(ctx, &l))
}

/// The limits and what they held.
pub(super) fn get_qos(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    Ok(qos_json(ctx, &ctx.disk.qos.limits()))
}

fn qos_json(ctx: &RpcContext, l: &QosLimits) -> Value {
    json!({
        "limits": l,
        "active": l.any(),
        "held": held_json(ctx),
    })
}

/// What the limits held (also in `get_stats`).
pub(super) fn held_json(ctx: &RpcContext) -> Value {
    let h = ctx.disk.qos.held();
    json!({
        "requests": h.requests,
        "bytes": h.bytes,
        "seconds": h.seconds,
        "holding": h.holding,
    })
}
