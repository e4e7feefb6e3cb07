//! What to do with a completion: the one table of REFERENCE §2.

use std::time::Duration;

/// The raw result of one I/O on one path, as the driver decoded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOutcome {
    Ok,
    /// A negative `res` from the ring: the positive errno.
    Errno(i32),
    /// An NVMe status field (SC bits 0-7, SCT 8-10, CRD 11-12, More 13, DNR 14).
    Nvme(u16),
}

/// The engine's decision for a completed I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    Done,
    /// Send again on the same path after the controller's retry delay.
    RetrySamePath {
        after: Duration,
    },
    /// A path error: re-send on another path.
    Failover,
    /// Complete to the guest with an I/O error.
    Fail,
}

const NVME_SCT_PATH: u16 = 0x3;
const NVME_DNR: u16 = 1 << 14;

/// Transport errnos that mean "this path is gone or cut", not "this I/O is bad".
fn errno_is_path_error(errno: i32) -> bool {
    matches!(
        errno,
        libc_errno::EINTR
            | libc_errno::ENODEV
            | libc_errno::ENXIO
            | libc_errno::EIO
            | libc_errno::ENOLINK
            | libc_errno::ETIMEDOUT
            | libc_errno::ECONNRESET
    )
}

/// Whether a path-class error says only that the I/O failed, not why: `EIO`
/// from a file or block device is a dead device as well as a bad block. Such
/// an error seen on every path for one request is the request's (see
/// `Engine::complete_attempt_at`). The others (`ENODEV`, `ENOLINK`,
/// timeouts, NVMe path statuses) always mean the path.
pub fn is_ambiguous(outcome: IoOutcome) -> bool {
    outcome == IoOutcome::Errno(libc_errno::EIO)
}

/// Linux errno values (stable ABI), kept here so `mpath` needs no libc.
pub(crate) mod libc_errno {
    pub const EINTR: i32 = 4;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const ENODEV: i32 = 19;
    pub const ENOLINK: i32 = 67;
    pub const ECONNRESET: i32 = 104;
    pub const ETIMEDOUT: i32 = 110;
}

/// Classifies one completion.
///
/// `retries` is how many times this I/O was already retried on its path,
/// `max_retries` the bound, `crdt` the controller's Command Retry Delay
/// Times (Identify Controller CRDT1-3, units of 100 ms).
pub fn classify(outcome: IoOutcome, retries: u32, max_retries: u32, crdt: [u16; 3]) -> Disposition {
    match outcome {
        IoOutcome::Ok => Disposition::Done,
        IoOutcome::Errno(e) if errno_is_path_error(e) => Disposition::Failover,
        IoOutcome::Errno(_) => Disposition::Fail,
        IoOutcome::Nvme(status) => {
            let sct = (status >> 8) & 0x7;
            if sct == NVME_SCT_PATH {
                return Disposition::Failover;
            }
            if status & NVME_DNR != 0 || retries >= max_retries || is_media_error(status) {
                return Disposition::Fail;
            }
            let crd = ((status >> 11) & 0x3) as usize;
            let after = if crd == 0 {
                Duration::ZERO
            } else {
                Duration::from_millis(u64::from(crdt[crd - 1]) * 100)
            };
            Disposition::RetrySamePath { after }
        }
    }
}

/// The ghost-write guard (REFERENCE §2): a write that failed because its
/// command was cancelled or timed out (`-EINTR`, `-ETIMEDOUT`, NVMe 0x371
/// "aborted by host") may still be executing on the target. Re-sending it on
/// another path at once could let the stale copy land after a newer write to
/// the same blocks. Such a write waits `delay` (the path's
/// `write_failover_delay`: the controller's Command Quiesce Time, when it
/// reports one) before it is re-sent. Everything else fails over at once.
pub fn ghost_write_delay(is_write: bool, outcome: IoOutcome, delay: Duration) -> Duration {
    let cancelled = match outcome {
        IoOutcome::Errno(e) => e == libc_errno::EINTR || e == libc_errno::ETIMEDOUT,
        IoOutcome::Nvme(status) => status & 0x7ff == NVME_ABORTED_BY_HOST,
        IoOutcome::Ok => false,
    };
    if is_write && cancelled {
        delay
    } else {
        Duration::ZERO
    }
}

const NVME_ABORTED_BY_HOST: u16 = 0x371;

