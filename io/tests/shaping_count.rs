//! `Shaping::any_active` counts every active shaping in the process: an
//! I/O queue skips looking up a path's shaping while it says none is. A
//! test binary of its own, so that no other test's shapings count.

use mpath_io::{ShapeConfig, Shaping};

fn on() -> ShapeConfig {
    ShapeConfig {
        delay_us: 1,
        ..Default::default()
    }
}

#[test]
fn any_active_is_false_exactly_while_no_shaping_is_active() {
    assert!(!Shaping::any_active());
    let idle = Shaping::default();
    idle.set(&ShapeConfig::default());
    assert!(!Shaping::any_active(), "an inactive shaping does not count");

    let a = Shaping::new(&on());
    assert!(Shaping::any_active());
    a.set(&on());
    a.set(&ShapeConfig::default());
    assert!(!Shaping::any_active(), "set twice, counted once");
    a.set(&ShapeConfig::default());
    assert!(!Shaping::any_active());

    let b = Shaping::new(&on());
    let c = Shaping::new(&on());
    b.set(&ShapeConfig::default());
    assert!(Shaping::any_active(), "c still counts");
    drop(c);
    assert!(
        !Shaping::any_active(),
        "a dropped active shaping stops counting"
    );
    drop(b);

    // Racing sets of one shaping leave it counted once while it is active
    // and not at all after.
    let d = Shaping::default();
    std::thread::scope(|s| {
        for i in 0..8 {
            let d = &d;
            s.spawn(move || {
                for _ in 0..2000 {
                    if i % 2 == 0 {
                        d.set(&on());
                    } else {
                        d.set(&ShapeConfig::default());
                    }
                }
            });
        }
    });
    d.set(&on());
    assert!(Shaping::any_active());
    d.set(&ShapeConfig::default());
    assert!(!Shaping::any_active());
    drop((a, d, idle));
    assert!(!Shaping::any_active());
}
