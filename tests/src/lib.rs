//! Test support for vhost-mpath: start a vhost-user-blk server (our daemon or
//! `qemu-storage-daemon`) and drive it with an external vhost-user frontend
//! (libblkio's `virtio-blk-vhost-user` driver), the way a VMM would.
//!
//! - [`server`]: spawn a server process, wait until its socket listens, stop it.
//! - [`disk`]: describe a disk once ([`DiskSpec`]) and launch it on either server.
//! - [`client`]: a blkio client with synchronous helpers ([`Client`]).
//! - [`adversary`]: a hand-written vhost-user frontend that sends what a hostile guest could.
//! - [`loadgen`]: a queue-depth-N random I/O loop for the benchmark.
//!
//! Running:
//! - `cargo test -p vhost-mpath-tests`: the tests against our daemon, found as
//!   `$VHOST_MPATH_BIN`, else `target/release/vhost-mpath` if it exists, else
//!   `target/debug/vhost-mpath` (build it first: `cargo build -p vhost-mpath`).
//! - `TEST_SERVER=qsd cargo test -p vhost-mpath-tests`: the same tests against
//!   qemu-storage-daemon (`$QSD_BIN` or the one on `$PATH`).
//! - `VHOST_MPATH_BIN=tests/scripts/qsd-as-ours.sh`: qsd behind our command line
//!   (checks the harness; `QSD_AS_OURS_NULL=1` makes it lose data, and the tests fail).
//! - `cargo run --release -p vhost-mpath-tests --bin vhost-bench -- --quick`: the
//!   benchmark, ours against qsd (`--help` for options).

pub mod adversary;
pub mod client;
pub mod cpu;
pub mod disk;
pub mod latency;
pub mod listen;
pub mod loadgen;
pub mod locate;
mod memory;
mod ops;
pub mod pattern;
pub mod procfs;
pub mod prometheus;
pub mod rpc;
pub mod server;
mod sync;
pub mod tempdir;
pub mod verify;

pub use client::{Client, ClientOptions, DeviceInfo, OpError};
pub use disk::{DiskSpec, PathSpec, ServerKind};
pub use ops::{Op, Output};
pub use server::Server;
pub use tempdir::TempDir;
