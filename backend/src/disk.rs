//! The disk the guest sees: its paths, checked to agree on geometry, and
//! the multipath engine over them. Paths can be added and removed while the
//! guest runs (the control plane's `add_path` / `remove_path`).
//!
//! Per-path state lives in fixed slots indexed like the engine's paths
//! ([`mpath::MAX_PATHS`] of them, allocated up front). A slot is filled
//! before the engine publishes the path, so a worker that was handed a
//! [`PathId`] always finds it. Like the engine's, slots are never reused: a
//! removed path keeps its slot (name, device, statistics) until the daemon
//! exits; only its driver is dropped, which closes the device.
//!
//! On the I/O path a worker reads a slot through a `OnceLock` (one Acquire
//! load) and the driver through an `ArcSwapOption` (lock-free, no
//! allocation: a few nanoseconds), so that removing a path can close its
//! device without a lock anywhere on the I/O path.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use log::info;
use mpath::{Engine, EngineOptions, Nanos, Path, PathConfig, PathId, PathState, MAX_PATHS};
use mpath_io::{open_path, DeviceInfo, PathDriver, PathOptions, ShapeConfig, Shaping};
use vmm_sys_util::eventfd::EventFd;

use crate::config::Settings;
use crate::path_spec::PathSpec;
use crate::split::{SplitLimits, PAGE};

/// One path's backend state: how it was given, its driver and lab shaping.
#[derive(Debug)]
pub struct PathSlot {
    /// The path as the operator gave it, with its name filled in (weight
    /// and preference live in the engine: they change at runtime).
    pub spec: PathSpec,
    /// `nvme`, `file` or `null`.
    pub kind: &'static str,
    /// What the device reported when it was opened.
    pub info: DeviceInfo,
    /// Lab shaping and faults (inactive unless configured).
    pub shaping: Shaping,
    /// A probe of the path is on the checker's ring (one at a time).
    probing: AtomicBool,
    /// `None` once the path is removed and drained: the device is closed.
    driver: ArcSwapOption<Arc<dyn PathDriver>>,
    /// The node the driver has open now: a controller that went away and
    /// came back under another name is re-opened there (see `reopen`).
    pub device_now: Mutex<String>,
    /// The device's size when last read (`crate::resize`): a path that
    /// disagrees with the others is shown in `get_paths`.
    pub size_now: AtomicU64,
}

/// A path's driver, borrowed for one submission or completion.
pub struct DriverRef(arc_swap::Guard<Option<Arc<Arc<dyn PathDriver>>>>);

impl Deref for DriverRef {
    type Target = dyn PathDriver;
    fn deref(&self) -> &Self::Target {
        // `Disk::driver` hands out only guards that hold a driver.
        &***self.0.as_ref().expect("a DriverRef holds a driver")
    }
}

/// What a new path must agree with: the first path the disk was opened with.
#[derive(Debug)]
struct Reference {
    name: String,
    kind: &'static str,
    info: DeviceInfo,
}

#[derive(Debug)]
pub struct Disk {
    slots: Box<[OnceLock<PathSlot>]>,
    pub engine: Engine,
    /// The guest's capacity in bytes: the paths' size at start-up, changed
    /// by `resize` (see `crate::resize`).
    capacity: AtomicU64,
    pub block_size: u32,
    pub discard: bool,
    pub write_zeroes: bool,
    pub read_only: bool,
    pub serial: [u8; 20],
    /// Requests completed to the guest with an error status.
    pub guest_errors: AtomicU64,
    /// Malformed requests refused before any I/O.
    pub bad_requests: AtomicU64,
    /// The QoS limits and what they held (all queues, all paths).
    pub qos: crate::qos::DiskQos,
    reference: Reference,
    /// Serialises path changes and `save_config` (control plane only).
    control: Mutex<()>,
    /// Request splitting limits (see [`Disk::split_limits`]); 0: none.
    max_transfer: AtomicU64,
    max_pages: AtomicU64,
    /// Largest discard / write-zeroes command of every path (0: no limit).
    pub max_discard_bytes: u64,
    pub max_write_zeroes_bytes: u64,
    /// Bumped whenever a path's driver is replaced or dropped: each I/O
    /// queue keeps the drivers it took while this stays the same (see
    /// `mpath_io::PathTable::generation`).
    drivers_generation: AtomicU64,
    /// The I/O queues to wake when it changes, so that they let go of the
    /// old driver (and its device closes) without waiting for their next I/O.
    driver_wakers: Mutex<Vec<Weak<EventFd>>>,
}

