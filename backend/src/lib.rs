//! vhost-mpath: a vhost-user-blk backend that serves one virtio-blk disk
//! over several paths, picking a path per request and failing over.

pub mod cli;
pub mod config;
pub mod device;
pub mod disk;
pub mod path_spec;
pub mod ratelimit;
pub mod request;
pub mod rpc;
pub mod serve;
pub mod shutdown;
pub mod virtio;
pub mod worker;
