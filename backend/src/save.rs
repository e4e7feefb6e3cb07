//! `save_config`: the running disk's paths (with their options, current
//! weights and preferences), policy (with its tunables) and QoS limits
//! written back to the `--config` file, so that a restart restores them.
//!
//! The file is edited, not regenerated: every other key, and the comments
//! outside the `[[path]]` tables, stay as the operator wrote them. It is
//! replaced atomically (a temporary file in the same folder, fsync, rename,
//! fsync of the folder): a crash leaves the old file or the new one.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use mpath::{PathId, PathState};
use toml_edit::{value, ArrayOfTables, DocumentMut, Item, Table, Value};

use crate::disk::Disk;
use crate::path_spec::PathSpec;

/// What was saved.
#[derive(Debug)]
pub struct Saved {
    pub paths: usize,
    pub policy: String,
}

/// The paths that are not removed, as `[[path]]` specs: the options they
/// were given, with the weight and preference they have now. Devices under
/// the configuration file's folder are written relative to it, as
/// [`crate::config::ConfigFile::load`] reads them.
pub fn current_paths(disk: &Disk, base: &Path) -> Vec<PathSpec> {
    let engine = &disk.engine;
    (0..engine.paths().len())
        .map(PathId)
        .filter(|&id| engine.path(id).state() != PathState::Removed)
        .map(|id| {
            let path = engine.path(id);
            let mut spec = disk.slot(id).spec.clone();
            spec.weight = Some(path.weight());
            spec.preferred = path.preferred();
            if !spec.device.starts_with("null:") && !base.as_os_str().is_empty() {
                if let Ok(rel) = Path::new(&spec.device).strip_prefix(base) {
                    spec.device = rel.display().to_string();
                }
            }
            spec
        })
        .collect()
}

fn spec_table(spec: &PathSpec) -> Result<Table, String> {
    let text = toml::to_string(spec).map_err(|e| format!("path {}: {e}", spec.device))?;
    let doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("path {}: {e}", spec.device))?;
    Ok(doc.as_table().clone())
}

/// Rewrites `file` with the disk's current paths and policy.
pub fn save_config(file: &Path, disk: &Disk) -> Result<Saved, String> {
    let _control = disk.control_lock();
    let err = |e: &dyn std::fmt::Display| format!("config {}: {e}", file.display());
    let text = fs::read_to_string(file).map_err(|e| err(&e))?;
    let mut doc: DocumentMut = text.parse().map_err(|e| err(&e))?;

    let cfg = disk.engine.policy_config();
    doc["policy"] = value(cfg.name.as_str());
    doc["rr_min_io"] = value(i64::from(cfg.rr_min_io));
    doc["ewma_shift"] = value(i64::from(cfg.ewma_shift));
    doc["weight_period_ms"] = value(cfg.weight_period.as_millis().min(i64::MAX as u128) as i64);
    doc["failback"] = value(cfg.failback.to_string());

    let base = file.parent().unwrap_or(Path::new(""));
    let specs = current_paths(disk, base);
    let mut tables = ArrayOfTables::new();
    for spec in &specs {
        tables.push(spec_table(spec)?);
    }
    doc["path"] = Item::ArrayOfTables(tables);
    save_qos(&mut doc, &disk.qos.limits());

    write_atomically(file, doc.to_string().as_bytes()).map_err(|e| err(&e))?;
    log::info!(
        "saved {} path(s) and policy {} to {}",
        specs.len(),
        cfg.name,
        file.display()
    );
    Ok(Saved {
        paths: specs.len(),
        policy: cfg.name.as_str().to_string(),
    })
}

/// `[qos]` holds the limits that are set (none: no table). Edited in place,
/// so the operator's comments on keys that stay set are kept.
fn save_qos(doc: &mut DocumentMut, limits: &mpath::QosLimits) {
    let values = serde_json::to_value(limits).unwrap_or_default();
    if !doc.get("qos").is_some_and(Item::is_table_like) {
        doc["qos"] = Item::Table(Table::new());
    }
    let Some(t) = doc["qos"].as_table_like_mut() else {
        return;
    };
    for name in mpath::QOS_FIELDS {
        match values[name].as_u64().filter(|&n| n > 0) {
            Some(n) => {
                let mut v = Value::from(n.min(i64::MAX as u64) as i64);
                if let Some(old) = t.get(name).and_then(Item::as_value) {
                    *v.decor_mut() = old.decor().clone();
                }
                t.insert(name, Item::Value(v));
            }
            None => {
                t.remove(name);
            }
        }
    }
    if t.is_empty() {
        doc.remove("qos");
    }
}