/// How long closing a removed path waits for the I/O queues to let go of
/// its driver (they are woken at once; a few milliseconds at most).
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How a `remove_path` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removal {
    pub id: PathId,
    /// In-flight I/O finished within the bound and the device is closed;
    /// otherwise it closes in the background once the I/O finishes.
    pub drained: bool,
    pub in_flight_requests: u64,
}

fn open_driver(spec: &PathSpec, read_only: bool) -> Result<Arc<dyn PathDriver>, String> {
    let opts = PathOptions {
        read_only,
        block_size: spec.block_size,
        read_zeroes: spec.read_zeroes,
        direct: spec.direct,
        inline: spec.inline,
        io_timeout_ms: spec.io_timeout_ms,
    };
    open_path(&spec.device, &opts).map_err(|e| e.to_string())
}

/// Discard that needs caller scratch (NVMe DSM-only controllers) is not offered.
fn offers_discard(info: &DeviceInfo) -> bool {
    info.discard && info.discard_scratch == 0
}

/// Per-path engine settings from the spec and what the device reported:
/// the controller's retry delays, ANA state, and for the ghost-write guard
/// its Command Quiesce Time unless the operator set a delay.
fn configure_path(path: &Path, spec: &PathSpec, info: &DeviceInfo) {
    path.set_crdt(info.crdt);
    path.set_ana_state(info.ana_state);
    let delay = spec
        .write_failover_delay_ms
        .unwrap_or(u64::from(info.command_quiesce_time_ms));
    if delay > 0 {
        path.set_write_failover_delay(Duration::from_millis(delay));
    }
}

/// The path's own marginal settings, when its spec has any.
fn configure_marginal(engine: &Engine, id: PathId, spec: &PathSpec) {
    if let Some(m) = spec.marginal(&engine.marginal_defaults()) {
        engine.set_path_marginal(id, Some(m));
    }
}

/// A path's transfer and page limits: the device's, tightened by the spec.
fn path_limits(spec: &PathSpec, info: &DeviceInfo) -> (u64, u64) {
    (
        tighter(u64::from(info.max_transfer), spec.max_transfer.unwrap_or(0)),
        tighter(u64::from(info.max_segments), spec.max_segments.unwrap_or(0)),
    )
}

/// The tighter of two limits where 0 means none.
fn tighter(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// Refuses limits under which some request could not be cut to fit: a part
/// carries at least one whole block and a block may straddle pages, so a
/// path must take at least two pages (and a block) per command and touch
/// at least two pages (one more than a block spans). `keys` names the
/// transfer and segment options as the operator wrote them.
fn check_limits(spec: &PathSpec, info: &DeviceInfo, keys: [&str; 2]) -> Result<(), String> {
    let bs = u64::from(info.block_size.max(512));
    let (transfer, pages) = path_limits(spec, info);
    let name = spec.name.as_deref().unwrap_or_default();
    let what = |key: &str, given: Option<u64>, v: u64, unit: &str| match given {
        Some(g) if g == v => format!("{key} {v}"),
        _ => format!("the device's limit of {v} {unit}"),
    };
    let min_transfer = bs.max(2 * PAGE);
    if transfer != 0 && transfer < min_transfer {
        return Err(format!(
            "path {name} ({}): {} is under {min_transfer} bytes (two pages and at least one \
             block of {bs}): requests could not be cut to fit",
            spec.device,
            what(keys[0], spec.max_transfer, transfer, "bytes")
        ));
    }
    let min_pages = (bs / PAGE + 1).max(2);
    if pages != 0 && pages < min_pages {
        return Err(format!(
            "path {name} ({}): {} is under {min_pages} (a block of {bs} may straddle {min_pages} \
             pages): requests could not be cut to fit",
            spec.device,
            what(keys[1], spec.max_segments, pages, "pages")
        ));
    }
    Ok(())
}

/// What the operator calls a driver kind.
fn kind_text(kind: &str) -> &'static str {
    match kind {
        "nvme" => "an NVMe",
        "null" => "a null",
        _ => "a file or block-device",
    }
}

