//! `mpath-sim sweep`'s command line: what it refuses and what `--index`
//! shows.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mpath-sim"))
        .arg("sweep")
        .args(args)
        .output()
        .expect("mpath-sim runs")
}

#[test]
fn draws_and_longer_are_refused_out_of_range_and_with_index() {
    for args in [
        &["--seed", "45", "--count", "3", "--draws", "0"][..],
        &["--seed", "45", "--count", "3", "--longer", "0"],
        &[
            "--seed",
            "45",
            "--count",
            "3",
            "--longer",
            "18446744073709551615",
        ],
        &["--seed", "45", "--count", "3", "--draws", "101"],
        &[
            "--seed", "45", "--index", "3", "--count", "3", "--draws", "2",
        ],
    ] {
        let out = sim(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn index_ends_with_autos_model_of_each_path() {
    let out = sim(&["--seed", "45", "--index", "3"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with("auto's model at the end:"), "{last}");
    // Both paths of sweep-45-3, each with a bandwidth and a latency.
    assert_eq!(last.matches(" MiB/s L ").count(), 2, "{last}");
}
