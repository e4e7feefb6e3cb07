//! The data path as a VMM sees it, through libblkio's vhost-user-blk frontend:
//! reads and writes on one and several queues, multi-segment requests, discard,
//! write-zeroes, two paths to one file, a file in memory.
//!
//! Runs against our daemon (`target/{release,debug}/vhost-mpath` or
//! `$VHOST_MPATH_BIN`); `TEST_SERVER=qsd` runs the same tests against
//! qemu-storage-daemon, to check the tests themselves.

mod support;

use std::time::Duration;
use support::*;
use vhost_mpath_tests::loadgen::{self, Workload};
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::procfs::{settled_threads_named, threads_named};
use vhost_mpath_tests::{Client, ClientOptions, Op, ServerKind};

#[test]
fn write_flush_read_one_queue() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    let max = client.info().max_transfer as usize;
    let big = if max == 0 { M } else { max.min(M) };
    let cap = client.capacity();
    let extents = [
        (0, 4 * K),
        (M as u64, 64 * K),
        (3 * M as u64 + 512, 512),
        (10 * M as u64, big),
        (cap - 4096, 4096),
    ];
    write_flush_verify(&fx, &mut client, &extents);
}

#[test]
fn write_flush_read_four_queues() {
    let fx = Fixture::new(|s| s.num_queues(4));
    write_flush_read_queues(&fx);
}

/// Four queues on one thread, and on two (two queues each): every queue
/// is served while the others spin or sleep, and a closed loop on all of
/// them at once completes every request in time.
#[test]
fn queues_sharing_threads() {
    for threads in [1, 2] {
        let fx = Fixture::new(|mut s| {
            s.ours_extra = vec!["--queue-threads".into(), threads.to_string()];
            s.num_queues(4)
        });
        write_flush_read_queues(&fx);
        let mut client = connect_with(
            &fx.server,
            &ClientOptions {
                num_queues: 4,
                mem_size: 32 << 20,
                ..ClientOptions::default()
            },
        );
        // Counted while a frontend is connected (between two connections
        // the old threads may still be stopping), and waited for (CI once
        // counted none: the threads had not named themselves yet).
        if kind() == ServerKind::Ours {
            let n =
                settled_threads_named(fx.server.pid(), "queue", threads, Duration::from_secs(5));
            assert_eq!(n, threads, "queue threads");
        }
        for w in [
            Workload::new(4096, 8, true).on_queues(4),
            Workload::new(4096, 1, false).on_queues(4),
        ] {
            let r = loadgen::run(&mut client, &w, Duration::from_millis(500), 7)
                .unwrap_or_else(|e| panic!("{} on {threads} thread(s): {e:?}", w.name));
            assert!(r.ios > 0, "{} on {threads} thread(s): nothing done", w.name);
        }
    }
}

/// A frontend with poll queues (blkio `num-poll-queues`) never asks for a
/// call: it polls the used ring (`vhost-bench --client-poll`). Its
/// requests complete all the same: data verified, then closed loops at
/// queue depth 8 on both queues and 1 on one.
#[test]
fn a_polling_frontend_is_served() {
    let fx = Fixture::new(|s| s.num_queues(2));
    let mut client = connect_with(
        &fx.server,
        &ClientOptions {
            num_queues: 2,
            poll: true,
            ..ClientOptions::default()
        },
    );
    assert_eq!(client.num_queues(), 2);
    write_flush_verify(&fx, &mut client, &[(0, 4 * K), (M as u64, 64 * K)]);
    for w in [
        Workload::new(4096, 8, true).on_queues(2),
        Workload::new(4096, 1, false),
    ] {
        let r = loadgen::run(&mut client, &w, Duration::from_millis(300), 3)
            .unwrap_or_else(|e| panic!("{}: {e:?}", w.name));
        assert!(r.ios > 0, "{}: nothing done", w.name);
    }
}

