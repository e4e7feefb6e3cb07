//! Random vhost-user messages against the real daemon (issue 44): at least
//! 100 000 messages per run (`VHOST_MPATH_FUZZ_MESSAGES`), from a seeded
//! PRNG (`VHOST_MPATH_FUZZ_SEED`, printed; the same seed replays the same
//! sessions), over one daemon that each session reconnects to. See
//! `vhost_mpath_tests::adversary::fuzz` for what is sent.
//!
//! After every session: the daemon alive, and every message that must be
//! answered answered (or the connection closed) in time; every 64
//! sessions and at the end: its fds back to the idle count (plus a little),
//! its RSS under a cap, its log growing by a bounded amount per session (a
//! frontend cannot make it log per message); every 512 sessions and at the
//! end: a real frontend (blkio) served.

use std::time::{Duration, Instant};

use vhost_mpath_tests::adversary::fuzz::{vitals, Rng, Session, SessionEnd};
use vhost_mpath_tests::adversary::health::{kill, serves_next_frontend, Watchdog};
use vhost_mpath_tests::{DiskSpec, Server, ServerKind, TempDir};

const MESSAGES_ENV: &str = "VHOST_MPATH_FUZZ_MESSAGES";
const DEFAULT_MESSAGES: u64 = 100_000;
const QUEUES: u16 = 2;
/// The daemon's default queue size.
const MAX_QUEUE_SIZE: u16 = 256;
/// Longest wait for an answer the daemon owes (a loaded machine, a debug build).
const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// Fds a closed connection may leave open for a moment.
const FD_SLACK: usize = 4;
const RSS_CAP_KIB: u64 = 512 << 10;
/// Log bytes per session (a connect and a close line, a refusal) and per
/// second (the rate-limited warnings of the rings).
const LOG_PER_SESSION: u64 = 800;
const LOG_PER_SECOND: u64 = 2 << 10;
const LOG_CAP: u64 = 64 << 20;
const LIFETIME: Duration = Duration::from_secs(1800);
const CHECK_EVERY: u64 = 64;
const SERVE_EVERY: u64 = 512;

fn target_messages() -> u64 {
    std::env::var(MESSAGES_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MESSAGES)
}

/// The session's own seed: a failing session replays from the run's seed
/// and its number.
fn session_seed(seed: u64, n: u64) -> u64 {
    seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

struct Run {
    server: Server,
    seed: u64,
    idle_fds: usize,
    log_start: u64,
    started: Instant,
}

impl Run {
    /// Panics with the seed, the session and the log's tail.
    fn fail(&mut self, session: u64, why: &str) -> ! {
        let log = self.server.log();
        let from = (log.len().saturating_sub(4000)..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(log.len());
        let status = if self.server.is_running() {
            "running".to_string()
        } else {
            format!("{:?}", self.server.stop())
        };
        panic!(
            "fuzz seed {:#x}, session {session}: {why} (daemon {status})\n--- log tail ---\n{}",
            self.seed,
            &log[from..]
        );
    }

    fn check_vitals(&mut self, session: u64) {
        let pid = self.server.pid();
        let fds = vitals::settled_fds(pid, self.idle_fds + FD_SLACK, Duration::from_secs(5));
        if fds > self.idle_fds + FD_SLACK {
            self.fail(
                session,
                &format!(
                    "the daemon holds {fds} fds, {} when idle: {}",
                    self.idle_fds,
                    vitals::fd_targets(pid).join(", ")
                ),
            );
        }
        let rss = vitals::rss_kib(pid);
        if rss > RSS_CAP_KIB {
            self.fail(
                session,
                &format!("the daemon's RSS is {rss} KiB (cap {RSS_CAP_KIB})"),
            );
        }
        let grown = vitals::log_len(self.server.log_path()) - self.log_start;
        let budget = (session + 1) * LOG_PER_SESSION
            + self.started.elapsed().as_secs().max(1) * LOG_PER_SECOND;
        if grown > budget {
            self.fail(
                session,
                &format!("the log grew by {grown} bytes in {session} sessions (budget {budget})"),
            );
        }
    }
}

#[test]
fn random_vhost_user_messages_never_break_the_daemon() {
    if ServerKind::from_env() == ServerKind::Qsd {
        eprintln!("skipped: the fuzzer checks our daemon's limits");
        return;
    }
    let seed = Rng::seed_from_env();
    let target = target_messages();
    eprintln!("fuzz seed {seed:#x} (VHOST_MPATH_FUZZ_SEED), {target} messages");
    let dir = TempDir::new("vhost-mpath-fuzz").expect("temp dir");
    let img = dir.sparse_file("disk.img", 16 << 20).expect("image");
    let server = DiskSpec::file(&img)
        .num_queues(QUEUES)
        .launch(ServerKind::Ours)
        .expect("starting the daemon");
    let pid = server.pid();
    let watchdog = Watchdog::start(pid, server.log_path().to_path_buf(), LOG_CAP, LIFETIME);
    let info = Session::probe(server.socket(), QUEUES, MAX_QUEUE_SIZE, ANSWER_LIMIT)
        .unwrap_or_else(|e| panic!("probing the daemon: {e}\n{}", server.log()));
    let mut run = Run {
        idle_fds: vitals::idle_fds(pid),
        log_start: vitals::log_len(server.log_path()),
        server,
        seed,
        started: Instant::now(),
    };
    let (mut sent, mut answered, mut session) = (0u64, 0u64, 0u64);
    while sent < target {
        let mut rng = Rng::new(session_seed(seed, session));
        let s = Session::connect(run.server.socket(), info, &mut rng, ANSWER_LIMIT)
            .unwrap_or_else(|e| run.fail(session, &format!("connecting: {e}")));
        let (end, n, a) = s.run();
        sent += n;
        answered += a;
        if let SessionEnd::Hung(why) = end {
            run.fail(session, &format!("hang: {why}"));
        }
        if !run.server.is_running() {
            run.fail(session, "the daemon died");
        }
        if (session + 1) % CHECK_EVERY == 0 {
            run.check_vitals(session);
        }
        if (session + 1) % SERVE_EVERY == 0 {
            let socket = run.server.socket().to_path_buf();
            if let Err(e) = serves_next_frontend(&socket, 1 << 20, ANSWER_LIMIT, || kill(pid)) {
                run.fail(session, &format!("the next frontend (blkio): {e}"));
            }
        }
        session += 1;
    }
    run.check_vitals(session);
    let socket = run.server.socket().to_path_buf();
    if let Err(e) = serves_next_frontend(&socket, 1 << 20, ANSWER_LIMIT, || kill(pid)) {
        run.fail(session, &format!("the next frontend (blkio): {e}"));
    }
    if let Some(why) = watchdog.killed() {
        run.fail(session, &format!("the watchdog killed the daemon: {why}"));
    }
    let secs = run.started.elapsed().as_secs_f64();
    eprintln!(
        "fuzz seed {seed:#x}: {sent} messages ({answered} answered) in {session} sessions, \
         {secs:.1} s, {:.0} messages/s; daemon {} fds idle, RSS {} KiB, log +{} bytes",
        sent as f64 / secs,
        run.idle_fds,
        vitals::rss_kib(pid),
        vitals::log_len(run.server.log_path()) - run.log_start
    );
}
