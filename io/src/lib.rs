//! Path drivers over io_uring.
//!
//! Every worker owns one [`IoQueue`]: its [`Ring`] (SQE128/CQE32, so NVMe
//! passthrough commands fit the same ring as file I/O), the commands in
//! flight, timers and lab shaping, behind a safe API (guest buffers enter as
//! [`GuestBufs`]). A [`PathDriver`] turns one I/O on one path into a
//! submission entry and decodes its completion into an
//! [`mpath::IoOutcome`]. Drivers: [`FileDriver`] (regular files and block
//! devices, readv/writev/fsync/fallocate), [`nvme::NvmeDriver`] and
//! [`NullDriver`] (completes inline without touching storage).

mod bounce;
mod cpu;
mod dio;
mod driver;
mod file;
#[cfg(test)]
mod file_tests;
mod guest_bufs;
mod lab_model;
mod null;
pub mod nvme;
pub mod os;
mod probe;
mod queue;
mod ring;
mod shape;
mod size;

pub use bounce::Bounce;
pub use cpu::current_cpu;
pub use dio::check_shared_cache;
pub use driver::{
    next_ring_file_id, open_path, DeviceInfo, IoOp, OpenError, PathDriver, PathOptions, Registered,
    RingFile,
};
pub use file::FileDriver;
pub use guest_bufs::{GuestBufs, IovecPool};
pub use lab_model::{ModelConfig, ServiceDist, DEFAULT_BURST_MS};
pub use null::NullDriver;
pub use probe::{ProbeEvent, Prober};
pub use queue::{
    Command, Event, HostRegion, IoQueue, PathTable, Refused, RegOptions, RegStats, TICK,
};
pub use ring::{Ring, MAX_CQ_ENTRIES, MAX_SQ_ENTRIES};
pub use shape::{
    fail_rate_fraction, parse_fail_rate, Admission, Fault, LbaFault, ShapeConfig, Shaping,
};
pub use size::parse_size;
