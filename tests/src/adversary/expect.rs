//! What a case accepts from the daemon, and the judging of one outcome.

use super::blk::{status_name, S_IOERR, S_OK, S_UNSUPP, UNWRITTEN};
use super::guest_memory::GuestRam;
use super::Outcome;

/// The acceptable ends of one bad publication.
#[derive(Clone, Debug)]
pub struct Expect {
    /// What was published, for messages.
    pub what: String,
    /// The chain's head, when there is one to complete.
    pub head: Option<u16>,
    /// Where the device may write a status byte (pre-filled with UNWRITTEN).
    pub status: Vec<u64>,
    /// Status values accepted there.
    pub allowed: Vec<u8>,
    /// A used entry of length 0 with the status left alone is accepted
    /// (the device found no status byte it may write).
    pub len0_ok: bool,
    /// Whether any used entry is accepted (false: the ring itself is broken).
    pub may_complete: bool,
    /// Whether stopping the queue (nothing more served) is accepted.
    pub may_stop: bool,
    /// Guest memory the device must not write (pre-filled with UNWRITTEN).
    pub untouched: Vec<(u64, usize)>,
    /// After no answer, publish a good request: served means the bad entry
    /// was dropped while the queue went on (neither answered nor stopped).
    pub probe: bool,
    /// A good request on this other queue must be served meanwhile.
    pub other_queue: Option<usize>,
    /// Afterwards the frontend restarts the queue (GET_VRING_BASE, then
    /// the rings set up afresh) and a good request must be served again.
    pub restart: bool,
    /// The frontend stopped the queue itself (GET_VRING_BASE): silence is
    /// no error of the driver's, so the error eventfd stays quiet.
    pub stopped_by_frontend: bool,
}

impl Expect {
    /// A malformed request on a sound ring: IOERR or UNSUPP in its status
    /// byte and its used entry; the queue keeps serving.
    pub fn error_status(what: &str, head: u16, status: u64) -> Expect {
        Expect {
            what: what.into(),
            head: Some(head),
            status: vec![status],
            allowed: vec![S_IOERR, S_UNSUPP],
            len0_ok: false,
            may_complete: true,
            may_stop: false,
            untouched: Vec::new(),
            probe: true,
            other_queue: None,
            restart: false,
            stopped_by_frontend: false,
        }
    }

    /// A request with no status byte the device may write: completed with
    /// used length 0, or the queue stopped.
    pub fn no_status(what: &str, head: u16) -> Expect {
        Expect {
            what: what.into(),
            head: Some(head),
            status: Vec::new(),
            allowed: Vec::new(),
            len0_ok: true,
            may_complete: true,
            may_stop: true,
            untouched: Vec::new(),
            probe: true,
            other_queue: None,
            restart: false,
            stopped_by_frontend: false,
        }
    }

    /// A chain the device must not serve as it reads (a loop, a broken
    /// indirect table, a chain past 4 GiB): an error status at `status`
    /// (where a device cutting the chain would find one), used length 0,
    /// or the queue stopped; never the cut request served.
    pub fn not_served(what: &str, head: u16, status: u64) -> Expect {
        Expect {
            what: what.into(),
            head: Some(head),
            status: vec![status],
            allowed: vec![S_IOERR, S_UNSUPP],
            len0_ok: true,
            may_complete: true,
            may_stop: true,
            untouched: Vec::new(),
            probe: true,
            other_queue: None,
            restart: false,
            stopped_by_frontend: false,
        }
    }

    /// A broken ring: nothing can be completed; the queue must stop (or
    /// the connection close).
    pub fn broken_ring(what: &str) -> Expect {
        Expect {
            what: what.into(),
            head: None,
            status: Vec::new(),
            allowed: Vec::new(),
            len0_ok: false,
            may_complete: false,
            may_stop: true,
            untouched: Vec::new(),
            probe: true,
            other_queue: None,
            restart: false,
            stopped_by_frontend: false,
        }
    }

