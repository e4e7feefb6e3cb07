//! The control plane: JSON-RPC 2.0 over a Unix stream socket, in SPDK's
//! manner (objects one after another on the stream, batches as arrays,
//! newline-terminated responses). Operators change policy, paths and lab
//! faults and read per-path statistics while the guest runs.

mod framing;
mod methods;
mod qos;
mod resize;
mod server;

pub use framing::{Frame, Framer, MAX_REQUEST};
pub use methods::{handle_value, parse_error, RpcContext};
pub use server::{spawn, RpcServerConfig};

use serde_json::{json, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// Implementation-defined server error (JSON-RPC reserves -32000 to -32099).
pub const SERVER_ERROR: i64 = -32000;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn response(&self, id: Value) -> Value {
        json!({"jsonrpc": "2.0", "error": {"code": self.code, "message": self.message}, "id": id})
    }
}
