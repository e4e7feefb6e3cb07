//! Judging one bad publication: its outcome within a second, whether the
//! queue was stopped or went on, the other queues, the bad state kept up
//! for a while, and a restart of the queue.

use std::thread::sleep;
use std::time::Instant;

use super::blk::{status_name, S_OK};
use super::expect::{describe, Expect};
use super::scene::{Scene, ANSWER, BAD_STATE};
use super::Outcome;

impl Scene {
    /// Judges what follows a bad publication, runs the bad state for a
    /// while, checks the daemon's health, and panics with every failure.
    pub fn judge(mut self, expect: Expect) {
        let t0 = Instant::now();
        let outcome = self.adv().wait_used(ANSWER);
        self.note(format!(
            "{}: {} after {:?}",
            expect.what,
            describe(outcome),
            t0.elapsed()
        ));
        let mut answered = false;
        // No answer, but the queue served what came after.
        let mut went_on = false;
        match outcome {
            Outcome::Used { id, len } => {
                let r = expect.judge_used(&self.adv().ram, id, len);
                match r {
                    Ok(how) => {
                        answered = true;
                        self.note(how);
                    }
                    Err(e) => self.fail(e),
                }
            }
            Outcome::Closed => {}
            Outcome::Quiet if !expect.may_stop => self.fail(format!(
                "{}: neither answered nor disconnected within {ANSWER:?}",
                expect.what
            )),
            Outcome::Quiet if expect.probe => {
                // Was the queue stopped, or the entry dropped while the queue
                // goes on? A good request published after it tells.
                match self.probe() {
                    (Outcome::Used { .. }, s) => {
                        went_on = true;
                        self.fail(format!(
                            "{}: no answer, yet a good request published after it was served \
                         ({}): the bad entry was dropped and the queue went on instead of \
                         stopping",
                            expect.what,
                            status_name(s)
                        ))
                    }
                    (o, _) => {
                        self.note(format!(
                            "queue stopped: a good request after it got {}",
                            describe(o)
                        ));
                        self.error_signalled(&expect);
                    }
                }
            }
            Outcome::Quiet => self.error_signalled(&expect),
        }
        let ram_check = expect.check_untouched(&self.adv().ram);
        if let Err(e) = ram_check {
            self.fail(e);
        }
        if answered && !expect.may_stop {
            // A malformed request must not cost the guest its queue.
            match self.probe() {
                (Outcome::Used { .. }, S_OK) => {}
                (o, s) => self.fail(format!(
                    "{}: a good request after it got {} with status {}: the queue stopped serving",
                    expect.what,
                    describe(o),
                    status_name(s)
                )),
            }
        }
        if let Some(q) = expect.other_queue {
            let broken = self.adv().current();
            self.adv().select(q);
            match self.probe() {
                (Outcome::Used { .. }, S_OK) => self.note(format!("queue {q} still serves")),
                (o, s) => self.fail(format!(
                    "{}: a good request on queue {q} got {} with status {}: one broken \
                     queue took another down",
                    expect.what,
                    describe(o),
                    status_name(s)
                )),
            }
            self.adv().select(broken);
        }
        // The bad state: the same request hammered (answered, or dropped
        // while the queue went on), or the broken ring left as is.
        match expect.head {
            Some(head) if answered || went_on => {
                let n = self.adv().flood(head, BAD_STATE);
                self.note(format!("flooded {n} more of it over {BAD_STATE:?}"));
            }
            _ => sleep(BAD_STATE),
        }
        self.cpu_and_log();
        if expect.restart {
            self.restart();
        }
        self.next_frontend();
        self.finish();
    }

    /// A queue the daemon stopped must say so on its error eventfd (what
    /// QEMU reports as "vhost vring error in virtqueue N"), unless the
    /// daemon hung up instead.
    fn error_signalled(&mut self, expect: &Expect) {
        let what = &expect.what;
        if expect.stopped_by_frontend {
            return;
        }
        if self.adv().error_signalled() {
            self.note("the queue's error eventfd was signalled".into());
        } else if !self.adv().closed() {
            self.fail(format!(
                "{what}: the queue stopped, but its error eventfd (SET_VRING_ERR) was not \
                 signalled: the frontend is not told"
            ));
        }
    }

    /// Stops and restarts the selected queue, as a VMM resetting the
    /// device does; a good request must then be served.
    fn restart(&mut self) {
        let t0 = Instant::now();
        match self.adv().restart_queue() {
            Ok(base) => {
                self.note(format!(
                    "queue restarted (GET_VRING_BASE gave {base} after {:?})",
                    t0.elapsed()
                ));
                match self.probe() {
                    (Outcome::Used { .. }, S_OK) => self.note("served after the restart".into()),
                    (o, s) => self.fail(format!(
                        "after the frontend restarted the queue, a good request got {} with \
                         status {}",
                        describe(o),
                        status_name(s)
                    )),
                }
            }
            Err(e) => self.fail(format!("restarting the queue: {e}")),
        }
    }
}
