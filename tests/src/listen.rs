//! Whether a Unix socket path is listening, read from `/proc/net/unix`.
//!
//! Probing with `connect()` would hand the server a client that disconnects at
//! once; reading the kernel's table checks `listen()` without touching the server.

use std::fs;
use std::path::Path;

/// `__SO_ACCEPTCON` in the Flags column: the socket is listening.
const SO_ACCEPTCON: u32 = 1 << 16;

/// True when a listening socket is bound to `path` (which must be absolute,
/// as the table shows the path as it was given to `bind()`).
pub fn is_listening(path: &Path) -> bool {
    let Ok(table) = fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let want = path.to_string_lossy();
    table.lines().skip(1).any(|line| {
        // Num RefCount Protocol Flags Type St Inode Path
        let cols: Vec<&str> = line.split_whitespace().collect();
        cols.len() >= 8
            && cols[7] == want
            && u32::from_str_radix(cols[3], 16).is_ok_and(|f| f & SO_ACCEPTCON != 0)
    })
}
