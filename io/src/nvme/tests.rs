//! Encoding and decoding of whole I/Os, without a device.

use super::*;

fn driver(lba_shift: u32, dsm: bool, write_zeroes: bool, vwc: bool) -> NvmeDriver {
    NvmeDriver {
        info: DeviceInfo::default(),
        file: File::open("/dev/null").unwrap(),
        device: "/dev/ng9n1".into(),
        nsid: 1,
        lba_shift,
        capacity_lbas: AtomicU64::new(1 << 24),
        timeout_ms: 1500,
        dsm,
        write_zeroes,
        vwc,
        ana: false,
        anagrpid: 0,
        nanagrpid: 0,
        nn: 1,
        refused: AtomicU64::new(0),
        ring_file_id: next_ring_file_id(),
        io_poll: false,
    }
}

fn iov(buf: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }
}

fn enc(
    d: &NvmeDriver,
    op: IoOp,
    offset: u64,
    len: u64,
    iovs: &[libc::iovec],
) -> Result<Encoded, &'static str> {
    // SAFETY: the iovecs describe live test buffers.
    unsafe { d.encode(op, offset, len, iovs.as_ptr(), iovs.len()) }
}

#[test]
fn single_buffer_read_and_fua_write() {
    let d = driver(9, true, true, true);
    let mut buf = vec![0u8; 8192];
    let v = [iov(&mut buf)];
    let Ok(Encoded::Cmd { cmd_op, cmd }) = enc(&d, IoOp::Read, 4096, 8192, &v) else {
        panic!("read not encoded");
    };
    assert_eq!(cmd_op, NVME_URING_CMD_IO);
    assert_eq!(cmd.opcode, cmd::opcode::READ);
    assert_eq!(cmd.nsid, 1);
    assert_eq!((cmd.cdw10, cmd.cdw11, cmd.cdw12), (8, 0, 15));
    assert_eq!(cmd.addr, buf.as_ptr() as u64);
    assert_eq!(cmd.data_len, 8192);
    assert_eq!(cmd.timeout_ms, 1500);

    let Ok(Encoded::Cmd { cmd, .. }) = enc(&d, IoOp::Write { fua: true }, 0, 8192, &v) else {
        panic!("write not encoded");
    };
    assert_eq!(cmd.opcode, cmd::opcode::WRITE);
    assert_eq!(cmd.cdw12, 15 | cmd::CDW12_FUA);
}

#[test]
fn several_buffers_use_the_iovec_command() {
    let d = driver(12, true, true, true);
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 8192];
    let v = [iov(&mut a), iov(&mut b)];
    let Ok(Encoded::Cmd { cmd_op, cmd }) = enc(&d, IoOp::Write { fua: false }, 1 << 32, 12288, &v)
    else {
        panic!("writev not encoded");
    };
    assert_eq!(cmd_op, NVME_URING_CMD_IO_VEC);
    assert_eq!(cmd.addr, v.as_ptr() as u64);
    assert_eq!(cmd.data_len, 2, "data_len is the iovec count");
    // 4 KiB blocks: SLBA = 2^32 / 4096 = 2^20.
    assert_eq!((cmd.cdw10, cmd.cdw11, cmd.cdw12), (1 << 20, 0, 2));
}

#[test]
fn refusals() {
    let d = driver(12, false, false, false);
    let mut buf = vec![0u8; 8192];
    let v = [iov(&mut buf)];
    assert!(
        enc(&d, IoOp::Read, 512, 4096, &v[..]).is_err(),
        "unaligned offset"
    );
    assert!(
        enc(&d, IoOp::Read, 0, 8192 - 512, &v).is_err(),
        "unaligned length"
    );
    assert!(
        enc(&d, IoOp::Read, 0, 4096, &v).is_err(),
        "buffers larger than the length"
    );
    assert!(
        enc(&d, IoOp::Read, (1 << 36) - 4096, 8192, &v).is_err(),
        "past the end"
    );
    assert!(enc(&d, IoOp::Read, 0, 0, &[]).is_err(), "empty");
    assert!(enc(&d, IoOp::WriteZeroes { unmap: false }, 0, 4096, &[]).is_err());
    assert!(enc(&d, IoOp::Discard, 0, 4096, &[]).is_err());
    let mut big = vec![0u8; (MAX_NLB as usize + 1) * 512];
    let d512 = driver(9, false, false, false);
    let bv = [iov(&mut big)];
    assert!(
        enc(&d512, IoOp::Read, 0, big.len() as u64, &bv).is_err(),
        "over 65536 blocks"
    );
    assert!(enc(
        &d512,
        IoOp::Read,
        0,
        MAX_NLB * 512,
        &[iov(&mut big[..MAX_NLB as usize * 512])]
    )
    .is_ok());
}

