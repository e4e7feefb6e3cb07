//! virtio-blk request headers and status codes (virtio 1.2 §5.2.6).

pub use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_T_FLUSH as T_FLUSH, VIRTIO_BLK_T_GET_ID as T_GET_ID, VIRTIO_BLK_T_IN as T_IN,
    VIRTIO_BLK_T_OUT as T_OUT,
};

pub const S_OK: u8 = virtio_bindings::virtio_blk::VIRTIO_BLK_S_OK as u8;
pub const S_IOERR: u8 = virtio_bindings::virtio_blk::VIRTIO_BLK_S_IOERR as u8;
pub const S_UNSUPP: u8 = virtio_bindings::virtio_blk::VIRTIO_BLK_S_UNSUPP as u8;

/// A byte no device writes as a status: shows a status byte left alone.
pub const UNWRITTEN: u8 = 0xa5;

pub const HEADER_LEN: u32 = 16;
pub const SECTOR: u64 = 512;

/// `struct virtio_blk_outhdr`: type, reserved, sector.
pub fn header(rtype: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&rtype.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    h
}

pub fn status_name(s: u8) -> String {
    match s {
        S_OK => "OK".into(),
        S_IOERR => "IOERR".into(),
        S_UNSUPP => "UNSUPP".into(),
        UNWRITTEN => "unwritten".into(),
        other => format!("{other:#04x}"),
    }
}
