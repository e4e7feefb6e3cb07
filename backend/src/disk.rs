//! The disk the guest sees: the opened paths, checked to agree on geometry,
//! and the multipath engine over them.

use std::sync::Arc;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use mpath::{Engine, EngineOptions, PathConfig, PathId};
use mpath_io::{open_path, DeviceInfo, PathDriver, PathOptions, Shaping};

use crate::config::Settings;

#[derive(Debug)]
pub struct Disk {
    pub drivers: Vec<Arc<dyn PathDriver>>,
    /// Each path's device as the operator named it.
    pub devices: Vec<String>,
    /// Lab shaping and faults of each path (inactive unless configured).
    pub shaping: Vec<Arc<Shaping>>,
    /// A probe of the path is on some worker's ring (one at a time).
    pub probing: Vec<AtomicBool>,
    pub engine: Engine,
    pub capacity_bytes: u64,
    pub block_size: u32,
    pub discard: bool,
    pub write_zeroes: bool,
    pub read_only: bool,
    pub serial: [u8; 20],
    /// Requests completed to the guest with an error status.
    pub guest_errors: AtomicU64,
    /// Malformed requests refused before any I/O.
    pub bad_requests: AtomicU64,
}

impl Disk {
    pub fn open(s: &Settings) -> Result<Self, String> {
        let specs = &s.paths;
        let mut drivers: Vec<Arc<dyn PathDriver>> = Vec::with_capacity(specs.len());
        let mut configs = Vec::with_capacity(specs.len());
        let mut shaping = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let opts = PathOptions {
                read_only: s.read_only,
                block_size: spec.block_size,
                read_zeroes: spec.read_zeroes,
                direct: spec.direct,
                ..PathOptions::default()
            };
            let d = open_path(&spec.device, &opts).map_err(|e| e.to_string())?;
            let name = spec.name.clone().unwrap_or_else(|| format!("path{i}"));
            if let Some(first) = drivers.first() {
                check_same_namespace(first.as_ref(), &configs[0], d.as_ref(), &name, &spec.device)?;
                check_same_geometry(first.info(), &configs[0], d.info(), &name, &spec.device)?;
            }
            configs.push(PathConfig {
                name,
                weight: spec.weight.unwrap_or(1),
                preferred: spec.preferred,
            });
            shaping.push(Arc::new(Shaping::new(&spec.shape()?)));
            drivers.push(d);
        }
        let mut opts = EngineOptions::new(s.policy.clone());
        opts.no_path_timeout = s.no_path_timeout;
        opts.max_retries = s.max_retries;
        opts.recovery.recovery_probes = s.recovery_probes;
        let engine = Engine::with_options(&configs, opts).map_err(|e| e.to_string())?;
        for (i, spec) in specs.iter().enumerate() {
            if let Some(ms) = spec.write_failover_delay_ms {
                engine
                    .path(PathId(i))
                    .set_write_failover_delay(Duration::from_millis(ms));
            }
        }
        let info = drivers[0].info().clone();
        let serial = serial_bytes(s.serial.as_deref(), &drivers);
        let read_only = s.read_only;
        Ok(Self {
            capacity_bytes: info.capacity_bytes,
            block_size: info.block_size,
            // Discard that needs caller scratch (NVMe DSM-only controllers) is not offered.
            discard: !read_only
                && drivers
                    .iter()
                    .all(|d| d.info().discard && d.info().discard_scratch == 0),
            write_zeroes: !read_only && drivers.iter().all(|d| d.info().write_zeroes),
            read_only,
            probing: drivers.iter().map(|_| AtomicBool::new(false)).collect(),
            devices: specs.iter().map(|p| p.device.clone()).collect(),
            guest_errors: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            drivers,
            shaping,
            engine,
            serial,
        })
    }

    /// The shaping of the path named `name` (the lab API).
    pub fn shaping_of(&self, name: &str) -> Option<&Arc<Shaping>> {
        self.engine.path_id(name).map(|id| &self.shaping[id.0])
    }
}

fn check_same_geometry(
    first: &DeviceInfo,
    first_cfg: &PathConfig,
    other: &DeviceInfo,
    name: &str,
    device: &str,
) -> Result<(), String> {
    if other.capacity_bytes != first.capacity_bytes || other.block_size != first.block_size {
        return Err(format!(
            "path {name} ({device}): {} bytes in blocks of {} differs from path {} ({} bytes in blocks of {}); \
             every path must present the same disk",
            other.capacity_bytes,
            other.block_size,
            first_cfg.name,
            first.capacity_bytes,
            first.block_size
        ));
    }
    Ok(())
}

/// NVMe paths must reach the same namespace (subsystem NQN, namespace id,
/// NGUID / EUI-64 / UUID): mixing namespaces would corrupt the guest's data.
fn check_same_namespace(
    first: &dyn PathDriver,
    first_cfg: &PathConfig,
    other: &dyn PathDriver,
    name: &str,
    device: &str,
) -> Result<(), String> {
    let nvme = first.kind() == "nvme" || other.kind() == "nvme";
    if nvme && other.info().identity != first.info().identity {
        return Err(format!(
            "path {name} ({device}) reaches namespace {} but path {} reaches namespace {}; \
             every path must reach the same namespace",
            other.info().identity,
            first_cfg.name,
            first.info().identity
        ));
    }
    Ok(())
}

/// The serial: the operator's, else a stable hash of the paths' identities.
fn serial_bytes(serial: Option<&str>, drivers: &[Arc<dyn PathDriver>]) -> [u8; 20] {
    let s = match serial {
        Some(s) => s.to_string(),
        None => {
            // FNV-1a over the sorted identities: stable across restarts and path order.
            let mut ids: Vec<&str> = drivers.iter().map(|d| d.info().identity.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in ids.join("\n").bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            format!("vmp-{h:016x}")
        }
    };
    let mut out = [0u8; 20];
    let n = s.len().min(20);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}
