//! The QoS buckets against an injected clock.

use crate::qos::{QosDir, QosLimits, Throttle};
use crate::time::{Nanos, NANOS_PER_SEC};

const MS: Nanos = 1_000_000;

/// Requests of `bytes` in `dir` sent as soon as the throttle lets them,
/// from `start` for `secs` seconds, stepping the clock to each wait's end:
/// how many went.
fn drive(t: &mut Throttle, dir: QosDir, bytes: u64, start: Nanos, secs: u64) -> (u64, Nanos) {
    let end = start + secs * NANOS_PER_SEC;
    let mut now = start;
    let mut sent = 0;
    while now < end {
        match t.admit(dir, bytes, now) {
            Ok(()) => sent += 1,
            Err(w) => now += w,
        }
    }
    (sent, now)
}

fn limits(f: impl FnOnce(&mut QosLimits)) -> QosLimits {
    let mut l = QosLimits::default();
    f(&mut l);
    l.validate().unwrap();
    l
}

#[test]
fn no_limit_never_waits() {
    let mut t = Throttle::new(QosLimits::default(), 0);
    for i in 0..10_000 {
        assert_eq!(t.admit(QosDir::Write, 1 << 20, i), Ok(()));
    }
}

#[test]
fn iops_limit_refills_at_its_rate() {
    let mut t = Throttle::new(limits(|l| l.total_iops_sec = 500), 0);
    let (sent, _) = drive(&mut t, QosDir::Read, 4096, 0, 10);
    // 10 s at 500/s plus the tenth of a second that may go at once.
    assert!((5000..=5052).contains(&sent), "{sent}");
}

#[test]
fn bytes_limit_per_direction() {
    let mut t = Throttle::new(limits(|l| l.write_bytes_sec = 8_000_000), 0);
    let (sent, _) = drive(&mut t, QosDir::Write, 65536, 0, 10);
    let rate = sent * 65536 / 10;
    assert!(
        (8_000_000..=8_100_000 + 65536).contains(&rate),
        "{rate} B/s"
    );
    // Reads are not limited by a write limit.
    assert_eq!(t.wait(QosDir::Read, 10 * NANOS_PER_SEC), 0);
}

#[test]
fn read_and_write_limits_are_separate() {
    let mut t = Throttle::new(
        limits(|l| {
            l.read_iops_sec = 100;
            l.write_iops_sec = 1000;
        }),
        0,
    );
    let (r, _) = drive(&mut t, QosDir::Read, 512, 0, 5);
    let (w, _) = drive(&mut t, QosDir::Write, 512, 5 * NANOS_PER_SEC, 5);
    assert!((500..=512).contains(&r), "{r}");
    assert!((5000..=5102).contains(&w), "{w}");
}

#[test]
fn size_iops_sec_counts_large_requests_as_several() {
    let l = limits(|l| {
        l.total_iops_sec = 100;
        l.size_iops_sec = 4096;
    });
    let mut t = Throttle::new(l, 0);
    // 64k = 16 operations: 100/16 requests per second.
    let (sent, _) = drive(&mut t, QosDir::Read, 65536, 0, 16);
    assert!((100..=102).contains(&sent), "{sent}");
    // Smaller than size_iops_sec: one operation each.
    let mut t = Throttle::new(l, 0);
    let (sent, _) = drive(&mut t, QosDir::Read, 512, 0, 10);
    assert!((1000..=1011).contains(&sent), "{sent}");
}

#[test]
fn burst_runs_at_max_then_falls_to_the_limit() {
    let l = limits(|l| {
        l.total_iops_sec = 100;
        l.total_iops_sec_max = 1000;
        l.total_iops_sec_max_length = 3;
    });
    let mut t = Throttle::new(l, 0);
    // The burst bucket (1000 * 3) fills at 1000 - 100 per second: 3.33 s at
    // the burst rate, held to it by the burst's own bucket.
    let (first, now) = drive(&mut t, QosDir::Write, 4096, 0, 1);
    assert!((1000..=1101).contains(&first), "{first}");
    let (second, now) = drive(&mut t, QosDir::Write, 4096, now, 2);
    assert!((2000..=2002).contains(&second), "{second}");
    // After the burst: the limit.
    let (_, now) = drive(&mut t, QosDir::Write, 4096, now, 1);
    let (after, _) = drive(&mut t, QosDir::Write, 4096, now, 5);
    assert!((500..=502).contains(&after), "{after}");
}

