//! The methods: parameters checked field by field, results as JSON.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mpath::{Failback, LatencySummary, PathId, PathState, PolicyConfig, PolicyName};
use mpath_io::{Fault, LbaFault, ShapeConfig};
use serde_json::{json, Map, Value};

use super::{
    RpcError, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, SERVER_ERROR,
};
use crate::disk::Disk;
use crate::path_spec::PathSpec;

/// What the methods act on.
pub struct RpcContext {
    pub disk: Arc<Disk>,
    pub num_queues: u16,
    pub queue_size: u16,
    /// `inject_fault` exists only with `--lab`.
    pub lab: bool,
    /// The `--config` file, which `save_config` rewrites.
    pub config_file: Option<PathBuf>,
    /// Where `/metrics` is served (`--metrics-listen`), once bound.
    pub metrics: Option<std::net::SocketAddr>,
}

/// How long `set_path` offline and `remove_path` wait for in-flight I/O
/// unless the request says (`timeout_ms`).
const DRAIN_TIMEOUT_MS: u64 = 10_000;
const MAX_DRAIN_TIMEOUT_MS: u64 = 600_000;

pub(super) type Params = Map<String, Value>;
type Handler = fn(&RpcContext, &Params) -> Result<Value, RpcError>;

const METHODS: &[(&str, Handler)] = &[
    ("get_version", get_version),
    ("get_methods", get_methods),
    ("get_device", get_device),
    ("get_paths", get_paths),
    ("get_stats", get_stats),
    ("get_queues", get_queues),
    ("reset_stats", reset_stats),
    ("set_policy", set_policy),
    ("set_path", set_path),
    ("add_path", add_path),
    ("remove_path", remove_path),
    ("failback", failback),
    ("inject_fault", inject_fault),
    ("save_config", save_config),
    ("set_qos", super::qos::set_qos),
    ("get_qos", super::qos::get_qos),
    ("resize", super::resize::resize),
];

/// Handles one parsed JSON text (a request or a batch); `None`: nothing to
/// answer (notifications only).
pub fn handle_value(ctx: &RpcContext, v: Value) -> Option<Value> {
    match v {
        Value::Array(items) if items.is_empty() => {
            Some(RpcError::new(INVALID_REQUEST, "empty batch").response(Value::Null))
        }
        Value::Array(items) => {
            let out: Vec<Value> = items
                .into_iter()
                .filter_map(|r| handle_one(ctx, r))
                .collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        other => handle_one(ctx, other),
    }
}

/// Handles unparseable text.
pub fn parse_error(e: &serde_json::Error) -> Value {
    RpcError::new(PARSE_ERROR, format!("parse error: {e}")).response(Value::Null)
}

fn handle_one(ctx: &RpcContext, req: Value) -> Option<Value> {
    let Value::Object(mut obj) = req else {
        return Some(
            RpcError::new(INVALID_REQUEST, "a request must be an object").response(Value::Null),
        );
    };
    let id = obj.remove("id");
    let notification = id.is_none();
    let id = id.unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return Some(
            RpcError::new(INVALID_REQUEST, "id must be a string, a number or null")
                .response(Value::Null),
        );
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(RpcError::new(INVALID_REQUEST, "jsonrpc must be \"2.0\"").response(id));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str).map(str::to_owned) else {
        return Some(RpcError::new(INVALID_REQUEST, "method must be a string").response(id));
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Some(RpcError::params("params must be an object").response(id));
        }
    };
    let result = match METHODS.iter().find(|(name, _)| *name == method) {
        Some((_, handler)) if method != "inject_fault" || ctx.lab => {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(ctx, &params)))
                .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "internal error")))
        }
        _ => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    };
    if notification {
        return None;
    }
    Some(match result {
        Ok(v) => json!({"jsonrpc": "2.0", "result": v, "id": id}),
        Err(e) => e.response(id),
    })
}

// ---- parameter helpers: each names the offending field ----