/// Every path of a disk is of one kind: files and block devices, NVMe
/// namespaces, or null paths. A null path beside real storage would
/// acknowledge writes and drop them; NVMe beside a file cannot be checked
/// to reach the same data.
fn check_same_kind(
    first_kind: &str,
    first_name: &str,
    kind: &str,
    name: &str,
    device: &str,
) -> Result<(), String> {
    if kind == first_kind {
        return Ok(());
    }
    Err(format!(
        "path {name} ({device}) is {} path but path {first_name} is {} path; every path of \
         a disk must be of one kind (files and block devices, NVMe namespaces, or null)",
        kind_text(kind),
        kind_text(first_kind)
    ))
}

impl PathSlot {
    fn new(spec: PathSpec, driver: Arc<dyn PathDriver>, shape: &ShapeConfig) -> Self {
        Self {
            kind: driver.kind(),
            info: driver.info().clone(),
            device_now: Mutex::new(spec.device.clone()),
            size_now: AtomicU64::new(driver.info().capacity_bytes),
            spec,
            shaping: Shaping::new(shape),
            probing: AtomicBool::new(false),
            driver: ArcSwapOption::from_pointee(driver),
        }
    }

    /// Whether the device is still open.
    pub fn is_open(&self) -> bool {
        self.driver.load().is_some()
    }
}

