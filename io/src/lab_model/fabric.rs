//! A TCP-like fabric link (`rtt-us`, `window-kib`, `loss-ppm`), as under
//! NVMe/TCP or iSCSI: the bytes in flight are bounded by a congestion
//! window that starts at ten segments (RFC 6928), grows by what is
//! acknowledged while below the slow-start threshold (doubling per round
//! trip) and by one segment per round trip above it (additive increase),
//! up to `window-kib`, and halves on a loss (multiplicative decrease, RFC
//! 5681 §3.1 with fast recovery); the lost segment's retransmission costs
//! its command one more round trip. A command goes out in order, in
//! pieces as the window opens, and is done one round trip after its last
//! piece went out. Not modelled: the idle restart of RFC 5681 §4.1,
//! retransmission timeouts, the link's own bandwidth (`bw-mbps` is its
//! own stage). The simulator's `Tcp` is the same (with a bandwidth of its
//! own).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Rng;

/// Segment size: a 1500-byte MTU less IPv4, TCP and timestamp headers.
const MSS: f64 = 1448.0;
const INITIAL_WINDOW: f64 = 10.0 * MSS;
/// The window never halves below two segments.
const MIN_WINDOW: f64 = 2.0 * MSS;

#[derive(Debug)]
pub(super) struct Fabric {
    rtt_ns: u64,
    max_window: f64,
    loss_ppm: u32,
    /// The congestion window and slow-start threshold (bytes).
    cwnd: f64,
    ssthresh: f64,
    in_flight: f64,
    /// Pieces in flight: (acknowledged at, bytes), earliest on top.
    acks: BinaryHeap<Reverse<(u64, u64)>>,
    /// When the last piece went out: the link sends in order.
    sent: u64,
}

impl Fabric {
    pub(super) fn new(rtt_us: u64, window_kib: u64, loss_ppm: u32) -> Fabric {
        let max_window = (window_kib as f64 * 1024.0).max(MIN_WINDOW);
        Fabric {
            rtt_ns: rtt_us.saturating_mul(1000),
            max_window,
            loss_ppm,
            cwnd: INITIAL_WINDOW.min(max_window),
            ssthresh: max_window,
            in_flight: 0.0,
            acks: BinaryHeap::new(),
            sent: 0,
        }
    }

    fn on_ack(&mut self, bytes: u64) {
        let b = bytes as f64;
        self.in_flight -= b;
        if self.cwnd < self.ssthresh {
            self.cwnd += b;
        } else {
            self.cwnd += MSS * b / self.cwnd;
        }
        self.cwnd = self.cwnd.min(self.max_window);
    }

    /// Whether a command of `bytes` loses a segment: `loss-ppm` per
    /// million segments.
    fn loses(&self, bytes: u64, rng: &mut Rng) -> bool {
        if self.loss_ppm == 0 {
            return false;
        }
        let segments = (bytes as f64 / MSS).ceil().max(1.0);
        let p = 1.0 - (1.0 - f64::from(self.loss_ppm) * 1e-6).powf(segments);
        rng.unit() <= p
    }

