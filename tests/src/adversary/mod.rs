//! An adversarial vhost-user-blk frontend: a driver of our own, on the
//! `vhost` crate's frontend side, that lays out a split virtqueue by hand
//! in memfd-backed guest memory and publishes whatever a hostile or buggy
//! guest could: bad ring indexes, heads out of range, descriptor loops,
//! broken indirect tables, malformed requests.
//!
//! - [`frontend`]: connect, negotiate (EVENT_IDX, indirect descriptors),
//!   share memory, run and restart queues; `driver`: lay out chains,
//!   publish them, wait for used entries, flood.
//! - [`split_ring`]: the ring layout in guest memory.
//! - [`scene`]: one case from start to verdict; [`expect`]: what a case accepts.
//! - [`health`]: the daemon's CPU, log and next frontend after the attack.
//! - [`fuzz`]: random vhost-user messages, framed by hand.

pub mod blk;
mod driver;
pub mod expect;
pub mod frontend;
pub mod fuzz;
pub mod guest_memory;
pub mod health;
mod judge;
pub mod scene;
pub mod split_ring;

pub use expect::Expect;
pub use frontend::{Adversary, AdversaryOptions, Outcome};
pub use scene::Scene;
pub use split_ring::Desc;