/// Writes on every queue at once, flushes them, reads each extent back on
/// another queue than the one that wrote it.
fn write_flush_read_queues(fx: &Fixture) {
    const PER_QUEUE: usize = 8;
    const LEN: usize = 64 * K;
    let mut client = fx.connect(4);
    let queues = client.num_queues();
    const QUEUES: usize = 4;
    assert_eq!(queues, QUEUES);
    assert!(
        client.info().max_queues >= QUEUES as u32,
        "{:?}",
        client.info()
    );

    let extent = |q: usize, i: usize| ((i * QUEUES + q) * LEN) as u64;
    let data: Vec<Vec<u8>> = (0..QUEUES * PER_QUEUE)
        .map(|n| pattern(42, extent(n % QUEUES, n / QUEUES), LEN))
        .collect();
    // All writes in flight at once, spread over every queue.
    let writes: Vec<(usize, Op)> = (0..QUEUES * PER_QUEUE)
        .map(|n| {
            let (q, i) = (n % QUEUES, n / QUEUES);
            let offset = extent(q, i);
            (
                q,
                Op::Write {
                    offset,
                    data: &data[n],
                },
            )
        })
        .collect();
    for r in client.batch(&writes) {
        r.expect("write");
    }
    let flushes: Vec<(usize, Op)> = (0..QUEUES).map(|q| (q, Op::Flush)).collect();
    for r in client.batch(&flushes) {
        r.expect("flush");
    }
    // Read each extent back on another queue than the one that wrote it.
    let reads: Vec<(usize, Op)> = (0..QUEUES * PER_QUEUE)
        .map(|n| {
            let (q, i) = (n % QUEUES, n / QUEUES);
            let offset = extent(q, i);
            ((q + 1) % QUEUES, Op::Read { offset, len: LEN })
        })
        .collect();
    for (n, r) in client.batch(&reads).into_iter().enumerate() {
        let got = r.expect("read").into_data();
        assert_bytes(&got, &data[n], &format!("extent {n}"));
        let offset = extent(n % QUEUES, n / QUEUES);
        assert_bytes(&fx.file_bytes(offset, LEN), &data[n], "backing file");
    }
}

/// Segment lengths, capped to what the device accepts (`max-segments`).
fn segments_for(client: &Client, lens: &[usize]) -> Vec<usize> {
    let max = client.info().max_segments.max(1) as usize;
    lens.iter().copied().take(max).collect()
}

fn writev_then_read(client: &mut Client, offset: u64, lens: &[usize]) {
    let total: usize = lens.iter().sum();
    let data = pattern(7, offset, total);
    let mut segments = Vec::new();
    let mut at = 0;
    for &len in lens {
        segments.push(&data[at..at + len]);
        at += len;
    }
    client.writev(offset, &segments).expect("writev");
    let got = client.read(offset, total).expect("read");
    assert_bytes(&got, &data, "read after writev");
    // Scatter the read differently from how the write was gathered.
    let mut read_lens: Vec<usize> = lens.iter().rev().copied().collect();
    if read_lens.len() > 1 {
        let moved = read_lens[0].min(512);
        read_lens[0] -= moved;
        read_lens[1] += moved;
        read_lens.retain(|&l| l > 0);
    }
    let got = client.readv(offset, &read_lens).expect("readv");
    assert_bytes(&got, &data, "readv after writev");
}

#[test]
fn multi_segment_requests() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    let lens = segments_for(&client, &[512, 4 * K, K, 8 * K, 2560, 64 * K, 512]);
    writev_then_read(&mut client, 128 * K as u64, &lens);
    // As many segments as the device allows (capped: blkio never splits, and a
    // request needs free descriptors for its header and status too).
    let many = segments_for(&client, &[512; 100]);
    writev_then_read(&mut client, 4 * M as u64, &many);
}

/// Segments whose lengths are not multiples of 512 (the total is). Linux guests
/// align segments to 512 bytes; other drivers need not.
#[test]
fn multi_segment_odd_lengths() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    let lens = segments_for(&client, &[100, 412, 1000, 24, 3000, 584]);
    assert_eq!(lens.iter().sum::<usize>() % 512, 0);
    writev_then_read(&mut client, 256 * K as u64, &lens);
}

#[test]
fn discard_reads_back_zeroes() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    assert!(
        client.info().max_discard_len > 0,
        "DISCARD not offered: {:?}",
        client.info()
    );
    let base = 2 * M as u64;
    let data = pattern(3, base, 3 * M);
    client.write_all(base, &data).expect("write");
    client.discard(base + M as u64, M as u64).expect("discard");
    let got = client.read_all(base, 3 * M).expect("read");
    assert_bytes(&got[..M], &data[..M], "before the discarded range");
    assert_zeroes(&got[M..2 * M], "discarded range");
    assert_bytes(&got[2 * M..], &data[2 * M..], "after the discarded range");
    assert_zeroes(&fx.file_bytes(base + M as u64, M), "backing file");
}

