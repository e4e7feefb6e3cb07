//! Requests the device must refuse: beyond the capacity, misaligned, writes to a
//! read-only disk. Each must fail and leave the disk as it was.
//!
//! `TEST_SERVER=qsd` runs them against qemu-storage-daemon.

mod support;

use support::*;
use vhost_mpath_tests::pattern::pattern;
use vhost_mpath_tests::{Client, ClientOptions, ServerKind};

#[test]
fn out_of_range_requests_fail_and_change_nothing() {
    let fx = Fixture::new(|s| s);
    let mut client = fx.connect(1);
    let cap = client.capacity();
    let tail = cap - 64 * K as u64;
    let data = pattern(5, tail, 64 * K);
    client.write(tail, &data).expect("write the last 64 KiB");
    client.flush().expect("flush");

    let junk = vec![0xeeu8; 8 * K];
    assert_device_error(client.write(cap, &junk[..4096]), "write at capacity");
    assert_device_error(client.write(cap - 4096, &junk), "write across the end");
    assert_device_error(client.write(cap + M as u64, &junk), "write beyond the end");
    assert_device_error(
        client.write(u64::MAX - 4095, &junk[..4096]),
        "write at 2^64-4096",
    );
    assert_device_error(client.read(cap, 4096), "read at capacity");
    assert_device_error(client.read(cap - 4096, 8 * K), "read across the end");
    assert_device_error(
        client.writev(cap - 512, &[&junk[..512], &junk[..512]]),
        "writev across",
    );
    assert_device_error(client.discard(cap - 4096, 8192), "discard across the end");
    assert_device_error(
        client.write_zeroes(cap, 4096, false),
        "write zeroes at capacity",
    );
    assert_device_error(
        client.write_zeroes(cap - 4096, 8192, true),
        "write zeroes across",
    );

    assert_bytes(
        &client.read(tail, 64 * K).expect("read"),
        &data,
        "tail after",
    );
    assert_bytes(&fx.file_bytes(tail, 64 * K), &data, "backing file tail");
    assert_eq!(fx.file_len(), DISK_SIZE, "backing file grew");
    // The server still serves requests after the errors.
    write_flush_verify(&fx, &mut client, &[(0, 4 * K)]);
}

/// Requests misaligned to the device's block size (or to 512 bytes) fail;
/// nothing changes on disk.
fn misaligned_requests_fail(fx: &Fixture) {
    let mut client = fx.connect(1);
    let align = client.request_alignment() as u64;
    let base = M as u64;
    let data = pattern(6, base, 64 * K);
    client.write(base, &data).expect("write");
    client.flush().expect("flush");
    let junk = vec![0xeeu8; 8 * K];

    // Lengths not a multiple of 512 reach the device, which must refuse them.
    assert_device_error(client.write(base, &junk[..100]), "write of 100 bytes");
    assert_device_error(
        client.write(base, &junk[..4096 + 100]),
        "write of 4196 bytes",
    );
    assert_device_error(client.read(base, 1000), "read of 1000 bytes");
    assert_device_error(
        client.writev(base, &[&junk[..512], &junk[..300]]),
        "writev of 812 bytes",
    );
    // Offsets not a multiple of 512 cannot be expressed in sectors: blkio refuses them.
    let e = client
        .write(base + 100, &junk[..4096])
        .expect_err("write at +100");
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert!(!e.from_device(), "{e}");
    // Sector-aligned but not block-aligned: only the device can refuse these.
    if align > 512 {
        assert_device_error(
            client.write(base + 512, &junk[..align as usize]),
            "write at +512",
        );
        assert_device_error(client.read(base + 512, align as usize), "read at +512");
    }

    assert_bytes(
        &client.read(base, 64 * K).expect("read"),
        &data,
        "data after",
    );
    assert_bytes(&fx.file_bytes(base, 64 * K), &data, "backing file");
}

#[test]
fn misaligned_requests_fail_and_change_nothing() {
    misaligned_requests_fail(&Fixture::new(|s| s));
}

/// The same with 4 KiB logical blocks, where offsets like +512 are sector-aligned
/// but not block-aligned. Only qsd has a switch for the block size.
#[test]
fn misaligned_requests_fail_with_4k_blocks() {
    if kind() != ServerKind::Qsd {
        eprintln!("skipped: needs a server option for 4 KiB logical blocks");
        return;
    }
    let fx = Fixture::new(|mut s| {
        s.qsd_export_extra.push("logical-block-size=4096".into());
        s
    });
    assert_eq!(fx.connect(1).request_alignment(), 4096);
    misaligned_requests_fail(&fx);
}

#[test]
fn read_only_server_refuses_writes() {
    let fx = Fixture::new(|s| s.read_only(true));
    fx.seed_file(9, 0, 64 * K);
    // A read-write client sees VIRTIO_BLK_F_RO and refuses to start.
    let opts = ClientOptions::default();
    let err = Client::connect_with(fx.server.socket(), &opts)
        .err()
        .expect("a read-write client must not start on a read-only device");
    assert_eq!(err.errno().raw_os_error(), libc::EROFS, "{err}");

    let mut client = connect_with(
        &fx.server,
        &ClientOptions {
            read_only: true,
            ..ClientOptions::default()
        },
    );
    assert_bytes(
        &client.read(0, 64 * K).expect("read"),
        &pattern(9, 0, 64 * K),
        "read",
    );
    // blkio itself refuses writes to a read-only device (EBADF): a server-side
    // check needs a frontend that ignores VIRTIO_BLK_F_RO.
    assert!(client.write(0, &[0u8; 4096]).is_err());
    assert!(client.write_zeroes(0, 4096, false).is_err());
    assert!(client.discard(0, 4096).is_err());
    client.flush().expect("flush on a read-only device");
    assert_bytes(
        &fx.file_bytes(0, 64 * K),
        &pattern(9, 0, 64 * K),
        "backing file",
    );
}
