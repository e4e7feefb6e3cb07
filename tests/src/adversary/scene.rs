//! One adversarial case from start to verdict: a daemon on a fresh image,
//! the adversary connected and proven with well-formed requests, the bad
//! publication judged, then the daemon's health checked. Every step is
//! bounded; the daemon dies with the scene, even on panic.

use std::thread::sleep;
use std::time::Duration;

use super::blk::{header, status_name, SECTOR, S_OK, T_FLUSH, T_GET_ID, T_IN, T_OUT, UNWRITTEN};
use super::expect::describe;
use super::health::{cpu_share, file_len, kill, serves_next_frontend, Watchdog};
use super::{Adversary, AdversaryOptions, Desc, Outcome};
use crate::pattern::pattern;
use crate::{DiskSpec, Server, ServerKind, TempDir};

/// The disk behind the daemon.
pub const DISK_SIZE: u64 = 16 << 20;
/// Where the well-formed requests write (sectors).
pub const GOOD_SECTOR: u64 = 16;
pub const GOOD_LEN: u32 = 8192;
/// A case ends (used entry, hang-up, or nothing) within this.
pub const ANSWER: Duration = Duration::from_secs(1);
/// How long the bad state lasts before the health checks.
pub const BAD_STATE: Duration = Duration::from_secs(2);
pub const CPU_WINDOW: Duration = Duration::from_secs(1);
/// An idle daemon uses less than this share of one core.
pub const IDLE_CPU: f64 = 0.20;
/// Log bytes a whole case may add (a few rate-limited lines per second).
pub const LOG_BUDGET: u64 = 8 << 10;
/// Past this the watchdog kills the daemon (no case fills the disk).
pub const LOG_CAP: u64 = 16 << 20;
pub const LIFETIME: Duration = Duration::from_secs(120);
pub const NEXT_FRONTEND: Duration = Duration::from_secs(15);

pub struct Scene {
    pub name: String,
    // Drop order: the adversary hangs up, the watchdog stops, then the
    // server is killed and reaped, then its directory goes.
    adv: Option<Adversary>,
    watchdog: Watchdog,
    server: Server,
    _dir: TempDir,
    log_before: u64,
    failures: Vec<String>,
    notes: Vec<String>,
}

impl Scene {
    /// Starts the daemon and connects the adversary with `opts`; proves the
    /// harness with a write, a read-back, a flush and a GET_ID.
    pub fn start(name: &str, opts: &AdversaryOptions) -> Scene {
        Scene::start_with(name, opts, &[])
    }

    /// As [`Scene::start`], with more arguments for our daemon (ignored by
    /// qemu-storage-daemon); the daemon serves `opts.num_queues` queues.
    pub fn start_with(name: &str, opts: &AdversaryOptions, daemon_args: &[&str]) -> Scene {
        let dir = TempDir::new("vhost-mpath-adv").expect("temp dir");
        let img = dir.sparse_file("disk.img", DISK_SIZE).expect("image");
        let kind = ServerKind::from_env();
        let mut spec = DiskSpec::file(&img).num_queues(opts.num_queues);
        spec.ours_extra = daemon_args.iter().map(|a| a.to_string()).collect();
        let server = spec
            .launch(kind)
            .unwrap_or_else(|e| panic!("{name}: starting the {} server: {e}", kind.name()));
        let watchdog = Watchdog::start(
            server.pid(),
            server.log_path().to_path_buf(),
            LOG_CAP,
            LIFETIME,
        );
        let adv = Adversary::connect(server.socket(), opts).unwrap_or_else(|e| {
            panic!(
                "{name}: the adversary could not connect: {e}\n--- log ---\n{}",
                server.log()
            )
        });
        let mut scene = Scene {
            name: name.into(),
            adv: Some(adv),
            watchdog,
            server,
            _dir: dir,
            log_before: 0,
            failures: Vec::new(),
            notes: Vec::new(),
        };
        scene.well_formed();
        scene.log_before = file_len(scene.server.log_path());
        scene
    }

    pub fn adv(&mut self) -> &mut Adversary {
        self.adv.as_mut().expect("adversary connected")
    }

    pub fn capacity_sectors(&mut self) -> u64 {
        self.adv().capacity_sectors
    }

    /// A 16-byte request header in fresh guest memory.
    pub fn header(&mut self, rtype: u32, sector: u64) -> u64 {
        let at = self.adv().scratch(16, 0);
        self.adv().ram.write(at, &header(rtype, sector));
        at
    }

    /// A fresh status byte, pre-filled with UNWRITTEN.
    pub fn status(&mut self) -> u64 {
        self.adv().scratch(1, UNWRITTEN)
    }

    /// `len` bytes of fresh guest memory filled with UNWRITTEN.
    pub fn buffer(&mut self, len: u64) -> u64 {
        self.adv().scratch(len, UNWRITTEN)
    }

    /// Publishes a direct chain and returns its head.
    pub fn publish(&mut self, descs: &[Desc]) -> u16 {
        let head = self.adv().chain(descs);
        self.adv().push(head);
        head
    }

    /// Publishes `descs` through one indirect descriptor.
    pub fn publish_indirect(&mut self, descs: &[Desc]) -> u16 {
        let (table, len) = self.adv().indirect_table(descs);
        self.publish(&[Desc::indirect(table, len)])
    }

    /// A well-formed request; panics unless it completes OK with `used_len`.
    fn good(&mut self, what: &str, head: u16, status: u64, used_len: u32) {
        let o = self.adv().wait_used(Duration::from_secs(10));
        let s = self.adv().ram.read_u8(status);
        if o != (Outcome::Used {
            id: u32::from(head),
            len: used_len,
        }) || s != S_OK
        {
            panic!(
                "{}: the harness's well-formed {what} got {} and status {}, expected used id \
                 {head} len {used_len} and OK\n--- log ---\n{}",
                self.name,
                describe(o),
                status_name(s),
                self.server.log()
            );
        }
    }

