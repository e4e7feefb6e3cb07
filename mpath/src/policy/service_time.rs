//! `service-time` (dm-ps-service-time): the candidate whose in-flight bytes
//! plus the incoming request, over its `relative_throughput` (the path
//! weight, 0-100), is smallest. Compared by cross-multiplication, shifted
//! down when the sizes could overflow; ties prefer the higher throughput,
//! then the path chosen least recently (dm moves the chosen path to the
//! tail of its list "to evenly balance"). Weight 0 is standby: used only
//! when no positively weighted path is.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as Atomic};

use super::{indices, Policy, SubmitContext};
use crate::engine::IoInfo;
use crate::path::{Path, PathId};

/// `relative_throughput` is at most 100 < 2^7.
const RT_SHIFT: u32 = 7;
const MAX_IN_FLIGHT_SIZE: u64 = u64::MAX >> RT_SHIFT;

/// dm's list order: `chosen[i]` is when path `i` was last chosen (a count
/// of selections), so among equal paths the lowest wins. Relaxed: two
/// workers racing may both take one path, as two CPUs would without dm's
/// lock; the next selection sees both.
#[derive(Debug)]
pub(crate) struct ServiceTime {
    chosen: [AtomicU64; 64],
    selections: AtomicU64,
}

impl Default for ServiceTime {
    fn default() -> Self {
        Self {
            chosen: std::array::from_fn(|_| AtomicU64::new(0)),
            selections: AtomicU64::new(0),
        }
    }
}

/// dm's `st_compare_load`: `Less` means path 1 is the better one.
pub(crate) fn compare_load(sz1: u64, rt1: u64, sz2: u64, rt2: u64, incoming: u64) -> Ordering {
    // Same throughput: the less loaded path.
    if rt1 == rt2 {
        return sz1.cmp(&sz2);
    }
    // Same load, or one path is standby: the higher throughput.
    if sz1 == sz2 || rt1 == 0 || rt2 == 0 {
        return rt2.cmp(&rt1);
    }
    let (mut sz1, mut sz2) = (sz1.saturating_add(incoming), sz2.saturating_add(incoming));
    if sz1 >= MAX_IN_FLIGHT_SIZE || sz2 >= MAX_IN_FLIGHT_SIZE {
        sz1 >>= RT_SHIFT;
        sz2 >>= RT_SHIFT;
    }
    // sz1/rt1 vs sz2/rt2 without dividing.
    match (sz1 * rt2).cmp(&(sz2 * rt1)) {
        Ordering::Equal => rt2.cmp(&rt1),
        o => o,
    }
}

/// The candidate with the least service time; between equals (the same
/// load and throughput), `i` beats `best` where `prefer(i, best)`.
pub(crate) fn least_service_time(
    paths: &[Path],
    candidates: u64,
    bytes: u64,
    prefer: impl Fn(usize, usize) -> bool,
) -> Option<usize> {
    let load = |i: usize| (paths[i].in_flight_bytes(), u64::from(paths[i].weight()));
    indices(candidates).reduce(|best, i| {
        let ((sz1, rt1), (sz2, rt2)) = (load(i), load(best));
        match compare_load(sz1, rt1, sz2, rt2, bytes) {
            Ordering::Less => i,
            Ordering::Equal if prefer(i, best) => i,
            _ => best,
        }
    })
}

impl Policy for ServiceTime {
    fn select(
        &self,
        paths: &[Path],
        candidates: u64,
        io: &IoInfo,
        _: &SubmitContext,
    ) -> Option<PathId> {
        let last = |i: usize| self.chosen[i].load(Atomic::Relaxed);
        let best = least_service_time(paths, candidates, io.bytes, |i, best| last(i) < last(best))?;
        let n = self.selections.fetch_add(1, Atomic::Relaxed) + 1;
        self.chosen[best].store(n, Atomic::Relaxed);
        Some(PathId(best))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn compare_load_cases() {
        use Ordering::*;
        // same throughput: load
        assert_eq!(compare_load(10, 1, 20, 1, 0), Less);
        assert_eq!(compare_load(20, 1, 20, 1, 0), Equal);
        // same load: higher throughput
        assert_eq!(compare_load(20, 4, 20, 1, 0), Less);
        // standby loses whatever the loads
        assert_eq!(compare_load(0, 0, 1 << 40, 1, 0), Greater);
        assert_eq!(compare_load(1 << 40, 1, 0, 0, 0), Less);
        // service time: 4:1 throughput, 3x load -> path 1 faster
        assert_eq!(compare_load(3000, 4, 1000, 1, 0), Less);
        // incoming is added to both sides: 3000+1000 / 4 = 1000 vs 1000+1000 / 1
        assert_eq!(compare_load(3000, 4, 1000, 1, 1000), Less);
        assert_eq!(compare_load(5000, 4, 1000, 1, 0), Greater);
        // equal service time: higher throughput
        assert_eq!(compare_load(4000, 4, 1000, 1, 0), Less);
        assert_eq!(compare_load(1000, 1, 4000, 4, 0), Greater);
        // near overflow: both shifted by 7, no wrap-around
        let big = u64::MAX >> 6;
        assert_eq!(compare_load(big, 100, big / 2, 1, 0), Less);
        assert_eq!(compare_load(big, 100, big / 200, 1, 0), Greater);
    }

    #[test]
    fn four_to_one_splits_bytes_four_to_one() {
        let ps = paths(2);
        ps[0].set_weight(4);
        let p = ServiceTime::default();
        let mut n = [0; 2];
        for _ in 0..100 {
            n[pick(&p, &ps, all(&ps), &read(4096), 0)] += 1;
        }
        assert_eq!(n, [80, 20]);
    }

    #[test]
    fn weight_zero_is_standby() {
        let ps = paths(2);
        ps[1].set_weight(0);
        let p = ServiceTime::default();
        for _ in 0..50 {
            assert_eq!(pick(&p, &ps, all(&ps), &read(4096), 0), 0);
        }
        assert_eq!(pick(&p, &ps, 0b10, &read(4096), 0), 1, "used when alone");
    }

    #[test]
    fn ties_go_to_the_least_recently_chosen() {
        let ps = paths(3);
        let p = ServiceTime::default();
        let select = |mask| p.select(&ps, mask, &read(4096), &at(0)).map(|id| id.0);
        // Nothing in flight anywhere (QD1): every choice is a tie, and the
        // paths take turns instead of the first taking everything.
        assert_eq!(
            [select(0b111), select(0b111), select(0b111), select(0b111)],
            [Some(0), Some(1), Some(2), Some(0)]
        );
        // Among 1 and 2, 1 was chosen longer ago.
        assert_eq!(select(0b110), Some(1));
        assert_eq!(select(0b110), Some(2));
        assert_eq!(select(0), None);
        // Load still comes first: a loaded path loses to an idle one
        // whatever the order.
        ps[1].acquire(4096, 0);
        assert_eq!(select(0b011), Some(0));
        assert_eq!(select(0b011), Some(0));
    }
}