pub(super) fn check_fields(p: &Params, allowed: &[&str]) -> Result<(), RpcError> {
    match p.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(RpcError::params(format!(
            "unknown field {k:?} (allowed: {})",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

pub(super) fn opt_u64(p: &Params, field: &str, max: u64) -> Result<Option<u64>, RpcError> {
    match p.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(Some(n)),
            _ => Err(RpcError::params(format!(
                "{field}: expected an integer from 0 to {max}"
            ))),
        },
    }
}

pub(super) fn opt_bool(p: &Params, field: &str) -> Result<Option<bool>, RpcError> {
    match p.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(RpcError::params(format!("{field}: expected true or false"))),
    }
}

fn opt_str<'a>(p: &'a Params, field: &str) -> Result<Option<&'a str>, RpcError> {
    match p.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::params(format!("{field}: expected a string"))),
    }
}

fn path_by_name(ctx: &RpcContext, p: &Params) -> Result<PathId, RpcError> {
    let name = opt_str(p, "name")?.ok_or_else(|| RpcError::params("name: required"))?;
    ctx.disk
        .engine
        .path_id(name)
        .ok_or_else(|| RpcError::params(format!("name: no path named {name:?}")))
}

// ---- methods ----

fn get_version(_: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    Ok(json!({"name": "vhost-mpath", "version": env!("CARGO_PKG_VERSION")}))
}

fn get_methods(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    Ok(METHODS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| *n != "inject_fault" || ctx.lab)
        .collect())
}

fn policy_json(cfg: &PolicyConfig) -> Value {
    json!({
        "name": cfg.name.as_str(),
        "rr_min_io": cfg.rr_min_io,
        "ewma_shift": cfg.ewma_shift,
        "weight_period_ms": cfg.weight_period.as_millis() as u64,
        "failback": cfg.failback.to_string(),
    })
}

fn get_device(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    let d = &ctx.disk;
    let serial_len = d
        .serial
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(d.serial.len());
    Ok(json!({
        "capacity_bytes": d.capacity_bytes(),
        "block_size": d.block_size,
        "num_queues": ctx.num_queues,
        "queue_size": ctx.queue_size,
        "read_only": d.read_only,
        "serial": String::from_utf8_lossy(&d.serial[..serial_len]),
        "discard": d.discard,
        "write_zeroes": d.write_zeroes,
        "policy": policy_json(&d.engine.policy_config()),
        "no_path_timeout_ms": d.engine.no_path_timeout().as_millis() as u64,
        "paths": d.engine.paths().len(),
        "lab": ctx.lab,
        "metrics_listen": ctx.metrics.map(|a| a.to_string()),
        "config_file": ctx.config_file.as_ref().map(|f| f.display().to_string()),
    }))
}

/// Each virtqueue of the current connection (`queue_status`): empty
/// before a frontend has set one up.
fn get_queues(_ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    let queues = crate::serve::current_device().map_or_else(Vec::new, |d| d.queue_status());
    Ok(json!({ "queues": queues }))
}

fn shaping_json(cfg: &ShapeConfig) -> Value {
    let mut v = json!({
        "delay_us": cfg.delay_us,
        "bw_mbps": cfg.bw_mbps,
        "fail": cfg.fail.map(|f| f.to_string()),
        "fail_after": cfg.fail_after,
        "hang": cfg.hang,
        "flush_delay_us": cfg.flush_delay_us,
        "flush_fail": cfg.flush_fail.map(|f| f.to_string()),
        "fail_lba": cfg.fail_lba.map(|l| l.to_string()),
        "fail_rate": mpath_io::fail_rate_fraction(cfg.fail_rate_ppm),
    });
    // The lab path models, only where a path has any (their keys as the
    // path spec names them, in snake case).
    let m = &cfg.model;
    if m.is_active() {
        v["model"] = json!({
            "channels": m.channels,
            "service_us": m.service_us,
            "service_dist": m.service_dist.to_string(),
            "bucket_iops": m.bucket_iops,
            "bucket_mib_s": m.bucket_mib_s,
            "bucket_burst_ms": m.bucket_burst_ms,
            "stall_every_ms": m.stall_every_ms,
            "stall_ms": m.stall_ms,
            "stall_writes_only": m.stall_writes_only,
            "rtt_us": m.rtt_us,
            "window_kib": m.window_kib,
            "loss_ppm": m.loss_ppm,
            "tail_alpha": f64::from(m.tail_alpha_milli) / 1000.0,
            "tail_us": m.tail_us,
        });
    }
    v
}