/// Media and data errors (SCT 2) and generic errors that retrying cannot fix.
fn is_media_error(status: u16) -> bool {
    let code = status & 0x7ff;
    let sct = code >> 8;
    // SCT 2 is media and data integrity errors: write fault, unrecovered read,
    // PI errors, compare failure, access denied...
    sct == 0x2
        // LBA out of range, invalid field, invalid opcode: the command itself is wrong.
        || code == 0x080
        || code == 0x002
        || code == 0x001
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_CRDT: [u16; 3] = [0, 0, 0];

    #[test]
    fn table() {
        let rows: &[(IoOutcome, u32, Disposition)] = &[
            (IoOutcome::Ok, 0, Disposition::Done),
            (
                IoOutcome::Errno(libc_errno::ENODEV),
                0,
                Disposition::Failover,
            ),
            (
                IoOutcome::Errno(libc_errno::ENXIO),
                0,
                Disposition::Failover,
            ),
            (IoOutcome::Errno(libc_errno::EIO), 0, Disposition::Failover),
            (
                IoOutcome::Errno(libc_errno::EINTR),
                0,
                Disposition::Failover,
            ),
            (
                IoOutcome::Errno(libc_errno::ENOLINK),
                0,
                Disposition::Failover,
            ),
            (
                IoOutcome::Errno(libc_errno::ETIMEDOUT),
                0,
                Disposition::Failover,
            ),
            (
                IoOutcome::Errno(libc_errno::ECONNRESET),
                0,
                Disposition::Failover,
            ),
            (IoOutcome::Errno(22), 0, Disposition::Fail), // EINVAL
            (IoOutcome::Errno(95), 0, Disposition::Fail), // EOPNOTSUPP
            (IoOutcome::Errno(28), 0, Disposition::Fail), // ENOSPC
            (IoOutcome::Nvme(0x300), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x301), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x302), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x303), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x360), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x370), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x371), 0, Disposition::Failover),
            // Path errors fail over even with DNR: the path, not the command, is bad.
            (IoOutcome::Nvme(0x370 | NVME_DNR), 0, Disposition::Failover),
            (IoOutcome::Nvme(0x280), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x281), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x282), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x285), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x286), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x080), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x002), 0, Disposition::Fail),
            (IoOutcome::Nvme(0x006 | NVME_DNR), 0, Disposition::Fail),
            // Internal error without DNR: retry on the same path, bounded.
            (
                IoOutcome::Nvme(0x006),
                0,
                Disposition::RetrySamePath {
                    after: Duration::ZERO,
                },
            ),
            (IoOutcome::Nvme(0x006), 3, Disposition::Fail),
        ];
        for (i, (outcome, retries, want)) in rows.iter().enumerate() {
            assert_eq!(
                classify(*outcome, *retries, 3, NO_CRDT),
                *want,
                "row {i}: {outcome:?}"
            );
        }
    }

    #[test]
    fn ghost_write_guard_table() {
        let d = Duration::from_millis(50);
        let rows: &[(bool, IoOutcome, Duration)] = &[
            (true, IoOutcome::Errno(libc_errno::EINTR), d),
            (true, IoOutcome::Errno(libc_errno::ETIMEDOUT), d),
            (true, IoOutcome::Nvme(0x371), d),
            (true, IoOutcome::Nvme(0x371 | NVME_DNR), d),
            // The path is gone for sure: the write cannot still be running there.
            (true, IoOutcome::Errno(libc_errno::ENODEV), Duration::ZERO),
            (
                true,
                IoOutcome::Errno(libc_errno::ECONNRESET),
                Duration::ZERO,
            ),
            (true, IoOutcome::Nvme(0x370), Duration::ZERO),
            (true, IoOutcome::Ok, Duration::ZERO),
            // Reads can be re-sent at once: a late read changes nothing.
            (false, IoOutcome::Errno(libc_errno::EINTR), Duration::ZERO),
            (false, IoOutcome::Nvme(0x371), Duration::ZERO),
        ];
        for (i, (write, outcome, want)) in rows.iter().enumerate() {
            assert_eq!(ghost_write_delay(*write, *outcome, d), *want, "row {i}");
        }
    }

    #[test]
    fn retry_delay_follows_crd() {
        let crdt = [1, 5, 20];
        let status = 0x006 | (2 << 11); // CRD = 2 -> CRDT2
        assert_eq!(
            classify(IoOutcome::Nvme(status), 0, 3, crdt),
            Disposition::RetrySamePath {
                after: Duration::from_millis(500)
            }
        );
    }
}