#[test]
fn write_zeroes_reads_back_zeroes() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    assert!(
        client.info().max_write_zeroes_len > 0,
        "WRITE_ZEROES not offered: {:?}",
        client.info()
    );
    for (i, unmap) in [false, true].into_iter().enumerate() {
        let base = (8 + 4 * i as u64) * M as u64;
        let data = pattern(4, base, 3 * M);
        client.write_all(base, &data).expect("write");
        client
            .write_zeroes(base + 4096, 2 * M as u64, unmap)
            .unwrap_or_else(|e| panic!("write zeroes (unmap {unmap}): {e}"));
        let got = client.read_all(base, 3 * M).expect("read");
        assert_bytes(&got[..4096], &data[..4096], "before the zeroed range");
        assert_zeroes(&got[4096..4096 + 2 * M], "zeroed range");
        assert_bytes(&got[4096 + 2 * M..], &data[4096 + 2 * M..], "after");
        assert_zeroes(&fx.file_bytes(base + 4096, 2 * M), "backing file");
    }
}

#[test]
fn two_paths_to_the_same_file() {
    let fx = Fixture::two_paths(2);
    let mut client = fx.connect(2);
    let data: Vec<Vec<u8>> = (0..128u64).map(|i| pattern(12, i * 4096, 4 * K)).collect();
    let writes: Vec<(usize, Op)> = (0..128)
        .map(|i| {
            (
                i % 2,
                Op::Write {
                    offset: (i * 4096) as u64,
                    data: &data[i],
                },
            )
        })
        .collect();
    for r in client.batch(&writes) {
        r.expect("write");
    }
    client.flush().expect("flush");
    let reads: Vec<(usize, Op)> = (0..128)
        .map(|i| {
            (
                (i + 1) % 2,
                Op::Read {
                    offset: (i * 4096) as u64,
                    len: 4 * K,
                },
            )
        })
        .collect();
    for (i, r) in client.batch(&reads).into_iter().enumerate() {
        assert_bytes(&r.expect("read").into_data(), &data[i], "read");
    }
    assert_bytes(&fx.file_bytes(0, 512 * K), &data.concat(), "backing file");
}

/// A file in memory (tmpfs) is served by the queue threads themselves
/// (`inline`): what is written, unaligned segments included, reads back and
/// is in the file, and the kernel never starts an io_uring worker thread
/// (`iou-wrk`), as it does for tmpfs requests sent through the ring.
#[test]
fn a_file_in_memory_is_served_without_io_uring_workers() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipping: no /dev/shm");
        return;
    }
    let rpc_dir = vhost_mpath_tests::TempDir::new("vhost-mpath-rpc").expect("temp dir");
    let rpc = rpc_dir.path().join("rpc.sock");
    let fx = Fixture::in_dir(shm, DISK_SIZE, |mut s| {
        s.ours_extra = vec!["--rpc-socket".into(), rpc.display().to_string()];
        s
    });
    if kind() == ServerKind::Ours {
        let paths = vhost_mpath_tests::rpc::RpcClient::connect(&rpc)
            .expect("rpc")
            .ok("get_paths", serde_json::json!({}));
        assert_eq!(paths["paths"][0]["inline"], true, "{paths}");
    }
    let mut client = fx.connect(1);
    let extents = [(0, 4 * K), (M as u64, 128 * K), (3 * M as u64 + 512, 512)];
    write_flush_verify(&fx, &mut client, &extents);
    let lens = segments_for(&client, &[100, 412, 1000, 24, 3000, 584]);
    writev_then_read(&mut client, 256 * K as u64, &lens);
    client.discard(M as u64, 64 * K as u64).expect("discard");
    assert_zeroes(&fx.file_bytes(M as u64, 64 * K), "discarded range");
    let r = loadgen::run(
        &mut client,
        &Workload::new(128 * 1024, 8, false),
        Duration::from_millis(300),
        5,
    )
    .expect("reads");
    assert!(r.ios > 0, "no reads done");
    if kind() == ServerKind::Ours {
        assert_eq!(
            threads_named(fx.server.pid(), "iou-wrk"),
            0,
            "io_uring workers"
        );
    }
}
