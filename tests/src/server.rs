//! A vhost-user-blk server process: spawned on a socket in its own temp dir,
//! ready once the socket listens, killed on drop.

use crate::cpu::process_cpu_time;
use crate::listen::is_listening;
use crate::tempdir::TempDir;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a server gets to start listening, or to exit after SIGTERM.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server. Dropping it kills the process (SIGKILL) and removes its temp dir.
#[derive(Debug)]
pub struct Server {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    label: String,
    // Last: the directory (socket, log) outlives the process.
    _dir: TempDir,
}

impl Server {
    /// Spawns `program` with `args`; `args` must already name `socket`, which
    /// must lie in `dir`. stdout and stderr go to `dir/server.log`.
    pub fn spawn(
        label: &str,
        program: &Path,
        args: &[String],
        dir: TempDir,
        socket: PathBuf,
    ) -> io::Result<Server> {
        let log = dir.path().join("server.log");
        let out = File::create(&log)?;
        // VHOST_BENCH_SERVER_CPUS pins the server (benchmarks: client and
        // server on separate cores, the same for every server compared).
        let mut cmd = match std::env::var("VHOST_BENCH_SERVER_CPUS") {
            Ok(cpus) if !cpus.is_empty() => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(program);
                c
            }
            _ => Command::new(program),
        };
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot run {}: {e}", program.display()))
            })?;
        let mut server = Server {
            child,
            socket,
            log,
            label: format!("{label} ({} {})", program.display(), args.join(" ")),
            _dir: dir,
        };
        server.wait_listening()?;
        Ok(server)
    }

    fn wait_listening(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(self.error(&format!("exited during startup with {status}")));
            }
            if is_listening(&self.socket) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.error("socket did not start listening"));
            }
            sleep(Duration::from_millis(10));
        }
    }

    fn error(&self, what: &str) -> io::Error {
        io::Error::other(format!(
            "{}: {what}\n--- log ---\n{}",
            self.label,
            self.log()
        ))
    }

    /// The vhost-user socket to connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's CPU time so far (all threads, user + system).
    pub fn cpu_time(&self) -> io::Result<Duration> {
        process_cpu_time(self.pid())
    }

    /// What the server printed so far (stdout and stderr).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The file that stdout and stderr go to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits for the exit status (SIGKILL after a timeout,
    /// reported as an error).
    pub fn terminate(mut self) -> io::Result<ExitStatus> {
        self.stop()
    }

    /// As [`Server::terminate`], keeping the server's directory (its log)
    /// for a look afterwards.
    pub fn stop(&mut self) -> io::Result<ExitStatus> {
        if self.child.try_wait()?.is_none() {
            // The pid cannot be reused: the child is not reaped yet. Sent
            // directly (no `kill` process): a test may time it to the ms.
            let pid = rustix::process::Pid::from_raw(self.pid() as i32)
                .ok_or_else(|| self.error("no pid"))?;
            rustix::process::kill_process(pid, rustix::process::Signal::TERM)
                .map_err(|e| self.error(&format!("SIGTERM: {e}")))?;
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(self.error("did not exit within 10 s of SIGTERM"));
            }
            sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