#[test]
fn burst_refills_while_idle() {
    let l = limits(|l| {
        l.total_iops_sec = 100;
        l.total_iops_sec_max = 1000;
        l.total_iops_sec_max_length = 2;
    });
    let mut t = Throttle::new(l, 0);
    let (_, now) = drive(&mut t, QosDir::Read, 512, 0, 10);
    // 20 s idle leaks 2000 units: a full burst again.
    let (burst, _) = drive(&mut t, QosDir::Read, 512, now + 20 * NANOS_PER_SEC, 1);
    assert!((1000..=1101).contains(&burst), "{burst}");
}

#[test]
fn over_budget_waits_exactly_for_the_overflow() {
    let mut t = Throttle::new(limits(|l| l.total_bytes_sec = 1_000_000), 0);
    // The first request may overfill the bucket (100 kB size).
    assert_eq!(t.admit(QosDir::Write, 1_100_000, 0), Ok(()));
    // 1 MB over the size at 1 MB/s: one second.
    let w = t.admit(QosDir::Read, 4096, 0).unwrap_err();
    assert!((NANOS_PER_SEC..NANOS_PER_SEC + MS).contains(&w), "{w}");
    assert!(t.admit(QosDir::Read, 4096, w - MS).is_err());
    assert_eq!(t.admit(QosDir::Read, 4096, w), Ok(()));
}

#[test]
fn clock_going_back_leaks_nothing_and_does_not_stall() {
    let mut t = Throttle::new(limits(|l| l.total_iops_sec = 10), 1000 * NANOS_PER_SEC);
    let start = 1000 * NANOS_PER_SEC;
    // A tenth of 10/s may go at once (the bucket's size: one), then waits.
    assert_eq!(t.admit(QosDir::Read, 512, start), Ok(()));
    assert_eq!(t.admit(QosDir::Read, 512, start), Ok(()));
    let w = t.admit(QosDir::Read, 512, start).unwrap_err();
    // Back by 500 s: the same wait as before, counted from the new reading.
    let back = start - 500 * NANOS_PER_SEC;
    assert_eq!(t.admit(QosDir::Read, 512, back), Err(w));
    assert_eq!(t.admit(QosDir::Read, 512, back + w), Ok(()));
}

#[test]
fn clock_jumping_ahead_gives_one_bucket_at_most() {
    let mut t = Throttle::new(limits(|l| l.total_iops_sec = 10), 0);
    let (_, now) = drive(&mut t, QosDir::Read, 512, 0, 1);
    let (sent, _) = drive(
        &mut t,
        QosDir::Read,
        512,
        now + 1_000_000 * NANOS_PER_SEC,
        1,
    );
    // One at once (a tenth of 10/s rounds up to one), then 10 per second.
    assert!((10..=12).contains(&sent), "{sent}");
    // The end of time does not overflow.
    let mut t = Throttle::new(limits(|l| l.total_iops_sec = 10), 0);
    assert_eq!(t.admit(QosDir::Read, 512, u64::MAX), Ok(()));
}

#[test]
fn validation_follows_qemu() {
    let bad = |f: fn(&mut QosLimits)| {
        let mut l = QosLimits::default();
        f(&mut l);
        l.validate().unwrap_err()
    };
    assert!(bad(|l| {
        l.total_iops_sec = 1;
        l.read_iops_sec = 1
    })
    .contains("cannot be combined"));
    assert!(bad(|l| l.total_bytes_sec_max = 10).contains("needs"));
    assert!(bad(|l| {
        l.write_iops_sec = 10;
        l.write_iops_sec_max = 5
    })
    .contains("below"));
    assert!(bad(|l| {
        l.write_iops_sec = 10;
        l.write_iops_sec_max_length = 5
    })
    .contains("needs"));
    assert!(!QosLimits::default().any());
    assert!(limits(|l| l.size_iops_sec = 4096).validate().is_ok());
    assert!(!limits(|l| l.size_iops_sec = 4096).any());
}

#[test]
fn every_field_is_named() {
    let mut l = QosLimits::default();
    for (i, name) in crate::qos::QOS_FIELDS.iter().enumerate() {
        *l.field_mut(name).unwrap() = i as u64 + 1;
    }
    let v = serde_json::to_value(l).unwrap();
    for (i, name) in crate::qos::QOS_FIELDS.iter().enumerate() {
        assert_eq!(v[name], i as u64 + 1, "{name}");
    }
    assert!(l.field_mut("iotune").is_none());
}
