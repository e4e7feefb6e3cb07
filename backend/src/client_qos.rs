//! `vhost-mpath qos [--set KEY=VALUE,...]`: the disk's QoS limits through
//! `get_qos` / `set_qos`.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::client::{failed, print_json, CmdResult, Connection};

/// `KEY=VALUE[,...]` as `set_qos` parameters: only the keys given, so the
/// daemon keeps the others (it validates the whole set).
pub fn set_params(spec: &str) -> Result<Value, String> {
    let mut m = Map::new();
    for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--set {kv:?}: expected KEY=VALUE"))?;
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("--set {k}: {v:?} is not a whole number"))?;
        m.insert(k.trim().to_string(), json!(v));
    }
    if m.is_empty() {
        return Err("--set: no KEY=VALUE".into());
    }
    Ok(Value::Object(m))
}

/// The limits that are set (`KEY=VALUE ...`, or `none`) and what was held.
pub fn summary(v: &Value) -> String {
    let set: Vec<String> = mpath::QOS_FIELDS
        .iter()
        .filter_map(|k| match v["limits"][k].as_u64() {
            Some(n) if n > 0 => Some(format!("{k}={n}")),
            _ => None,
        })
        .collect();
    let h = &v["held"];
    format!(
        "limits: {}\nheld: {} requests, {} bytes, {:.3} s waited; holding {}\n",
        if set.is_empty() {
            "none".into()
        } else {
            set.join(" ")
        },
        h["requests"].as_u64().unwrap_or(0),
        h["bytes"].as_u64().unwrap_or(0),
        h["seconds"].as_f64().unwrap_or(0.0),
        h["holding"].as_u64().unwrap_or(0),
    )
}

pub fn qos(socket: &Path, set: Option<&str>, as_json: bool) -> CmdResult {
    let call = match set {
        Some(spec) => ("set_qos", set_params(spec).map_err(|e| (2, e))?),
        None => ("get_qos", json!({})),
    };
    let mut c = Connection::open(socket).map_err(failed)?;
    let v = c.call(call.0, call.1).map_err(failed)?;
    if as_json {
        print_json(&v);
    } else {
        print!("{}", summary(&v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_params_keeps_only_the_keys_given() {
        let p = set_params("total_iops_sec=500, total_iops_sec_max=0").unwrap();
        assert_eq!(p, json!({"total_iops_sec": 500, "total_iops_sec_max": 0}));
        assert!(set_params("total_iops_sec").is_err());
        assert!(set_params("total_iops_sec=-1").is_err());
        assert!(set_params(" , ").is_err());
    }

    #[test]
    fn summary_lists_the_set_limits() {
        let v = json!({"limits": {"total_iops_sec": 500, "read_bytes_sec": 0},
            "held": {"requests": 3, "bytes": 12288, "seconds": 0.25, "holding": 1}});
        assert_eq!(
            summary(&v),
            "limits: total_iops_sec=500\nheld: 3 requests, 12288 bytes, 0.250 s waited; holding 1\n"
        );
        assert!(summary(&json!({"limits": {}, "held": {}})).starts_with("limits: none\n"));
    }
}