/// Replaces `file` (the target, if it is a symlink) with `bytes`: a
/// temporary file next to it, synced, renamed over it, the folder synced.
/// The file keeps its permission bits.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let target = fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mode = fs::metadata(&target)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, &target)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Args;
    use crate::config::{ConfigFile, Settings};
    use clap::Parser;
    use mpath::PolicyName;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vmp-save-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn saved_file_restores_the_qos_limits() {
        let dir = temp_dir("qos");
        let cfg = dir.join("vmp.toml");
        fs::write(
            &cfg,
            "socket_path = \"s.sock\"\n\n[qos]\ntotal_iops_sec = 500 # the tenant's\nwrite_bytes_sec = 8000000\n\n\
             [[path]]\ndevice = \"null:1M\"\n",
        )
        .unwrap();
        let args = Args::parse_from(["vhost-mpath", "--config", cfg.to_str().unwrap()]);
        let disk = Disk::open(&Settings::from_args(&args).unwrap()).unwrap();
        let l = crate::qos::parse_limits(
            disk.qos.limits(),
            "total_iops_sec=200,total_iops_sec_max=1000,write_bytes_sec=0",
        )
        .unwrap();
        disk.qos.set(l, 0);
        save_config(&cfg, &disk).unwrap();
        let text = fs::read_to_string(&cfg).unwrap();
        assert!(
            text.contains("total_iops_sec = 200 # the tenant's"),
            "{text}"
        );
        assert!(!text.contains("write_bytes_sec"), "{text}");
        assert_eq!(ConfigFile::load(&cfg).unwrap().qos, Some(l));
        let again = Disk::open(&Settings::from_args(&args).unwrap()).unwrap();
        assert_eq!(again.qos.limits(), l);

        // No limits: no [qos] table.
        disk.qos.set(mpath::QosLimits::default(), 0);
        save_config(&cfg, &disk).unwrap();
        let text = fs::read_to_string(&cfg).unwrap();
        assert!(!text.contains("qos"), "{text}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn saved_file_restores_paths_and_policy() {
        let dir = temp_dir("restore");
        fs::File::create(dir.join("disk.img"))
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let cfg = dir.join("vmp.toml");
        fs::write(
            &cfg,
            "# operator's comment\nsocket_path = \"s.sock\"\nnum_queues = 2\npolicy = \"round-robin\"\n\n\
             [[path]]\ndevice = \"disk.img\"\nname = \"a\"\n\n[[path]]\ndevice = \"disk.img\"\nname = \"b\"\nwrite-failover-delay-ms = 7\n",
        )
        .unwrap();
        fs::set_permissions(&cfg, fs::Permissions::from_mode(0o640)).unwrap();
        let args = Args::parse_from(["vhost-mpath", "--config", cfg.to_str().unwrap()]);
        let settings = Settings::from_args(&args).unwrap();
        let disk = std::sync::Arc::new(Disk::open(&settings).unwrap());
        let mut policy = disk.engine.policy_config();
        policy.name = PolicyName::ServiceTime;
        policy.rr_min_io = 4;
        disk.engine.set_policy(policy);
        let c = disk
            .add_path(PathSpec {
                device: dir.join("disk.img").display().to_string(),
                name: Some("c".into()),
                direct: Some(false),
                ..Default::default()
            })
            .unwrap();
        disk.engine.path(c).set_weight(40);
        disk.engine.path(c).set_preferred(true);
        let a = disk.engine.path_id("a").unwrap();
        disk.remove_path(a, false, std::time::Duration::from_secs(1))
            .unwrap();
        let saved = save_config(&cfg, &disk).unwrap();
        assert_eq!(saved.paths, 2);

        let text = fs::read_to_string(&cfg).unwrap();
        assert!(text.contains("# operator's comment"), "{text}");
        assert!(text.contains("device = \"disk.img\""), "relative: {text}");
        let mode = fs::metadata(&cfg).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let file = ConfigFile::load(&cfg).unwrap();
        assert_eq!(file.num_queues, Some(2));
        assert_eq!(file.policy.as_deref(), Some("service-time"));
        assert_eq!(file.rr_min_io, Some(4));
        let names: Vec<_> = file.paths.iter().map(|p| p.name.clone().unwrap()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(file.paths[0].write_failover_delay_ms, Some(7));
        assert_eq!(file.paths[1].weight, Some(40));
        assert!(file.paths[1].preferred);
        assert_eq!(file.paths[1].direct, Some(false));

        // A restart from the saved file has the same paths and policy.
        let settings = Settings::from_args(&args).unwrap();
        let again = Disk::open(&settings).unwrap();
        assert_eq!(again.engine.policy_config(), disk.engine.policy_config());
        assert_eq!(again.engine.paths().len(), 2);
        assert_eq!(again.engine.path(PathId(1)).weight(), 40);
        assert_eq!(
            again.engine.path(PathId(0)).write_failover_delay(),
            std::time::Duration::from_millis(7)
        );
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        let _ = fs::remove_dir_all(&dir);
    }
}