    /// The queue was stopped by the frontend, not broken by the driver.
    pub fn stopped_by_frontend(mut self) -> Expect {
        self.stopped_by_frontend = true;
        self
    }

    /// The bad entry's head (flooded again if the queue goes on).
    pub fn head(mut self, head: u16) -> Expect {
        self.head = Some(head);
        self
    }

    /// No probe: the ring cannot carry a good request after this.
    pub fn no_probe(mut self) -> Expect {
        self.probe = false;
        self
    }

    /// Queue `q` must keep serving while this one is broken.
    pub fn other_queue_serves(mut self, q: usize) -> Expect {
        self.other_queue = Some(q);
        self
    }

    /// The frontend restarts the queue afterwards; it must serve again.
    pub fn then_restart(mut self) -> Expect {
        self.restart = true;
        self
    }

    /// Another place a status may be written (a device reading the chain
    /// further than a cutting one).
    pub fn allow_status_at(mut self, gpa: u64) -> Expect {
        self.status.push(gpa);
        self
    }

    pub fn allow(mut self, status: u8) -> Expect {
        self.allowed.push(status);
        self
    }

    pub fn untouched(mut self, gpa: u64, len: usize) -> Expect {
        self.untouched.push((gpa, len));
        self
    }

    /// Judges a used entry; `Err` says what was wrong.
    pub fn judge_used(&self, ram: &GuestRam, id: u32, len: u32) -> Result<String, String> {
        if !self.may_complete {
            return Err(format!(
                "{}: completed id {id} (len {len}) of a broken ring",
                self.what
            ));
        }
        if let Some(head) = self.head {
            if id != u32::from(head) {
                return Err(format!("{}: used id {id}, expected head {head}", self.what));
            }
        }
        let written: Vec<u8> = self.status.iter().map(|&s| ram.read_u8(s)).collect();
        if let Some(&status) = written.iter().find(|s| self.allowed.contains(s)) {
            if len == 0 {
                return Err(format!(
                    "{}: status {} written but used length 0",
                    self.what,
                    status_name(status)
                ));
            }
            return Ok(format!("answered {} (used len {len})", status_name(status)));
        }
        if self.len0_ok && len == 0 && written.iter().all(|&s| s == UNWRITTEN) {
            return Ok("completed with used length 0, no status".into());
        }
        let status = written
            .iter()
            .copied()
            .find(|&s| s != UNWRITTEN)
            .unwrap_or(UNWRITTEN);
        let allowed: Vec<_> = self.allowed.iter().map(|&s| status_name(s)).collect();
        Err(format!(
            "{}: completed with status {} and used len {len}; expected {}{}",
            self.what,
            status_name(status),
            if allowed.is_empty() {
                "no status".to_string()
            } else {
                allowed.join(" or ")
            },
            if self.len0_ok {
                " or used length 0 with no status"
            } else {
                ""
            }
        ))
    }

    /// Guest memory the device wrote but must not have.
    pub fn check_untouched(&self, ram: &GuestRam) -> Result<(), String> {
        for &(gpa, len) in &self.untouched {
            let bytes = ram.read(gpa, len);
            if let Some(i) = bytes.iter().position(|&b| b != UNWRITTEN) {
                return Err(format!(
                    "{}: the device wrote {:#04x} at {:#x}, a buffer it must not write",
                    self.what,
                    bytes[i],
                    gpa + i as u64
                ));
            }
        }
        Ok(())
    }
}

/// Accepted statuses of a request that may also be served (zero-length transfers).
pub const OK_OR_ERROR: [u8; 3] = [S_OK, S_IOERR, S_UNSUPP];

/// Describes an outcome for notes.
pub fn describe(o: Outcome) -> String {
    match o {
        Outcome::Used { id, len } => format!("used id {id} len {len}"),
        Outcome::Closed => "connection closed by the daemon".into(),
        Outcome::Quiet => "nothing".into(),
    }
}