#[test]
fn flush_follows_the_write_cache() {
    assert_eq!(
        enc(&driver(9, false, false, false), IoOp::Flush, 0, 0, &[]),
        Ok(Encoded::Nop)
    );
    let Ok(Encoded::Cmd { cmd_op, cmd }) =
        enc(&driver(9, false, false, true), IoOp::Flush, 0, 0, &[])
    else {
        panic!("flush not encoded");
    };
    assert_eq!(cmd_op, NVME_URING_CMD_IO);
    assert_eq!(cmd.opcode, cmd::opcode::FLUSH);
    assert_eq!((cmd.addr, cmd.data_len), (0, 0));
}

#[test]
fn write_zeroes_and_discard() {
    let d = driver(9, true, true, true);
    let Ok(Encoded::Cmd { cmd, .. }) = enc(&d, IoOp::WriteZeroes { unmap: true }, 1024, 4096, &[])
    else {
        panic!()
    };
    assert_eq!(cmd.opcode, cmd::opcode::WRITE_ZEROES);
    assert_eq!((cmd.cdw10, cmd.cdw12), (2, 7 | cmd::CDW12_DEAC));
    let Ok(Encoded::Cmd { cmd, .. }) = enc(&d, IoOp::WriteZeroes { unmap: false }, 1024, 4096, &[])
    else {
        panic!()
    };
    assert_eq!(cmd.cdw12, 7);

    // Discard with scratch: Dataset Management, the range written into it.
    let mut scratch = [0xffu8; 16];
    let s = [iov(&mut scratch)];
    let Ok(Encoded::Cmd { cmd, .. }) = enc(&d, IoOp::Discard, 1 << 20, 1 << 20, &s) else {
        panic!()
    };
    assert_eq!(cmd.opcode, cmd::opcode::DATASET_MANAGEMENT);
    assert_eq!(cmd.addr, scratch.as_ptr() as u64);
    assert_eq!(cmd.data_len, 16);
    assert_eq!(scratch, cmd::dsm_range(2048, 2048));

    // Without scratch: Write Zeroes with deallocate.
    let Ok(Encoded::Cmd { cmd, .. }) = enc(&d, IoOp::Discard, 1 << 20, 1 << 20, &[]) else {
        panic!()
    };
    assert_eq!(cmd.opcode, cmd::opcode::WRITE_ZEROES);
    assert_eq!(cmd.cdw12, 2047 | cmd::CDW12_DEAC);

    // DSM only: scratch is required.
    let dsm_only = driver(9, true, false, true);
    assert!(enc(&dsm_only, IoOp::Discard, 0, 512, &[]).is_err());
    let mut small = [0u8; 8];
    assert!(enc(&dsm_only, IoOp::Discard, 0, 512, &[iov(&mut small)]).is_err());
}

#[test]
fn prepared_entries() {
    let d = driver(9, true, true, true);
    let mut buf = vec![0u8; 4096];
    let v = [iov(&mut buf)];
    // SAFETY: `v` and `buf` outlive the entries, which are never submitted.
    let e = unsafe { d.prepare(IoOp::Read, 0, 4096, v.as_ptr(), 1, 77) };
    let dbg = format!("{e:?}");
    assert!(dbg.contains("user_data: 77"), "{dbg}");
    // SAFETY: as above.
    let bad = unsafe { d.prepare(IoOp::Read, 1, 4096, v.as_ptr(), 1, 78) };
    assert!(format!("{bad:?}").contains("user_data: 78"));
    assert_eq!(d.refused.load(Ordering::Relaxed), 1);
}

#[test]
fn completions() {
    let d = driver(9, true, true, true);
    assert_eq!(d.decode(IoOp::Read, 4096, 0, [0; 2]), IoOutcome::Ok);
    // res > 0: the status field as is (DNR and CRD kept for the classification).
    assert_eq!(
        d.decode(IoOp::Read, 4096, 0x370, [0; 2]),
        IoOutcome::Nvme(0x370)
    );
    assert_eq!(
        d.decode(IoOp::Read, 4096, 0x4281, [0; 2]),
        IoOutcome::Nvme(0x4281)
    );
    assert_eq!(
        d.decode(IoOp::Read, 4096, 0x1002, [0; 2]),
        IoOutcome::Nvme(0x1002)
    );
    assert_eq!(
        d.decode(IoOp::Read, 4096, -libc::ENODEV, [0; 2]),
        IoOutcome::Errno(libc::ENODEV)
    );
    assert_eq!(
        d.decode(IoOp::Read, 4096, -libc::EINTR, [0; 2]),
        IoOutcome::Errno(libc::EINTR)
    );
    // Our own refusal (EBADF from the fd -1 entry) reads as EINVAL.
    assert_eq!(
        d.decode(IoOp::Read, 4096, -libc::EBADF, [0; 2]),
        IoOutcome::Errno(libc::EINVAL)
    );
    // Classified as the engine would: path errors fail over, the rest does not.
    use mpath::{classify, Disposition};
    let c = |o| classify(o, 0, 3, [0; 3]);
    assert_eq!(c(decode_res(0x370)), Disposition::Failover);
    assert_eq!(c(decode_res(-libc::ENODEV)), Disposition::Failover);
    assert_eq!(c(decode_res(0x4281)), Disposition::Fail);
    assert_eq!(c(decode_res(-libc::EBADF)), Disposition::Fail);
}