fn path_json(ctx: &RpcContext, id: PathId) -> Value {
    let d = &ctx.disk;
    let path = d.engine.path(id);
    let slot = d.slot(id);
    let mut v = json!({
        "name": path.name,
        "device": *slot.device_now.lock().unwrap_or_else(|e| e.into_inner()),
        "driver": slot.kind,
        "state": path.state().as_str(),
        "ana_state": path.ana_state().as_str(),
        "weight": path.weight(),
        "preferred": path.preferred(),
        "in_flight_requests": path.in_flight_requests(),
        "in_flight_bytes": path.in_flight_bytes(),
        "open": slot.is_open(),
        "size_bytes": slot.size_now.load(Ordering::Relaxed),
        "marginal": path.is_marginal(),
        "marginal_config": marginal_config_json(&d.engine.marginal_config(id)),
    });
    if !slot.info.controller.is_empty() {
        v["controller"] = json!(slot.info.controller);
    }
    if slot.info.inline {
        v["inline"] = json!(true);
    }
    if ctx.lab {
        v["shaping"] = shaping_json(&slot.shaping.get());
    }
    v
}

fn marginal_config_json(m: &mpath::MarginalConfig) -> Value {
    json!({
        "err_rate": m.err_rate,
        "sample_ms": m.sample_time.as_millis() as u64,
        "recheck_gap_ms": m.recheck_gap.as_millis() as u64,
    })
}

fn get_paths(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    let paths: Vec<Value> = (0..ctx.disk.engine.paths().len())
        .map(|i| path_json(ctx, PathId(i)))
        .collect();
    Ok(json!({ "paths": paths }))
}

fn latency_json(l: &LatencySummary) -> Value {
    let us = |ns: u64| ns as f64 / 1000.0;
    json!({
        "count": l.count,
        "mean": us(l.mean_ns),
        "p50": us(l.p50_ns),
        "p90": us(l.p90_ns),
        "p99": us(l.p99_ns),
        "p999": us(l.p999_ns),
        "max": us(l.max_ns),
    })
}

fn get_stats(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &["name"])?;
    let d = &ctx.disk;
    let only = match opt_str(p, "name")? {
        Some(_) => Some(path_by_name(ctx, p)?),
        None => None,
    };
    let paths: Vec<Value> = (0..d.engine.paths().len())
        .map(PathId)
        .filter(|id| only.is_none_or(|o| o == *id))
        .map(|id| {
            let s = d.engine.path_stats(id);
            json!({
                "name": s.name,
                "state": s.state,
                "ana_state": s.ana_state,
                "weight": s.weight,
                "in_flight_requests": s.in_flight_requests,
                "in_flight_bytes": s.in_flight_bytes,
                "selected": s.selected,
                "reads": s.reads,
                "writes": s.writes,
                "other": s.others,
                "bytes_read": s.read_bytes,
                "bytes_written": s.write_bytes,
                "errors": {"path": s.path_errors, "retry": s.retries, "media": s.io_errors},
                "failovers": s.path_errors,
                "retries": s.retries,
                "failures": s.failures,
                "recoveries": s.recoveries,
                "probes": {"ok": s.probes_ok, "failed": s.probes_failed},
                "marginal": {
                    "marginal": s.marginal,
                    "marked": s.marginal_marks,
                    "returned": s.marginal_returns,
                    "rechecks_failed": s.marginal_rechecks_failed,
                    "err_rate": s.marginal_err_rate,
                },
                "latency_us": {"read": latency_json(&s.read_latency), "write": latency_json(&s.write_latency)},
                "estimates": s.estimates,
            })
        })
        .collect();
    let np = d.engine.no_path_stats();
    Ok(json!({
        "device": {
            "capacity_bytes": d.capacity_bytes(),
            "no_path_waiting": np.waiting,
            "no_path_waits": np.parked,
            "no_path_resumed": np.resumed,
            "no_path_timeouts": np.timed_out,
            "errors_to_guest": d.guest_errors.load(Ordering::Relaxed),
            "bad_requests": d.bad_requests.load(Ordering::Relaxed),
            "qos_held": super::qos::held_json(ctx),
        },
        "paths": paths,
    }))
}