impl Disk {
    pub fn open(s: &Settings) -> Result<Self, String> {
        let mut opened: Vec<(PathSpec, Arc<dyn PathDriver>, ShapeConfig)> =
            Vec::with_capacity(s.paths.len());
        for (i, spec) in s.paths.iter().enumerate() {
            let mut spec = spec.clone();
            let name = spec.name.clone().unwrap_or_else(|| format!("path{i}"));
            spec.name = Some(name.clone());
            let shape = spec.shape()?;
            let d = open_driver(&spec, s.read_only)?;
            check_limits(&spec, d.info(), ["max-transfer", "max-segments"])?;
            if let Some((first, fd, _)) = opened.first() {
                let first_name = first.name.as_deref().unwrap_or_default();
                check_same_kind(fd.kind(), first_name, d.kind(), &name, &spec.device)?;
                check_same_namespace(
                    fd.kind(),
                    fd.info(),
                    first_name,
                    d.as_ref(),
                    &name,
                    &spec.device,
                )?;
                check_same_geometry(fd.info(), first_name, d.info(), &name, &spec.device)?;
            }
            opened.push((spec, d, shape));
        }
        let infos: Vec<(&str, &DeviceInfo)> = opened
            .iter()
            .map(|(spec, d, _)| (spec.name.as_deref().unwrap_or_default(), d.info()))
            .collect();
        mpath_io::check_shared_cache(&infos)?;
        let configs: Vec<PathConfig> = opened
            .iter()
            .map(|(spec, _, _)| PathConfig {
                name: spec.name.clone().unwrap_or_default(),
                weight: spec.weight.unwrap_or(1),
                preferred: spec.preferred,
            })
            .collect();
        let mut opts = EngineOptions::new(s.policy.clone());
        opts.no_path_timeout = s.no_path_timeout;
        opts.max_retries = s.max_retries;
        opts.recovery.recovery_probes = s.recovery_probes;
        opts.marginal = s.marginal;
        let engine = Engine::with_options(&configs, opts).map_err(|e| e.to_string())?;
        let (first_spec, first_driver, _) = opened.first().ok_or("no paths")?;
        let reference = Reference {
            name: first_spec.name.clone().unwrap_or_default(),
            kind: first_driver.kind(),
            info: first_driver.info().clone(),
        };
        let drivers: Vec<&Arc<dyn PathDriver>> = opened.iter().map(|(_, d, _)| d).collect();
        let serial = serial_bytes(s.serial.as_deref(), &drivers);
        let read_only = s.read_only;
        let discard = !read_only && drivers.iter().all(|d| offers_discard(d.info()));
        let write_zeroes = !read_only && drivers.iter().all(|d| d.info().write_zeroes);
        let slots: Box<[OnceLock<PathSlot>]> = (0..MAX_PATHS).map(|_| OnceLock::new()).collect();
        let mut split = (0u64, 0u64);
        let mut discard_max = (0u64, 0u64);
        for (spec, d, _) in &opened {
            let info = d.info();
            let (t, p) = path_limits(spec, info);
            split = (tighter(split.0, t), tighter(split.1, p));
            discard_max = (
                tighter(discard_max.0, info.max_discard_bytes),
                tighter(discard_max.1, info.max_write_zeroes_bytes),
            );
        }
        for (i, (spec, driver, shape)) in opened.into_iter().enumerate() {
            configure_path(engine.path(PathId(i)), &spec, driver.info());
            configure_marginal(&engine, PathId(i), &spec);
            let _ = slots[i].set(PathSlot::new(spec, driver, &shape));
        }
        Ok(Self {
            capacity: AtomicU64::new(reference.info.capacity_bytes),
            block_size: reference.info.block_size,
            discard,
            write_zeroes,
            read_only,
            guest_errors: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            qos: crate::qos::DiskQos::new(s.qos),
            slots,
            engine,
            serial,
            reference,
            control: Mutex::new(()),
            max_transfer: AtomicU64::new(split.0),
            max_pages: AtomicU64::new(split.1),
            max_discard_bytes: discard_max.0,
            max_write_zeroes_bytes: discard_max.1,
            drivers_generation: AtomicU64::new(0),
            driver_wakers: Mutex::new(Vec::new()),
        })
    }

    /// The guest's capacity in bytes now.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// Sets the capacity (`crate::resize` only, under the control lock).
    pub(crate) fn set_capacity(&self, bytes: u64) {
        self.capacity.store(bytes, Ordering::Release);
    }

    /// Where requests must be cut: the tightest limits of all paths that
    /// were ever part of the disk (a part may go down any path).
    pub fn split_limits(&self) -> SplitLimits {
        SplitLimits {
            max_transfer: self.max_transfer.load(Ordering::Relaxed),
            max_pages: self.max_pages.load(Ordering::Relaxed),
            block_size: u64::from(self.block_size),
        }
    }

    /// The backend state of path `id` (any id the engine handed out).
    pub fn slot(&self, id: PathId) -> &PathSlot {
        self.slots[id.0]
            .get()
            .expect("a path's slot is filled before the engine publishes it")
    }

    pub fn shaping(&self, id: PathId) -> &Shaping {
        &self.slot(id).shaping
    }

    /// The path's driver; `None` once the path was removed and drained
    /// (no I/O is sent to it then; a caller treats it as a path error).
    pub fn driver(&self, id: PathId) -> Option<DriverRef> {
        let g = self.slot(id).driver.load();
        g.is_some().then(|| DriverRef(g))
    }

    /// The path's driver, held (the path checker keeps it for a probe's
    /// life: its device stays open until the probe is reaped).
    pub fn driver_arc(&self, id: PathId) -> Option<Arc<dyn PathDriver>> {
        self.slot(id).driver.load_full().map(|d| Arc::clone(&*d))
    }

