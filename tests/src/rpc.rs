//! A minimal JSON-RPC client for the daemon's control socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

pub struct RpcClient {
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl RpcClient {
    pub fn connect(socket: &Path) -> std::io::Result<RpcClient> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(RpcClient {
            reader: BufReader::new(s),
            next_id: 1,
        })
    }

    /// Sends raw bytes (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.reader.get_mut().write_all(bytes)
    }

    /// Reads one newline-terminated response.
    pub fn read_response(&mut self) -> std::io::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }

    /// Calls `method`; `Ok(result)` or `Err(error object)`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let mut text = serde_json::to_vec(&req).unwrap();
        text.push(b'\n');
        self.send_raw(&text)
            .map_err(|e| json!({"io": e.to_string()}))?;
        let resp = self
            .read_response()
            .map_err(|e| json!({"io": e.to_string()}))?;
        assert_eq!(resp["id"], json!(id), "response to another request: {resp}");
        match resp.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(resp["result"].clone()),
        }
    }

    /// Calls `method` and panics on an error.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params)
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }
}

/// Every policy the daemon's `set_policy` takes, in the order the benchmarks
/// print them (this crate drives the daemon from outside, so it keeps its
/// own copy of mpath's `PolicyName::all()`).
pub const POLICIES: [&str; 7] = [
    "round-robin",
    "queue-depth",
    "service-time",
    "adaptive",
    "numa",
    "active-standby",
    "auto",
];

/// The statistics object of path `name` from `get_stats`.
pub fn path_stats(stats: &Value, name: &str) -> Value {
    stats["paths"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no path {name} in {stats}"))
}
