//! A seeded random-message fuzzer over the daemon's vhost-user handler
//! (issue 44): every message of the protocol, framed correctly, in random
//! order and with random values, fds attached where the message takes them
//! (memfds of random and sometimes too short sizes, eventfds, pipes, none),
//! sizes sometimes wrong. Most sessions start with a valid prefix (feature
//! negotiation, a memory table, running rings) so that the mutations reach
//! deep, and some kick rings filled with random descriptors so the workers
//! read and write in random guest memory.
//!
//! - [`rng`]: the deterministic PRNG (seed from `VHOST_MPATH_FUZZ_SEED`).
//! - [`wire`]: framing, fds, answers with deadlines.
//! - [`session`]: one connection: the prefix, the mutations, which
//!   messages the daemon must answer.
//! - `messages`: one random payload builder per message.
//! - `rings`: random ring contents and kicks.
//! - [`vitals`]: the daemon's fds, RSS and log between sessions.

mod messages;
mod rings;
pub mod rng;
pub mod session;
pub mod vitals;
pub mod wire;

pub use rng::Rng;
pub use session::{DaemonInfo, Session, SessionEnd};