    /// Write, read back (indirect if negotiated), flush, GET_ID: proves the
    /// ring layout, the memory sharing and the notifications work.
    fn well_formed(&mut self) {
        let data = pattern(1, GOOD_SECTOR * SECTOR, GOOD_LEN as usize);
        let half = GOOD_LEN / 2;
        let hdr = self.header(T_OUT, GOOD_SECTOR);
        let buf = self.buffer(u64::from(GOOD_LEN));
        self.adv().ram.write(buf, &data);
        let st = self.status();
        let head = self.publish(&[
            Desc::r(hdr, 16),
            Desc::r(buf, half),
            Desc::r(buf + u64::from(half), half),
            Desc::w(st, 1),
        ]);
        self.good("write", head, st, 1);

        let hdr = self.header(T_IN, GOOD_SECTOR);
        let buf = self.buffer(u64::from(GOOD_LEN));
        let st = self.status();
        let read = [Desc::r(hdr, 16), Desc::w(buf, GOOD_LEN), Desc::w(st, 1)];
        let head = if self.adv().indirect() {
            self.publish_indirect(&read)
        } else {
            self.publish(&read)
        };
        self.good("read", head, st, GOOD_LEN + 1);
        if self.adv().ram.read(buf, GOOD_LEN as usize) != data {
            panic!(
                "{}: the harness read back other data than it wrote",
                self.name
            );
        }

        let hdr = self.header(T_FLUSH, 0);
        let st = self.status();
        let head = self.publish(&[Desc::r(hdr, 16), Desc::w(st, 1)]);
        self.good("flush", head, st, 1);

        let hdr = self.header(T_GET_ID, 0);
        let id = self.buffer(20);
        let st = self.status();
        let head = self.publish(&[Desc::r(hdr, 16), Desc::w(id, 20), Desc::w(st, 1)]);
        self.good("get-id", head, st, 21);
    }

    /// Publishes a well-formed 512-byte read on the selected queue; its
    /// outcome within `ANSWER` and its status byte.
    pub fn probe(&mut self) -> (Outcome, u8) {
        let hdr = self.header(T_IN, GOOD_SECTOR);
        let buf = self.buffer(512);
        let st = self.status();
        self.publish(&[Desc::r(hdr, 16), Desc::w(buf, 512), Desc::w(st, 1)]);
        let o = self.adv().wait_used(ANSWER);
        (o, self.adv().ram.read_u8(st))
    }

    /// Hangs up the adversary's connection (the daemon tears it down).
    pub fn disconnect(&mut self) {
        self.adv = None;
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        self.server.pid()
    }

    /// The daemon's log so far.
    pub fn daemon_log(&self) -> String {
        self.server.log()
    }

    /// Bytes the daemon's log grew by since the harness's proof.
    pub fn log_grown(&self) -> u64 {
        file_len(self.server.log_path()).saturating_sub(self.log_before)
    }

    pub fn fail(&mut self, msg: String) {
        self.failures.push(msg);
    }

    pub fn note(&mut self, msg: String) {
        self.notes.push(msg);
    }

    /// No bad publication: only the health checks (the harness's own proof).
    pub fn healthy(mut self) {
        sleep(BAD_STATE);
        self.cpu_and_log();
        self.next_frontend();
        self.finish();
    }

    /// The daemon idle, its log within budget.
    pub(super) fn cpu_and_log(&mut self) {
        let pid = self.server.pid();
        match cpu_share(pid, CPU_WINDOW) {
            Ok(share) => {
                self.note(format!("daemon CPU {:.1}% of a core", share * 100.0));
                if share > IDLE_CPU {
                    self.fail(format!(
                        "the daemon is not idle: {:.0}% of a core over {CPU_WINDOW:?} \
                         (limit {:.0}%)",
                        share * 100.0,
                        IDLE_CPU * 100.0
                    ));
                }
            }
            Err(e) => self.fail(e),
        }
        let grown = file_len(self.server.log_path()).saturating_sub(self.log_before);
        self.note(format!("log grew by {grown} bytes"));
        if grown > LOG_BUDGET {
            self.fail(format!(
                "the log grew by {grown} bytes (limit {LOG_BUDGET}): guest-triggered logging \
                 is not bounded"
            ));
        }
    }

    /// Hang up; then a real client must get the disk.
    pub(super) fn next_frontend(&mut self) {
        let pid = self.server.pid();
        self.adv = None;
        let next = serves_next_frontend(self.server.socket(), 1 << 20, NEXT_FRONTEND, || kill(pid));
        if let Err(e) = next {
            self.fail(format!("the next frontend (blkio): {e}"));
        }
        if let Some(why) = self.watchdog.killed() {
            self.fail(format!("the watchdog killed the daemon: {why}"));
        }
    }

    pub(super) fn finish(mut self) {
        let failures = std::mem::take(&mut self.failures);
        let notes = self.notes.join("\n  ");
        if failures.is_empty() {
            eprintln!("{}: passed\n  {notes}", self.name);
            return;
        }
        let log = self.server.log();
        let from = (log.len().saturating_sub(3000)..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(log.len());
        let tail = &log[from..];
        panic!(
            "{}: {} failure(s):\n- {}\nnotes:\n  {notes}\n--- log tail ({} bytes in all) ---{tail}",
            self.name,
            failures.len(),
            failures.join("\n- "),
            log.len()
        );
    }
}