    /// The generation of the paths' drivers (see `drivers_generation`).
    pub fn drivers_generation(&self) -> u64 {
        self.drivers_generation.load(Ordering::Acquire)
    }

    /// Has `waker` written whenever a driver changes (an I/O queue's
    /// eventfd); kept only while its owner holds it.
    pub fn wake_on_driver_change(&self, waker: &Arc<EventFd>) {
        let mut wakers = self.driver_wakers.lock().unwrap_or_else(|e| e.into_inner());
        wakers.retain(|w| w.strong_count() > 0);
        wakers.push(Arc::downgrade(waker));
    }

    /// A driver was replaced or dropped: new generation, queues woken.
    fn drivers_changed(&self) {
        self.drivers_generation.fetch_add(1, Ordering::AcqRel);
        let wakers = self.driver_wakers.lock().unwrap_or_else(|e| e.into_inner());
        for w in wakers.iter().filter_map(Weak::upgrade) {
            let _ = w.write(1);
        }
    }

    /// The path's `io-timeout-ms`, when it has one: a command older than
    /// this means the path is failing.
    pub fn io_timeout(&self, id: PathId) -> Option<Nanos> {
        let ms = self.slot(id).spec.io_timeout_ms.filter(|&ms| ms > 0)?;
        Some(u64::from(ms) * 1_000_000)
    }