#[test]
fn a_submitted_refusal_completes_with_ebadf() {
    // The refusal entry really fails on a ring (no device needed).
    let Ok(mut ring) = crate::Ring::new(8) else {
        return; // io_uring unavailable in this sandbox
    };
    let d = driver(9, true, true, true);
    // SAFETY: no buffers: the entry is refused before reaching any.
    let e = unsafe { d.prepare(IoOp::Read, 1, 512, std::ptr::null(), 0, 5) };
    // SAFETY: the entry points to no memory.
    unsafe { ring.push(&e).unwrap() };
    ring.submit().unwrap();
    ring.wait().unwrap();
    let mut got = Vec::new();
    ring.reap(|ud, res, _| got.push((ud, res)));
    assert_eq!(got, vec![(5, -libc::EBADF)]);
    assert_eq!(
        d.decode(IoOp::Read, 512, got[0].1, [0; 2]),
        IoOutcome::Errno(libc::EINVAL)
    );
}

/// The SQE fields registration sets: (flags, fd, cmd_op, uring_cmd_flags, buf_index).
fn sqe_fields(e: squeue::Entry128) -> (u8, i32, u32, u32, u16) {
    // SAFETY: an Entry128 is a plain 64-byte SQE followed by the 64 bytes
    // of the command area, with no padding or pointers that matter here.
    let b: [u8; 128] = unsafe { std::mem::transmute(e) };
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    (
        b[1],
        u32_at(4) as i32,
        u32_at(8),
        u32_at(28),
        u16::from_le_bytes([b[40], b[41]]),
    )
}

#[test]
fn registered_file_and_fixed_buffer_in_the_entry() {
    let d = driver(9, true, true, true);
    let fd = d.file.as_raw_fd();
    assert_eq!(d.ring_file().map(|f| f.fd), Some(fd));
    assert!(d.fixed_buffers());
    let mut buf = vec![0u8; 8192];
    let (a, b) = buf.split_at_mut(4096);
    let one = [iov(a)];
    let two = [iov(a), iov(b)];
    let reg = Registered {
        file: Some(3),
        buf: Some(2),
    };
    // SAFETY: the iovecs and buffers outlive the entries, never submitted.
    let (flags, efd, op, ucf, bi) =
        sqe_fields(unsafe { d.prepare_registered(IoOp::Read, 0, 4096, one.as_ptr(), 1, 1, reg) });
    assert_eq!(flags & 1, 1, "IOSQE_FIXED_FILE");
    assert_eq!(efd, 3, "the file-table slot");
    assert_eq!(op, NVME_URING_CMD_IO);
    assert_eq!(ucf & 1, 1, "IORING_URING_CMD_FIXED");
    assert_eq!(bi, 2, "the buffer index");
    // SAFETY: as above.
    let (_, _, op, ucf, bi) = sqe_fields(unsafe {
        d.prepare_registered(IoOp::Write { fua: false }, 0, 8192, two.as_ptr(), 2, 2, reg)
    });
    assert_eq!(op, NVME_URING_CMD_IO_VEC);
    assert_eq!(
        (ucf & 1, bi),
        (0, 0),
        "no fixed buffer for the vectored command"
    );
    // SAFETY: as above.
    let (flags, efd, _, ucf, _) =
        sqe_fields(unsafe { d.prepare(IoOp::Read, 0, 4096, one.as_ptr(), 1, 3) });
    assert_eq!((flags & 1, efd, ucf & 1), (0, fd, 0), "plain fd and buffer");
    // SAFETY: no data: a flush points to no memory.
    let (_, _, _, ucf, _) =
        sqe_fields(unsafe { d.prepare_registered(IoOp::Flush, 0, 0, std::ptr::null(), 0, 4, reg) });
    assert_eq!(ucf & 1, 0, "a flush carries no buffer");
    let other = driver(9, true, true, true);
    assert_ne!(
        d.ring_file().unwrap().id,
        other.ring_file().unwrap().id,
        "each open has its own id"
    );
}