    /// When a command of `bytes` that reaches the link at `t` is across.
    pub(super) fn transfer(&mut self, t: u64, bytes: u64, rng: &mut Rng) -> u64 {
        let lost = self.loses(bytes, rng);
        while let Some(&Reverse((at, b))) = self.acks.peek() {
            if at > t {
                break;
            }
            self.acks.pop();
            self.on_ack(b);
        }
        let mut at = t.max(self.sent);
        let mut left = bytes.max(1);
        let mut done = at;
        while left > 0 {
            // Wait for acknowledgements until a segment (or the rest) fits.
            let want = (left as f64).min(MSS);
            while self.cwnd - self.in_flight < want {
                let Some(Reverse((ack, b))) = self.acks.pop() else {
                    break;
                };
                at = at.max(ack);
                self.on_ack(b);
            }
            let room = (self.cwnd - self.in_flight).max(want).floor() as u64;
            let piece = left.min(room.max(1));
            left -= piece;
            let mut ack = at + self.rtt_ns;
            if lost && left == 0 {
                // Fast retransmit: the window halves, the segment comes one
                // round trip later.
                self.ssthresh = (self.in_flight.max(self.cwnd) / 2.0).max(MIN_WINDOW);
                self.cwnd = self.ssthresh;
                ack += self.rtt_ns;
            }
            self.in_flight += piece as f64;
            self.acks.push(Reverse((ack, piece)));
            done = done.max(ack);
        }
        self.sent = at;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// A closed loop of `qd` commands of `bytes` for `secs`: bytes per
    /// second over the last second.
    fn closed_loop(f: &mut Fabric, qd: usize, bytes: u64, secs: u64) -> f64 {
        let mut rng = Rng(0);
        let end = T0 + secs * 1000 * MS;
        let mut ready = vec![T0; qd];
        let mut late = 0u64;
        loop {
            let (i, &t) = ready.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
            if t >= end {
                break;
            }
            let done = f.transfer(t, bytes, &mut rng);
            ready[i] = done;
            if done >= end - 1000 * MS && done < end {
                late += bytes;
            }
        }
        late as f64
    }

    #[test]
    fn one_round_trip_while_the_window_has_room() {
        let mut f = Fabric::new(100, 1024, 0);
        let mut rng = Rng(0);
        assert_eq!(f.transfer(T0, 4096, &mut rng), T0 + 100_000);
        assert_eq!(f.transfer(T0, 4096, &mut rng), T0 + 100_000);
        // 8 KiB in flight of a 14480-byte window: 6288 bytes go now, the
        // rest after the first acknowledgement, a round trip later.
        assert_eq!(f.transfer(T0, 8192, &mut rng), T0 + 200_000);
    }

    #[test]
    fn throughput_is_window_over_rtt_once_open() {
        // 64 KiB window, 1 ms: 64 MiB/s at a depth that fills it.
        let mut f = Fabric::new(1000, 64, 0);
        let bps = closed_loop(&mut f, 64, 4096, 3);
        let want = 64.0 * 1024.0 * 1000.0;
        assert!((bps - want).abs() < want * 0.03, "{bps} vs {want}");
        // Too shallow a queue to fill it: the depth decides (8 x 4 KiB/ms).
        let mut f = Fabric::new(1000, 64, 0);
        let bps = closed_loop(&mut f, 8, 4096, 3);
        let want = 8.0 * 4096.0 * 1000.0;
        assert!((bps - want).abs() < want * 0.02, "{bps} vs {want}");
    }

    #[test]
    fn losses_halve_the_window_and_cost_a_round_trip() {
        let mut f = Fabric::new(1000, 64, 1_000_000);
        let mut rng = Rng(0);
        let w = f.cwnd;
        assert_eq!(f.transfer(T0, 4096, &mut rng), T0 + 2 * MS);
        assert_eq!(f.cwnd, w / 2.0);
        // With 1 segment in 1000 lost the window stays well below its cap:
        // less throughput than the clean link's.
        let clean = closed_loop(&mut Fabric::new(1000, 1024, 0), 256, 4096, 4);
        let lossy = closed_loop(&mut Fabric::new(1000, 1024, 1000), 256, 4096, 4);
        assert!(lossy < clean * 0.7, "lossy {lossy}, clean {clean}");
    }

    #[test]
    fn a_command_larger_than_the_window_takes_several_rounds() {
        let mut f = Fabric::new(100, 1024, 0);
        let mut rng = Rng(0);
        // Window 14480, doubling per round (slow start): 14480 + 28960 +
        // 22096 bytes: three rounds for 64 KiB.
        assert_eq!(f.transfer(T0, 64 * 1024, &mut rng), T0 + 300_000);
    }
}
