//! The vhost-user request handler is the daemon's own, over the `vhost`
//! crate's protocol types: vhost-user-backend's handler answers the
//! inflight messages (GET/SET_INFLIGHT_FD) "not supported" with no way to
//! override them, and owning it gives the data path direct control of ring
//! memory. One file per concern: the messages (`handler`), the memory table
//! (`memory`), the per-queue threads (`queue_thread`), the inflight region
//! (`inflight`), SIGBUS containment of the frontend's memory (`sigbus`).

pub mod backend_channel;
mod handler;
mod inflight;
mod memory;
mod queue_thread;
pub mod sigbus;

pub use handler::Handler;
pub use inflight::{InflightQueue, InflightRegion};
pub use memory::sweep_left;