fn reset_stats(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    ctx.disk.engine.reset_stats();
    ctx.disk.guest_errors.store(0, Ordering::Relaxed);
    ctx.disk.bad_requests.store(0, Ordering::Relaxed);
    ctx.disk.qos.reset_stats();
    Ok(Value::Bool(true))
}

fn set_policy(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(
        p,
        &[
            "policy",
            "rr_min_io",
            "ewma_shift",
            "weight_period_ms",
            "failback",
        ],
    )?;
    let name = opt_str(p, "policy")?.ok_or_else(|| RpcError::params("policy: required"))?;
    let name = PolicyName::parse(name).ok_or_else(|| {
        RpcError::params(format!(
            "policy: unknown {name:?} (known: {})",
            PolicyName::all().join(", ")
        ))
    })?;
    let mut cfg = ctx.disk.engine.policy_config();
    cfg.name = name;
    if let Some(n) = opt_u64(p, "rr_min_io", u64::from(u32::MAX))? {
        if n == 0 {
            return Err(RpcError::params("rr_min_io: at least 1"));
        }
        cfg.rr_min_io = n as u32;
    }
    if let Some(n) = opt_u64(p, "ewma_shift", 16)? {
        if n == 0 {
            return Err(RpcError::params("ewma_shift: 1 to 16"));
        }
        cfg.ewma_shift = n as u32;
    }
    if let Some(ms) = opt_u64(p, "weight_period_ms", 3_600_000)? {
        if ms == 0 {
            return Err(RpcError::params("weight_period_ms: at least 1"));
        }
        cfg.weight_period = Duration::from_millis(ms);
    }
    if let Some(f) = opt_str(p, "failback")? {
        cfg.failback = Failback::parse(f)
            .ok_or_else(|| RpcError::params("failback: immediate, manual or seconds"))?;
    }
    ctx.disk.engine.set_policy(cfg.clone());
    Ok(policy_json(&cfg))
}

fn drain_timeout(p: &Params) -> Result<Duration, RpcError> {
    let ms = opt_u64(p, "timeout_ms", MAX_DRAIN_TIMEOUT_MS)?.unwrap_or(DRAIN_TIMEOUT_MS);
    Ok(Duration::from_millis(ms))
}

fn set_path(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(
        p,
        &[
            "name",
            "weight",
            "preferred",
            "state",
            "timeout_ms",
            "force",
        ],
    )?;
    let id = path_by_name(ctx, p)?;
    let weight = opt_u64(p, "weight", 100)?;
    let preferred = opt_bool(p, "preferred")?;
    let state = match opt_str(p, "state")? {
        None => None,
        Some("offline") => Some(PathState::Offline),
        Some("online") => Some(PathState::Usable),
        Some(s) => {
            return Err(RpcError::params(format!(
                "state: {s:?}: expected offline or online"
            )))
        }
    };
    let force = opt_bool(p, "force")?.unwrap_or(false);
    let bound = drain_timeout(p)?;
    let engine = &ctx.disk.engine;
    let path = engine.path(id);
    if path.state() == PathState::Removed {
        return Err(RpcError::params("name: the path was removed"));
    }
    // Offline first: when it is refused, nothing else has changed either.
    if state == Some(PathState::Offline) {
        ctx.disk.set_offline(id, force).map_err(RpcError::params)?;
    }
    if let Some(w) = weight {
        path.set_weight(w as u32);
    }
    if let Some(pref) = preferred {
        path.set_preferred(pref);
    }
    let mut drained = None;
    match state {
        // Offline drains: nothing new is sent, in-flight I/O finishes.
        Some(PathState::Offline) => {
            drained = Some(ctx.disk.drain(id, bound));
        }
        // Online: usable at once if it was offline; a failed path must
        // still pass its probes.
        Some(_) if path.state() == PathState::Offline => {
            engine.set_path_state(id, PathState::Usable)
        }
        _ => {}
    }
    let mut v = json!({
        "name": path.name,
        "state": path.state().as_str(),
        "weight": path.weight(),
        "preferred": path.preferred(),
    });
    if let Some(drained) = drained {
        v["drained"] = json!(drained);
        v["in_flight_requests"] = json!(path.in_flight_requests());
    }
    Ok(v)
}

