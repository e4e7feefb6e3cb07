//! Command line of vhost-bench.

use std::path::PathBuf;
use std::time::Duration;
use vhost_mpath_tests::locate::ours_binary;

pub const USAGE: &str = "\
usage: vhost-bench [options]
  --seconds N        seconds per measured cell (default 10)
  --quick            1 s per cell, short warm-up (smoke test)
  --repeat R         run both servers R times, alternating, and report medians (default 1)
  --warmup S         seconds of warm-up before each cell (default 1; 0.2 with --quick)
  --ours-bin PATH    our daemon (default: $VHOST_MPATH_BIN, else target/{release,debug}/vhost-mpath)
  --ours-qsd         serve \"ours\" with qemu-storage-daemon too (checks the bench itself)
  --backends LIST    comma-separated: null,tmpfs (default both)
  --file-size BYTES  size of the tmpfs file (default 1073741824)
  --tmpfs-dir DIR    where the tmpfs file goes (default /dev/shm)
  --pin              client on CPU 0, every server on CPU 1 (steadier numbers)
  --dirty-log-ab     ours against ours logging every write to guest memory as during a
                     live migration (VHOST_MPATH_DIAG_DIRTY_LOG_ALWAYS=1); 4k QD32 cells
  --base-bin PATH    ours against another build of ours (\"base\", e.g. main's) instead
                     of qsd; 4k QD1 and QD32 cells unless --cells says
  --qsd-iothread     qsd serves from an iothread of its own (which polls, poll-max-ns
                     32 us) instead of its main loop
  --qsd-aio MODE      qsd's aio= for the tmpfs file: io_uring (default), threads (qsd's
                     own default: its thread pool), native
  --no-read-zeroes   null paths leave read buffers as they are on both servers
                     (read-zeroes=off): the servers' overhead without the zero-fill
  --client-poll      the client polls: blkio poll queues (num-poll-queues), which
                     busy-poll the used ring and never ask the server for a call
                     (a guest's virtio-blk poll queues under io_uring IOPOLL); cli s
                     is then the whole cell and cli slp 0
  --cells TEXT       only the workloads whose name contains TEXT (e.g. \"128k\", \"2q\");
                     comma-separated for several
qsd is $QSD_BIN, else qemu-storage-daemon on $PATH; its version is printed first.";

#[derive(Clone, Debug)]
pub struct Args {
    pub seconds: Duration,
    pub warmup: Duration,
    pub repeat: usize,
    pub ours_bin: PathBuf,
    pub ours_qsd: bool,
    pub null: bool,
    pub tmpfs: bool,
    pub file_size: u64,
    pub tmpfs_dir: PathBuf,
    pub pin: bool,
    pub dirty_log_ab: bool,
    pub base_bin: Option<PathBuf>,
    /// Workload name filters (any matches); empty: all.
    pub cells: Vec<String>,
    pub qsd_iothread: bool,
    pub qsd_aio: String,
    pub read_zeroes: bool,
    pub client_poll: bool,
}

impl Args {
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut args = Args {
            seconds: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            repeat: 1,
            ours_bin: ours_binary(),
            ours_qsd: false,
            null: true,
            tmpfs: true,
            file_size: 1 << 30,
            tmpfs_dir: PathBuf::from("/dev/shm"),
            pin: false,
            dirty_log_ab: false,
            base_bin: None,
            cells: Vec::new(),
            qsd_iothread: false,
            qsd_aio: "io_uring".into(),
            read_zeroes: true,
            client_poll: false,
        };
        let mut quick = false;
        let mut warmup = None;
        while let Some(arg) = it.next() {
            let mut value = || it.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--seconds" => args.seconds = Duration::from_secs_f64(number(&value()?)?),
                "--quick" => quick = true,
                "--repeat" => args.repeat = number(&value()?)? as usize,
                "--warmup" => warmup = Some(Duration::from_secs_f64(number(&value()?)?)),
                "--ours-bin" => args.ours_bin = PathBuf::from(value()?),
                "--ours-qsd" => args.ours_qsd = true,
                "--pin" => args.pin = true,
                "--dirty-log-ab" => args.dirty_log_ab = true,
                "--base-bin" => args.base_bin = Some(PathBuf::from(value()?)),
                "--qsd-iothread" => args.qsd_iothread = true,
                "--qsd-aio" => {
                    let mode = value()?;
                    if !["io_uring", "threads", "native"].contains(&mode.as_str()) {
                        return Err(format!("--qsd-aio {mode}: io_uring, threads or native"));
                    }
                    args.qsd_aio = mode;
                }
                "--no-read-zeroes" => args.read_zeroes = false,
                "--client-poll" => args.client_poll = true,
                "--backends" => {
                    let list = value()?;
                    args.null = list.split(',').any(|b| b == "null");
                    args.tmpfs = list.split(',').any(|b| b == "tmpfs");
                }
                "--cells" => args.cells = value()?.split(',').map(str::to_string).collect(),
                "--file-size" => args.file_size = number(&value()?)? as u64,
                "--tmpfs-dir" => args.tmpfs_dir = PathBuf::from(value()?),
                "-h" | "--help" => return Err(String::new()),
                _ => return Err(format!("unknown argument {arg}")),
            }
        }
        if quick {
            args.seconds = Duration::from_secs(1);
            args.warmup = Duration::from_millis(200);
        }
        if let Some(w) = warmup {
            args.warmup = w;
        }
        if args.repeat == 0 || !(args.null || args.tmpfs) {
            return Err("nothing to run".into());
        }
        Ok(args)
    }
}

fn number(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or(format!("not a number: {s}"))
}
