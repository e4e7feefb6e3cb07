//! Requests larger than a path's transfer or page limits are cut into
//! parts (the kernel never splits NVMe passthrough commands). File paths
//! take `max-transfer` / `max-segments` options that impose such limits, so
//! the cutting is checked here with real data, and on NVMe in tests/vm.

mod support;

use serde_json::json;
use support::*;
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::rpc::path_stats;
use vhost_mpath_tests::Op;

#[test]
fn large_and_scattered_requests_are_cut_at_the_path_limits() {
    let Some(lab) = Lab::start(
        ",max-transfer=16K,max-segments=5",
        ",max-transfer=16K,max-segments=5",
        &[],
    ) else {
        return;
    };
    let mut client = lab.client();
    // One 1 MiB write and read: 64 parts of 16 KiB at most.
    let big = pattern(21, 0, 1 << 20);
    client.write(0, &big).unwrap();
    assert_bytes(&client.read(0, 1 << 20).unwrap(), &big, "1 MiB request");
    assert_bytes(&lab.file_bytes(0, 1 << 20), &big, "backing file");
    // Scattered segments whose sizes are not page multiples.
    let segs: Vec<Vec<u8>> = (0..12)
        .map(|i| pattern(22 + i, 0, 1536 * (1 + i as usize % 3)))
        .collect();
    let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
    let total: usize = refs.iter().map(|s| s.len()).sum();
    let r = client.batch(&[(
        0,
        Op::Writev {
            offset: 2 << 20,
            segments: &refs,
        },
    )]);
    assert!(r[0].is_ok(), "{r:?}");
    let flat: Vec<u8> = segs.concat();
    assert_bytes(
        &client.read(2 << 20, total).unwrap(),
        &flat,
        "scattered request",
    );
    assert_bytes(&lab.file_bytes(2 << 20, total), &flat, "backing file");
    // The paths saw many more I/Os than the client sent requests.
    let stats = lab.rpc().ok("get_stats", json!({}));
    let ios: u64 = ["a", "b"]
        .iter()
        .map(|n| {
            let p = path_stats(&stats, n);
            p["reads"].as_u64().unwrap() + p["writes"].as_u64().unwrap()
        })
        .sum();
    assert!(
        ios >= 128,
        "1 MiB in 16 KiB parts twice is 128 I/Os at least; saw {ios}"
    );
    assert_eq!(stats["device"]["errors_to_guest"], 0, "{stats}");
}