fn add_path(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(
        p,
        &[
            "device",
            "name",
            "weight",
            "preferred",
            "direct",
            "inline",
            "block_size",
            "read_zeroes",
            "write_failover_delay_ms",
            "io_timeout_ms",
            "max_transfer",
            "max_segments",
            "delay_us",
            "bw_mbps",
            "fail",
            "fail_after",
            "hang",
            "flush_delay_us",
            "flush_fail",
            "fail_lba",
            "fail_rate",
            "marginal_err_rate",
            "marginal_sample_ms",
            "marginal_recheck_gap_ms",
        ],
    )?;
    let device = opt_str(p, "device")?
        .filter(|d| !d.is_empty())
        .ok_or_else(|| RpcError::params("device: required"))?;
    let name = opt_str(p, "name")?;
    if name == Some("") {
        return Err(RpcError::params("name: must not be empty"));
    }
    let u32_field = |f: &str| -> Result<Option<u32>, RpcError> {
        Ok(opt_u64(p, f, u64::from(u32::MAX))?.map(|v| v as u32))
    };
    let spec = PathSpec {
        device: device.to_string(),
        name: name.map(str::to_string),
        weight: opt_u64(p, "weight", 100)?.map(|w| w as u32),
        preferred: opt_bool(p, "preferred")?.unwrap_or(false),
        direct: opt_bool(p, "direct")?,
        inline: opt_bool(p, "inline")?,
        block_size: u32_field("block_size")?,
        read_zeroes: opt_bool(p, "read_zeroes")?,
        write_failover_delay_ms: opt_u64(p, "write_failover_delay_ms", 3_600_000)?,
        io_timeout_ms: u32_field("io_timeout_ms")?,
        max_transfer: opt_u64(p, "max_transfer", u64::from(u32::MAX))?,
        max_segments: opt_u64(p, "max_segments", 65536)?,
        delay_us: opt_u64(p, "delay_us", 60_000_000)?,
        bw_mbps: opt_u64(p, "bw_mbps", 1_000_000)?,
        fail: opt_str(p, "fail")?.map(str::to_string),
        fail_after: opt_u64(p, "fail_after", u64::MAX)?,
        hang: opt_bool(p, "hang")?.unwrap_or(false),
        flush_delay_us: opt_u64(p, "flush_delay_us", 60_000_000)?,
        flush_fail: opt_str(p, "flush_fail")?.map(str::to_string),
        fail_lba: opt_str(p, "fail_lba")?.map(str::to_string),
        fail_rate: opt_fail_rate(p)?.map(|ppm| mpath_io::fail_rate_fraction(ppm).to_string()),
        marginal_err_rate: opt_f64(p, "marginal_err_rate")?,
        marginal_sample_ms: opt_u64(p, "marginal_sample_ms", 3_600_000)?,
        marginal_recheck_gap_ms: opt_u64(p, "marginal_recheck_gap_ms", 86_400_000)?,
        // The path models are command-line and configuration keys only.
        ..Default::default()
    };
    // The lab keys are the spec's own list, named as this method takes them.
    let lab_keys = spec.lab_keys();
    if !ctx.lab && !lab_keys.is_empty() {
        let names: Vec<String> = lab_keys.iter().map(|k| k.replace('-', "_")).collect();
        return Err(RpcError::params(format!(
            "{}: lab shaping and faults need a daemon started with --lab",
            names.join(", ")
        )));
    }
    let id = ctx.disk.add_path(spec).map_err(RpcError::params)?;
    Ok(path_json(ctx, id))
}

/// What `fail` and `flush_fail` take, for error messages.
const FAULT_FORMS: &str = "an errno name (EIO), -ERRNO or an NVMe status (0x370)";

/// `fail_rate`: a number 0-1 or a string (`"0.1"`, `"10%"`), in ppm.
fn opt_fail_rate(p: &Params) -> Result<Option<u32>, RpcError> {
    let bad =
        || RpcError::params("fail_rate: expected a fraction 0-1 (0.1) or a percentage (\"10%\")");
    match p.get("fail_rate") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .and_then(|v| mpath_io::parse_fail_rate(&v.to_string()))
            .map(Some)
            .ok_or_else(bad),
        Some(Value::String(s)) => mpath_io::parse_fail_rate(s).map(Some).ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

/// An optional number.
fn opt_f64(p: &Params, key: &str) -> Result<Option<f64>, RpcError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| RpcError::params(format!("{key}: expected a number"))),
    }
}