    /// Claims the probe of failed path `id`; `false` when a probe of it is
    /// still out or it is no longer failed.
    pub fn begin_probe(&self, id: PathId) -> bool {
        let probing = &self.slot(id).probing;
        if probing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The remove handshake: `remove_path` stores the state, then reads
        // the flag; a probe sees the state after raising the flag.
        if self.engine.path(id).state() != PathState::Failed {
            probing.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The probe of `id` is off the ring.
    pub fn end_probe(&self, id: PathId) {
        self.slot(id).probing.store(false, Ordering::SeqCst);
    }

    /// The shaping of the path named `name` (the lab API).
    pub fn shaping_of(&self, name: &str) -> Option<&Shaping> {
        self.engine.path_id(name).map(|id| self.shaping(id))
    }

    /// Holds off other path changes while the caller works.
    pub fn control_lock(&self) -> MutexGuard<'_, ()> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no I/O is accounted on `id` (after it left `usable`),
    /// up to `bound`. `true`: drained.
    pub fn drain(&self, id: PathId, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if self.engine.drained(id) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Opens `spec` and adds it as a new path, after the checks the paths
    /// given at start-up pass (same namespace, capacity, block size, and the
    /// features the guest was offered). Errors name what is wrong.
    pub fn add_path(&self, mut spec: PathSpec) -> Result<PathId, String> {
        let _control = self.control_lock();
        spec.validate()?;
        let shape = spec.shape()?;
        let name = match spec.name.clone() {
            Some(n) if n.is_empty() => return Err("name: must not be empty".into()),
            Some(n) => n,
            None => self.free_default_name(),
        };
        if self
            .engine
            .path_id(&name)
            .is_some_and(|id| self.engine.path(id).state() != PathState::Removed)
        {
            return Err(format!("name: a path named {name:?} exists"));
        }
        if self.engine.paths().len() >= MAX_PATHS {
            return Err(format!(
                "no free path slot: all {MAX_PATHS} are used (a removed path keeps its slot until the daemon restarts)"
            ));
        }
        spec.name = Some(name.clone());
        let driver = open_driver(&spec, self.read_only)?;
        self.check_compatible(driver.as_ref(), &name, &spec.device)?;
        check_limits(&spec, driver.info(), ["max_transfer", "max_segments"])?;
        let info = driver.info();
        if self.max_discard_bytes > 0
            && info.max_discard_bytes > 0
            && info.max_discard_bytes < self.max_discard_bytes
            || self.max_write_zeroes_bytes > 0
                && info.max_write_zeroes_bytes > 0
                && info.max_write_zeroes_bytes < self.max_write_zeroes_bytes
        {
            return Err(format!(
                "path {name} ({}) takes smaller discard or write-zeroes commands than the guest was offered",
                spec.device
            ));
        }
        // Requests are cut at the tightest limits from now on.
        let (t, p) = path_limits(&spec, info);
        self.max_transfer
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(tighter(v, t))
            })
            .ok();
        self.max_pages
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(tighter(v, p))
            })
            .ok();
        let config = PathConfig {
            name: name.clone(),
            weight: spec.weight.unwrap_or(1),
            preferred: spec.preferred,
        };
        let device = spec.device.clone();
        let id = self
            .engine
            .add_path(&config, |id, path| {
                configure_path(path, &spec, driver.info());
                let _ = self.slots[id.0].set(PathSlot::new(spec, driver, &shape));
            })
            .map_err(|e| e.to_string())?;
        configure_marginal(&self.engine, id, &self.slot(id).spec);
        info!("path {name} ({device}) added");
        Ok(id)
    }

    fn free_default_name(&self) -> String {
        (self.engine.paths().len()..)
            .map(|i| format!("path{i}"))
            .find(|n| self.engine.path_id(n).is_none())
            .unwrap_or_default()
    }

    /// Re-opens failed path `id` on `device`, a node of the same namespace
    /// through the same controller (it came back under a new name). The old
    /// driver's in-flight I/O keeps it open until it completes.
    pub fn reopen(&self, id: PathId, device: &str) -> Result<(), String> {
        let _control = self.control_lock();
        let slot = self.slot(id);
        let mut spec = slot.spec.clone();
        spec.device = device.to_string();
        let driver = open_driver(&spec, self.read_only)?;
        let name = spec.name.clone().unwrap_or_default();
        self.check_compatible(driver.as_ref(), &name, device)?;
        if slot.driver.load().is_none() {
            return Err("the path was removed".into());
        }
        slot.driver.store(Some(Arc::new(driver)));
        self.drivers_changed();
        *slot.device_now.lock().unwrap_or_else(|e| e.into_inner()) = device.to_string();
        Ok(())
    }

    fn check_compatible(&self, d: &dyn PathDriver, name: &str, device: &str) -> Result<(), String> {
        let r = &self.reference;
        check_same_kind(r.kind, &r.name, d.kind(), name, device)?;
        check_same_namespace(r.kind, &r.info, &r.name, d, name, device)?;
        // Against the capacity now: a resized disk takes paths of its new size.
        let mut now = r.info.clone();
        now.capacity_bytes = self.capacity_bytes();
        check_same_geometry(&now, &r.name, d.info(), name, device)?;
        let mut infos: Vec<(&str, &DeviceInfo)> = self
            .slots
            .iter()
            .filter_map(|s| s.get())
            .filter(|s| s.driver.load().is_some())
            .map(|s| (s.spec.name.as_deref().unwrap_or_default(), &s.info))
            .collect();
        infos.push((name, d.info()));
        mpath_io::check_shared_cache(&infos)?;
        if self.discard && !offers_discard(d.info()) {
            return Err(format!(
                "path {name} ({device}) does not support discard, which the guest was offered"
            ));
        }
        if self.write_zeroes && !d.info().write_zeroes {
            return Err(format!(
                "path {name} ({device}) does not support write-zeroes, which the guest was offered"
            ));
        }
        Ok(())
    }

    /// Takes path `id` offline (operator): no new I/O from now on (the
    /// caller drains it). Without `force` the last usable path stays, as
    /// `remove_path` keeps it.
    pub fn set_offline(&self, id: PathId, force: bool) -> Result<(), String> {
        let _control = self.control_lock();
        let path = self.engine.path(id);
        let name = path.name.as_str();
        match path.state() {
            PathState::Removed => return Err(format!("name: path {name} was removed")),
            PathState::Usable if !force && self.engine.usable_paths_except(Some(id)) == 0 => {
                return Err(format!(
                    "name: {name} is the last usable path; give \"force\": true to take it offline anyway"
                ))
            }
            _ => {}
        }
        self.engine.set_path_state(id, PathState::Offline);
        Ok(())
    }

    /// Takes path `id` out for good: no new I/O at once, in-flight I/O
    /// finishes (waited for up to `bound`), then the device is closed.
    /// Without `force` the last usable path (or the last path) stays.
    pub fn remove_path(
        self: &Arc<Self>,
        id: PathId,
        force: bool,
        bound: Duration,
    ) -> Result<Removal, String> {
        let _control = self.control_lock();
        let path = self.engine.path(id);
        let name = path.name.as_str();
        let state = path.state();
        if state == PathState::Removed {
            return Err(format!("name: path {name} is already removed"));
        }
        if !force {
            let others_live = self
                .engine
                .paths()
                .iter()
                .enumerate()
                .any(|(i, p)| i != id.0 && p.state() != PathState::Removed);
            if !others_live {
                return Err(format!(
                    "name: {name} is the last path; give \"force\": true to remove it anyway"
                ));
            }
            if state == PathState::Usable && self.engine.usable_paths_except(Some(id)) == 0 {
                return Err(format!(
                    "name: {name} is the last usable path; give \"force\": true to remove it anyway"
                ));
            }
        }
        self.engine.set_path_state(id, PathState::Removed);
        let drained = self.wait_closable(id, bound);
        if drained {
            self.close(id);
        } else {
            self.close_later(id);
        }
        Ok(Removal {
            id,
            drained,
            in_flight_requests: path.in_flight_requests(),
        })
    }

    /// Drained, and no probe on a ring.
    fn closable(&self, id: PathId) -> bool {
        self.engine.drained(id) && !self.slot(id).probing.load(Ordering::SeqCst)
    }

    fn wait_closable(&self, id: PathId, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if self.closable(id) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn close(&self, id: PathId) {
        let old = self.slot(id).driver.swap(None);
        self.drivers_changed();
        if let Some(old) = old {
            // The I/O queues were woken to let go of their copies; the
            // device closes with the last one (a queue that does not run
            // any more lets go when its connection ends).
            let deadline = Instant::now() + CLOSE_WAIT;
            while Arc::strong_count(&*old) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        info!("path {} removed and closed", self.engine.path(id).name);
    }

    /// Closes a removed path whose I/O did not finish within the bound
    /// (a hung path) once it does, from a thread of its own.
    fn close_later(self: &Arc<Self>, id: PathId) {
        let name = self.engine.path(id).name.to_string();
        log::warn!("path {name} removed; closing it once its in-flight I/O finishes");
        let disk = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("path-close".into())
            .spawn(move || {
                while !disk.closable(id) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                disk.close(id);
            });
        if let Err(e) = spawned {
            log::warn!("path {name}: cannot start the closing thread ({e}); it stays open");
        }
    }
}

fn check_same_geometry(
    first: &DeviceInfo,
    first_name: &str,
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
            first_name,
            first.capacity_bytes,
            first.block_size
        ));
    }
    Ok(())
}

/// NVMe paths must reach the same namespace (subsystem NQN, namespace id,
/// NGUID / EUI-64 / UUID): mixing namespaces would corrupt the guest's data.
fn check_same_namespace(
    first_kind: &str,
    first: &DeviceInfo,
    first_name: &str,
    other: &dyn PathDriver,
    name: &str,
    device: &str,
) -> Result<(), String> {
    let nvme = first_kind == "nvme" || other.kind() == "nvme";
    if nvme && other.info().identity != first.identity {
        return Err(format!(
            "path {name} ({device}) reaches namespace {} but path {} reaches namespace {}; \
             every path must reach the same namespace",
            other.info().identity,
            first_name,
            first.identity
        ));
    }
    Ok(())
}

/// The serial: the operator's, else a stable hash of the paths' identities.
fn serial_bytes(serial: Option<&str>, drivers: &[&Arc<dyn PathDriver>]) -> [u8; 20] {
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
