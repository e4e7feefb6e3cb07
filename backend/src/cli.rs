//! Command line, following QEMU's vhost-user backend program conventions
//! (docs/interop/vhost-user.rst, "Backend program conventions").

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Where the control-plane commands look for the daemon's JSON-RPC socket
/// when neither `--rpc-socket` nor `VHOST_MPATH_RPC_SOCKET` says.
pub const DEFAULT_RPC_SOCKET: &str = "/tmp/vhost-mpath-rpc.sock";

/// Without a subcommand the program is the daemon (the options below);
/// `rpc`, `paths`, `queues`, `stats`, `top`, `failback`, `resize` and `qos` talk to a running
/// daemon instead.
#[derive(Debug, Parser)]
#[command(
    name = "vhost-mpath",
    version,
    about = "vhost-user-blk backend: one virtio-blk disk over several paths, with failover",
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// Talk to a running daemon instead of starting one.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Listen for the vhost-user frontend on this Unix socket.
    #[arg(long, value_name = "PATH", conflicts_with = "fd")]
    pub socket_path: Option<PathBuf>,

    /// Make the vhost-user socket 0660 for this group (else 0600).
    #[arg(long, value_name = "GROUP", conflicts_with = "fd")]
    pub socket_group: Option<String>,

    /// Use an inherited, already listening Unix socket.
    #[arg(long, value_name = "N")]
    pub fd: Option<i32>,

    /// Print the vhost-user capability document (JSON) and exit.
    #[arg(long)]
    pub print_capabilities: bool,

    /// Refuse writes (VIRTIO_BLK_F_RO); paths are opened read-only.
    #[arg(long)]
    pub read_only: bool,

    /// Serial number answered to VIRTIO_BLK_T_GET_ID (at most 20 bytes).
    #[arg(long, value_name = "STRING")]
    pub serial: Option<String>,

    /// Number of virtqueues (one worker thread and io_uring ring each).
    #[arg(long, value_name = "N")]
    pub num_queues: Option<u16>,

    /// Maximum virtqueue size (power of two, at most 1024).
    #[arg(long, value_name = "N")]
    pub queue_size: Option<u16>,

    /// Adaptive polling: after each burst of work a worker keeps polling its
    /// virtqueue and ring this long (microseconds) before sleeping; 0 = off.
    #[arg(long, value_name = "US")]
    pub poll_us: Option<u32>,

    /// Requests submitted per part of a long burst, so the guest sees the
    /// first completions early (0: submit the whole burst at once).
    #[arg(long, value_name = "N")]
    pub submit_batch: Option<usize>,

    /// Threads serving the queues (queue q on thread q mod N); 0 = one per
    /// queue, at most one per CPU the daemon may run on.
    #[arg(long, value_name = "N")]
    pub queue_threads: Option<usize>,

    /// NVMe passthrough: register guest memory as io_uring fixed buffers
    /// (IORING_URING_CMD_FIXED); `false`: plain addresses.
    #[arg(long, value_name = "BOOL")]
    pub fixed_buffers: Option<bool>,

    /// NVMe passthrough: the paths' files in each ring's file table
    /// (IOSQE_FIXED_FILE); `false`: plain fds.
    #[arg(long, value_name = "BOOL")]
    pub registered_files: Option<bool>,

    /// NVMe passthrough on controllers with poll queues (nvme.poll_queues):
    /// reads and writes on a polled io_uring (IORING_SETUP_IOPOLL) that the
    /// worker busy-polls while they are in flight.
    #[arg(long, value_name = "BOOL")]
    pub io_poll: Option<bool>,

    /// Path-selection policy.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// round-robin: I/Os sent down a path before moving on.
    #[arg(long, value_name = "N")]
    pub rr_min_io: Option<u32>,

    /// adaptive: EWMA shift of the latency average.
    #[arg(long, value_name = "N")]
    pub ewma_shift: Option<u32>,

    /// adaptive: how often weights are recomputed, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub weight_period_ms: Option<u64>,

    /// active-standby: `immediate`, `manual`, or seconds of delay.
    #[arg(long, value_name = "WHEN")]
    pub failback: Option<String>,

    /// How long a request waits for a usable path (`30s`, `500ms`; 0 = fail at once).
    #[arg(long, value_name = "DURATION")]
    pub no_path_timeout: Option<String>,

    /// Consecutive good probes before a failed path is usable again.
    #[arg(long, value_name = "N")]
    pub recovery_probes: Option<u32>,

    /// Same-path retries of a retryable NVMe error.
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,

    /// Marginal paths: error rate (0-1) over a sample window that sets a
    /// path aside while a healthy one is usable (0 = off, the default).
    #[arg(long, value_name = "RATE")]
    pub marginal_err_rate: Option<f64>,

    /// Marginal paths: the sample window (`2s`).
    #[arg(long, value_name = "DURATION")]
    pub marginal_sample_time: Option<String>,

    /// Marginal paths: how long a marginal path waits before its recheck (`30s`).
    #[arg(long, value_name = "DURATION")]
    pub marginal_recheck_gap: Option<String>,

    /// JSON-RPC control socket (mode 0600).
    #[arg(long, value_name = "PATH")]
    pub rpc_socket: Option<std::path::PathBuf>,

    /// Make the JSON-RPC socket 0660 for this group.
    #[arg(long, value_name = "GROUP")]
    pub rpc_socket_group: Option<String>,

    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,

    /// Lab mode: `inject_fault` over JSON-RPC (shaping and faults at runtime).
    #[arg(long)]
    pub lab: bool,

    /// Do not offer inflight I/O tracking (INFLIGHT_SHMFD): a test and
    /// diagnostic switch; a crash then loses or repeats requests.
    #[arg(long)]
    pub no_inflight: bool,

    /// TOML configuration file; command-line flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// error, warn, info, debug or trace (default: info, or RUST_LOG).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// QoS limits of the disk, libvirt's `<iotune>` names:
    /// `KEY=VALUE[,KEY=VALUE...]`, e.g. `total_iops_sec=500,write_bytes_sec=8000000`
    /// (over the config file's `[qos]`; 0 removes a limit).
    #[arg(long, value_name = "LIMITS")]
    pub qos: Option<String>,

    /// A path to the disk: `DEVICE[,name=NAME][,key=value...]`, repeatable.
    /// DEVICE is a regular file, a block device or `null:SIZE`.
    #[arg(long = "path", value_name = "SPEC")]
    pub paths: Vec<String>,

    /// QEMU's vhost-user-blk convention: one path on FILE.
    #[arg(long, value_name = "FILE")]
    pub blk_file: Option<String>,
}