fn failback(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    let engine = &ctx.disk.engine;
    let home = engine
        .request_failback()
        .map_err(|e| RpcError::new(SERVER_ERROR, e.to_string()))?;
    Ok(json!({ "name": engine.path(home).name }))
}

fn remove_path(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &["name", "force", "timeout_ms"])?;
    let id = path_by_name(ctx, p)?;
    let force = opt_bool(p, "force")?.unwrap_or(false);
    let bound = drain_timeout(p)?;
    let r = ctx
        .disk
        .remove_path(id, force, bound)
        .map_err(RpcError::params)?;
    Ok(json!({
        "name": ctx.disk.engine.path(id).name,
        "state": "removed",
        "drained": r.drained,
        "in_flight_requests": r.in_flight_requests,
        "closed": !ctx.disk.slot(id).is_open(),
    }))
}

fn save_config(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(p, &[])?;
    let file = ctx.config_file.as_ref().ok_or_else(|| {
        RpcError::new(
            SERVER_ERROR,
            "the daemon was started without --config: there is no file to save to",
        )
    })?;
    let saved =
        crate::save::save_config(file, &ctx.disk).map_err(|e| RpcError::new(INTERNAL_ERROR, e))?;
    Ok(json!({"file": file.display().to_string(), "paths": saved.paths, "policy": saved.policy}))
}

/// A fault field of `inject_fault`: absent (`None`), cleared (`null`, `""`,
/// `"none"`) or set.
fn opt_fault<T>(
    p: &Params,
    key: &str,
    parse: fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<Option<T>>, RpcError> {
    match p.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) if s.is_empty() || s == "none" => Ok(Some(None)),
        Some(Value::String(s)) => parse(s)
            .map(|v| Some(Some(v)))
            .ok_or_else(|| RpcError::params(format!("{key}: {s:?}: expected {expected}"))),
        Some(_) => Err(RpcError::params(format!("{key}: expected a string"))),
    }
}

fn inject_fault(ctx: &RpcContext, p: &Params) -> Result<Value, RpcError> {
    check_fields(
        p,
        &[
            "name",
            "delay_us",
            "bw_mbps",
            "fail",
            "fail_after",
            "hang",
            "flush_delay_us",
            "flush_fail",
            "fail_lba",
            "fail_rate",
            "clear",
        ],
    )?;
    let id = path_by_name(ctx, p)?;
    let shaping = ctx.disk.shaping(id);
    let mut cfg = if opt_bool(p, "clear")?.unwrap_or(false) {
        ShapeConfig::default()
    } else {
        shaping.get()
    };
    if let Some(v) = opt_u64(p, "delay_us", 60_000_000)? {
        cfg.delay_us = v;
    }
    if let Some(v) = opt_u64(p, "bw_mbps", 1_000_000)? {
        cfg.bw_mbps = v;
    }
    if let Some(v) = opt_fault(p, "fail", Fault::parse, FAULT_FORMS)? {
        cfg.fail = v;
    }
    if let Some(v) = opt_fault(p, "flush_fail", Fault::parse, FAULT_FORMS)? {
        cfg.flush_fail = v;
    }
    if let Some(v) = opt_fault(
        p,
        "fail_lba",
        LbaFault::parse,
        "START-END[:FAULT] in 512-byte sectors",
    )? {
        cfg.fail_lba = v;
    }
    if let Some(v) = opt_u64(p, "flush_delay_us", 60_000_000)? {
        cfg.flush_delay_us = v;
    }
    if let Some(v) = opt_u64(p, "fail_after", u64::MAX)? {
        cfg.fail_after = v;
    }
    if let Some(v) = opt_bool(p, "hang")? {
        cfg.hang = v;
    }
    if let Some(v) = opt_fail_rate(p)? {
        cfg.fail_rate_ppm = v;
    }
    shaping.set(&cfg);
    Ok(shaping_json(&cfg))
}
