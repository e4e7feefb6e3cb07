//! One disk description, launched on either server: our daemon or qemu-storage-daemon.

use crate::locate::{ours_binary, qsd_binary};
use crate::server::Server;
use crate::tempdir::TempDir;
use std::io;
use std::path::{Path, PathBuf};

/// Which vhost-user-blk server serves the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// Our daemon (`vhost-mpath`).
    Ours,
    /// `qemu-storage-daemon`, the reference implementation.
    Qsd,
}

impl ServerKind {
    /// `TEST_SERVER=qsd` selects qemu-storage-daemon; anything else (or unset) our daemon.
    pub fn from_env() -> ServerKind {
        match std::env::var("TEST_SERVER").as_deref() {
            Ok("qsd") => ServerKind::Qsd,
            _ => ServerKind::Ours,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Ours => "ours",
            ServerKind::Qsd => "qsd",
        }
    }
}

/// One path of the disk.
#[derive(Clone, Debug)]
pub enum PathSpec {
    /// A file or block device, with the path's name.
    File { file: PathBuf, name: String },
    /// A null path of `size` bytes: writes are dropped, reads return zeroes.
    Null { size: u64 },
    /// A `--path` spec as written (ours only), e.g. `FILE,name=a,fail-after=50`.
    Raw(String),
}

/// What to serve. qemu-storage-daemon has no multipath: it serves the first path only.
#[derive(Clone, Debug)]
pub struct DiskSpec {
    pub paths: Vec<PathSpec>,
    pub num_queues: u16,
    pub read_only: bool,
    /// More arguments for our daemon.
    pub ours_extra: Vec<String>,
    /// More `--export` options for qsd, e.g. `logical-block-size=4096`.
    pub qsd_export_extra: Vec<String>,
    /// Serve the export from an iothread of its own (qsd polls there,
    /// `poll-max-ns` 32 us by default), not from the main loop.
    pub qsd_iothread: bool,
    /// qsd's `aio=` for file paths (`io_uring`, `threads`, `native`).
    pub qsd_aio: String,
    /// Null paths fill read buffers with zeroes (both servers'
    /// `read-zeroes`); off for overhead measurements of large reads.
    pub null_read_zeroes: bool,
}

impl DiskSpec {
    /// One file path named `a`, one queue.
    pub fn file(file: &Path) -> DiskSpec {
        DiskSpec::with_paths(vec![PathSpec::File {
            file: file.to_path_buf(),
            name: "a".into(),
        }])
    }

    /// One null path of `size` bytes, one queue.
    pub fn null(size: u64) -> DiskSpec {
        DiskSpec::with_paths(vec![PathSpec::Null { size }])
    }

    pub fn with_paths(paths: Vec<PathSpec>) -> DiskSpec {
        DiskSpec {
            paths,
            num_queues: 1,
            read_only: false,
            ours_extra: Vec::new(),
            qsd_export_extra: Vec::new(),
            qsd_iothread: false,
            qsd_aio: "io_uring".into(),
            null_read_zeroes: true,
        }
    }

    pub fn num_queues(mut self, n: u16) -> DiskSpec {
        self.num_queues = n;
        self
    }

    pub fn read_only(mut self, ro: bool) -> DiskSpec {
        self.read_only = ro;
        self
    }

    /// Starts the disk on `kind`, our daemon being [`ours_binary`].
    pub fn launch(&self, kind: ServerKind) -> io::Result<Server> {
        self.launch_with(kind, &ours_binary())
    }

