//! vhost-mpath: a vhost-user-blk backend that serves one virtio-blk disk
//! over several paths, picking a path per request and failing over.

pub mod ana;
pub mod checker;
pub mod cli;
pub mod client;
pub mod client_qos;
pub mod config;
pub mod device;
pub mod diag;
pub mod dirty_log;
pub mod disk;
pub mod fd_range;
pub mod http;
pub mod manpage;
pub mod metrics;
pub mod path_spec;
pub mod qos;
pub mod queue_status;
pub mod ratelimit;
pub mod request;
pub mod resize;
pub mod rpc;
pub mod save;
pub mod serve;
pub mod shutdown;
pub mod size_watch;
pub mod socket;
pub mod split;
pub mod systemd;
pub mod teardown;
pub mod top;
pub mod vhost_user;
pub mod virtio;
pub mod vring;
pub mod worker;