/// The command-line client of the control plane.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Call a JSON-RPC method and print its result as JSON.
    Rpc {
        #[command(flatten)]
        socket: RpcSocket,
        /// Method name, e.g. `get_paths` (`get_methods` lists them).
        method: String,
        /// Parameters: a JSON object, e.g. '{"name": "a", "state": "offline"}'.
        params: Option<String>,
    },
    /// One row per path: device, driver, state, ANA state, weight, load.
    Paths {
        #[command(flatten)]
        socket: RpcSocket,
        /// Print the `get_paths` result as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One row per virtqueue: ring indexes, requests in flight, kicks and
    /// calls (`get_queues`).
    Queues {
        #[command(flatten)]
        socket: RpcSocket,
        /// Print the `get_queues` result as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// active-standby: move I/O back to the preferred path now (the way
    /// `--failback manual` waits for).
    Failback {
        #[command(flatten)]
        socket: RpcSocket,
    },
    /// The disk takes its paths' new size (`resize`): after growing every
    /// path's image, or to SIZE when every path holds it.
    Resize {
        #[command(flatten)]
        socket: RpcSocket,
        /// The new capacity (`96M`, `2G`, bytes); default: the paths' size.
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
        /// Shrink too (the guest may hold data past the new end).
        #[arg(long)]
        force: bool,
    },
    /// The disk's QoS limits and what they held (`get_qos`); with --set,
    /// change them first (`set_qos`).
    Qos {
        #[command(flatten)]
        socket: RpcSocket,
        /// Limits to change, libvirt's `<iotune>` names: `KEY=VALUE[,KEY=VALUE...]`
        /// (the others keep their values; 0 removes a limit).
        #[arg(long, value_name = "LIMITS")]
        set: Option<String>,
        /// Print the `get_qos` / `set_qos` result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per-path statistics: I/O counts, bytes, errors, latency percentiles.
    Stats {
        #[command(flatten)]
        socket: RpcSocket,
        /// Print the `get_stats` result as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only this path.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Refresh every SECONDS with per-second rates (until interrupted).
        #[arg(long, value_name = "SECONDS")]
        watch: Option<f64>,
        /// With --watch: stop after N refreshes.
        #[arg(long, value_name = "N", requires = "watch")]
        count: Option<u64>,
    },
    /// A live view like `iostat -x 1`: the policy and the disk's totals, then
    /// per path its state, ANA state, IOPS, MiB/s, latency, in-flight requests
    /// and errors (rates between successive `get_stats`).
    Top {
        #[command(flatten)]
        socket: RpcSocket,
        /// Seconds between refreshes.
        #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
        interval: f64,
        /// Stop after N refreshes (default: until interrupted).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Write the man pages (vhost-mpath.1, one per subcommand) into DIR.
    #[command(hide = true)]
    Man {
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
    },
    /// Print the completion script for SHELL (bash, zsh, fish, ...).
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
}

#[derive(Debug, clap::Args)]
pub struct RpcSocket {
    /// The daemon's JSON-RPC socket [default: the `rpc_socket` of --config, else
    /// $VHOST_MPATH_RPC_SOCKET, else /tmp/vhost-mpath-rpc.sock].
    #[arg(long, value_name = "PATH")]
    pub rpc_socket: Option<PathBuf>,

    /// The daemon's TOML configuration: its `rpc_socket` names the socket.
    #[arg(long, value_name = "FILE", conflicts_with = "rpc_socket")]
    pub config: Option<PathBuf>,
}

impl RpcSocket {
    /// The socket to talk to, or why it cannot be known (a config file that
    /// does not load or names no `rpc_socket`).
    pub fn path(&self) -> Result<PathBuf, String> {
        if let Some(p) = &self.rpc_socket {
            return Ok(p.clone());
        }
        if let Some(file) = &self.config {
            let cfg = crate::config::ConfigFile::load(file)?;
            return cfg
                .rpc_socket
                .ok_or_else(|| format!("config {}: no rpc_socket", file.display()));
        }
        Ok(std::env::var_os("VHOST_MPATH_RPC_SOCKET")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RPC_SOCKET)))
    }
}