    /// Starts the disk on `kind`, our daemon being `ours_bin`.
    pub fn launch_with(&self, kind: ServerKind, ours_bin: &Path) -> io::Result<Server> {
        let dir = TempDir::new("vhost-mpath-srv")?;
        let socket = dir.path().join("vhost-user-blk.sock");
        match kind {
            ServerKind::Ours => {
                if !ours_bin.exists() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "{} not found: build it (cargo build -p vhost-mpath) or set \
                             VHOST_MPATH_BIN, or run against qsd with TEST_SERVER=qsd",
                            ours_bin.display()
                        ),
                    ));
                }
                let args = self.ours_args(&socket);
                Server::spawn("vhost-mpath", ours_bin, &args, dir, socket)
            }
            ServerKind::Qsd => {
                let args = self.qsd_args(&socket);
                Server::spawn("qemu-storage-daemon", &qsd_binary(), &args, dir, socket)
            }
        }
    }

    /// `--socket-path SOCK --path FILE,name=a ... --num-queues N [--read-only]`.
    pub fn ours_args(&self, socket: &Path) -> Vec<String> {
        let mut args = vec!["--socket-path".into(), socket.display().to_string()];
        for path in &self.paths {
            args.push("--path".into());
            args.push(match path {
                PathSpec::File { file, name } => format!("{},name={name}", file.display()),
                PathSpec::Null { size } => {
                    let zeroes = if self.null_read_zeroes {
                        ""
                    } else {
                        ",read-zeroes=off"
                    };
                    format!("null:{}{zeroes}", size_suffix(*size))
                }
                PathSpec::Raw(spec) => spec.clone(),
            });
        }
        args.push("--num-queues".into());
        args.push(self.num_queues.to_string());
        if self.read_only {
            args.push("--read-only".into());
        }
        args.extend(self.ours_extra.iter().cloned());
        args
    }

    /// `--blockdev ... --export type=vhost-user-blk,...` for the first path.
    pub fn qsd_args(&self, socket: &Path) -> Vec<String> {
        let ro = if self.read_only { "on" } else { "off" };
        let blockdev = match self.paths.first() {
            Some(PathSpec::File { file, .. }) => format!(
                "driver=file,node-name=f0,filename={},cache.direct=off,aio={},\
                 discard=unmap,read-only={ro}",
                file.display(),
                self.qsd_aio
            ),
            Some(PathSpec::Null { size }) => {
                let zeroes = if self.null_read_zeroes { "on" } else { "off" };
                format!(
                    "driver=null-co,node-name=f0,size={size},read-zeroes={zeroes},read-only={ro}"
                )
            }
            Some(PathSpec::Raw(_)) | None => String::new(),
        };
        let writable = if self.read_only { "off" } else { "on" };
        let mut export = format!(
            "type=vhost-user-blk,id=e0,node-name=f0,addr.type=unix,addr.path={},\
             writable={writable},num-queues={}",
            socket.display(),
            self.num_queues
        );
        for opt in &self.qsd_export_extra {
            export.push(',');
            export.push_str(opt);
        }
        let mut args = vec!["--blockdev".into(), blockdev];
        if self.qsd_iothread {
            args.extend(["--object".into(), "iothread,id=iot0".into()]);
            export.push_str(",iothread=iot0");
        }
        args.extend(["--export".into(), export]);
        args
    }
}

/// `1G`, `64M`, `4K` or plain bytes.
fn size_suffix(size: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    UNITS
        .iter()
        // Units are powers of two: a multiple has at least as many trailing zeroes.
        .find(|(unit, _)| size >= *unit && size.trailing_zeros() >= unit.trailing_zeros())
        .map(|(unit, suffix)| format!("{}{suffix}", size / unit))
        .unwrap_or_else(|| size.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_args_follow_the_cli() {
        let spec = DiskSpec::with_paths(vec![
            PathSpec::File {
                file: "/x/img".into(),
                name: "a".into(),
            },
            PathSpec::Null { size: 1 << 30 },
        ])
        .num_queues(4)
        .read_only(true);
        assert_eq!(
            spec.ours_args(Path::new("/s")).join(" "),
            "--socket-path /s --path /x/img,name=a --path null:1G --num-queues 4 --read-only"
        );
    }

    #[test]
    fn sizes_get_suffixes() {
        assert_eq!(size_suffix(1 << 30), "1G");
        assert_eq!(size_suffix(64 << 20), "64M");
        assert_eq!(size_suffix(1000), "1000");
    }
}
