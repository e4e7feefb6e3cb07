//! `--path DEVICE[,name=NAME][,key=value...]` and the `[[path]]` config table.

use mpath_io::{Fault, LbaFault, ModelConfig, ServiceDist, ShapeConfig};
use serde::{Deserialize, Serialize};

/// One path as the operator wrote it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PathSpec {
    pub device: String,
    pub name: Option<String>,
    /// `relative_throughput` 0-100 (service-time); 0 = standby.
    pub weight: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preferred: bool,
    /// File paths: use O_DIRECT when possible (default true).
    pub direct: Option<bool>,
    /// File paths in memory (tmpfs, ramfs): done on the queue's thread,
    /// not through the ring (default true).
    pub inline: Option<bool>,
    /// File and null paths: logical block size (default 512).
    pub block_size: Option<u32>,
    /// Null paths: reads return zeroes (default true).
    pub read_zeroes: Option<bool>,
    /// Ghost-write guard: a write that fails over after being cancelled or
    /// timed out on this path waits this long before it is re-sent.
    pub write_failover_delay_ms: Option<u64>,
    /// NVMe paths: the command timeout in ms (a dead link fails over after
    /// this long instead of the kernel's keep-alive recovery).
    pub io_timeout_ms: Option<u32>,
    /// Cut requests to this path at this many bytes (tightens the device's
    /// own limit; lab and tests).
    pub max_transfer: Option<u64>,
    /// Cut requests to this path at this many memory pages.
    pub max_segments: Option<u64>,
    /// Lab shaping: added completion latency.
    pub delay_us: Option<u64>,
    /// Lab shaping: bandwidth cap in MB/s.
    pub bw_mbps: Option<u64>,
    /// Lab fault: every I/O fails this way (`EIO`, `-19`, `0x370`).
    pub fail: Option<String>,
    /// Lab fault: fail from the N-th I/O on.
    pub fail_after: Option<u64>,
    /// Lab fault: completions are held until released.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang: bool,
    /// Lab shaping: added completion latency of flushes only.
    pub flush_delay_us: Option<u64>,
    /// Lab fault: flushes (only) fail this way.
    pub flush_fail: Option<String>,
    /// Lab fault: I/O touching sectors `START-END` fails (`START-END[:FAULT]`).
    pub fail_lba: Option<String>,
    /// Lab fault: this fraction (`0.1`, `10%`) of the path's I/O fails
    /// (with `fail`'s fault, default EIO).
    pub fail_rate: Option<String>,
    /// Lab path models beyond the pipe (mpath-io's `lab_model`; the
    /// simulator's keys of the same names): a device with `channels`
    /// serving `service-us` each (`service-dist` fixed, exponential or
    /// lognormal).
    pub channels: Option<u32>,
    pub service_us: Option<u64>,
    pub service_dist: Option<String>,
    /// A token bucket: commands and/or MiB per second, holding
    /// `bucket-burst-ms` of its rate (default 100, as QEMU).
    pub bucket_iops: Option<u64>,
    pub bucket_mib_s: Option<u64>,
    pub bucket_burst_ms: Option<u64>,
    /// A pause of `stall-ms` every `stall-every-ms` (writes only).
    pub stall_every_ms: Option<u64>,
    pub stall_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stall_writes_only: bool,
    /// A TCP-like link: round trip, largest window, segments lost per
    /// million.
    pub rtt_us: Option<u64>,
    pub window_kib: Option<u64>,
    pub loss_ppm: Option<u32>,
    /// Heavy-tailed (Pareto II) extra delay: shape > 1 and scale.
    pub tail_alpha: Option<f64>,
    pub tail_us: Option<u64>,
    /// Marginal detection on this path: error rate 0-1 (0: off), sample
    /// window and recheck gap in ms; absent: the disk's settings.
    pub marginal_err_rate: Option<f64>,
    pub marginal_sample_ms: Option<u64>,
    pub marginal_recheck_gap_ms: Option<u64>,
}

fn parse_bool(key: &str, v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("on") | Some("true") | Some("yes") | Some("1") => Ok(true),
        Some("off") | Some("false") | Some("no") | Some("0") => Ok(false),
        Some(other) => Err(format!("{key}={other}: expected on or off")),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, v: Option<&str>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{key} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{key}={v}: expected a number"))
}

impl PathSpec {
    /// Parses the command-line form.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut parts = spec.split(',');
        let device = parts.next().unwrap_or_default().trim();
        if device.is_empty() {
            return Err(format!("--path {spec:?}: missing device"));
        }
        let mut p = PathSpec {
            device: device.to_string(),
            ..Default::default()
        };
        for kv in parts {
            let (k, v) = match kv.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (kv.trim(), None),
            };
            let r: Result<(), String> = (|| {
                match k {
                    "name" => {
                        let v = v.filter(|v| !v.is_empty()).ok_or("name needs a value")?;
                        p.name = Some(v.to_string());
                    }
                    "weight" => p.weight = Some(parse_num(k, v)?),
                    "preferred" => p.preferred = parse_bool(k, v)?,
                    "direct" => p.direct = Some(parse_bool(k, v)?),
                    "inline" => p.inline = Some(parse_bool(k, v)?),
                    "block-size" => p.block_size = Some(parse_num(k, v)?),
                    "read-zeroes" => p.read_zeroes = Some(parse_bool(k, v)?),
                    "write-failover-delay-ms" => p.write_failover_delay_ms = Some(parse_num(k, v)?),
                    "io-timeout-ms" => p.io_timeout_ms = Some(parse_num(k, v)?),
                    "max-transfer" => {
                        let v = v.ok_or("max-transfer needs a value")?;
                        p.max_transfer = Some(
                            mpath_io::parse_size(v)
                                .ok_or_else(|| format!("max-transfer={v}: expected a size"))?,
                        );
                    }
                    "max-segments" => p.max_segments = Some(parse_num(k, v)?),
                    "delay-us" => p.delay_us = Some(parse_num(k, v)?),
                    "bw-mbps" => p.bw_mbps = Some(parse_num(k, v)?),
                    "fail" => {
                        let v = v.filter(|v| !v.is_empty()).ok_or("fail needs a value")?;
                        p.fail = Some(v.to_string());
                    }
                    "fail-after" => p.fail_after = Some(parse_num(k, v)?),
                    "hang" => p.hang = parse_bool(k, v)?,
                    "flush-delay-us" => p.flush_delay_us = Some(parse_num(k, v)?),
                    "flush-fail" => {
                        let v = v
                            .filter(|v| !v.is_empty())
                            .ok_or("flush-fail needs a value")?;
                        p.flush_fail = Some(v.to_string());
                    }
                    "fail-lba" => {
                        let v = v
                            .filter(|v| !v.is_empty())
                            .ok_or("fail-lba needs a value")?;
                        p.fail_lba = Some(v.to_string());
                    }
                    "fail-rate" => {
                        let v = v
                            .filter(|v| !v.is_empty())
                            .ok_or("fail-rate needs a value")?;
                        p.fail_rate = Some(v.to_string());
                    }
                    "channels" => p.channels = Some(parse_num(k, v)?),
                    "service-us" => p.service_us = Some(parse_num(k, v)?),
                    "service-dist" => {
                        let v = v
                            .filter(|v| !v.is_empty())
                            .ok_or("service-dist needs a value")?;
                        p.service_dist = Some(v.to_string());
                    }
                    "bucket-iops" => p.bucket_iops = Some(parse_num(k, v)?),
                    "bucket-mib-s" => p.bucket_mib_s = Some(parse_num(k, v)?),
                    "bucket-burst-ms" => p.bucket_burst_ms = Some(parse_num(k, v)?),
                    "stall-every-ms" => p.stall_every_ms = Some(parse_num(k, v)?),
                    "stall-ms" => p.stall_ms = Some(parse_num(k, v)?),
                    "stall-writes-only" => p.stall_writes_only = parse_bool(k, v)?,
                    "rtt-us" => p.rtt_us = Some(parse_num(k, v)?),
                    "window-kib" => p.window_kib = Some(parse_num(k, v)?),
                    "loss-ppm" => p.loss_ppm = Some(parse_num(k, v)?),
                    "tail-alpha" => p.tail_alpha = Some(parse_num(k, v)?),
                    "tail-us" => p.tail_us = Some(parse_num(k, v)?),
                    "marginal-err-rate" => p.marginal_err_rate = Some(parse_num(k, v)?),
                    "marginal-sample-ms" => p.marginal_sample_ms = Some(parse_num(k, v)?),
                    "marginal-recheck-gap-ms" => p.marginal_recheck_gap_ms = Some(parse_num(k, v)?),
                    _ => return Err(format!("unknown path option {k:?}")),
                }
                Ok(())
            })();
            r.map_err(|e| format!("--path {spec:?}: {e}"))?;
        }
        p.validate()?;
        Ok(p)
    }

    /// The lab shaping and faults this spec asks for.
    pub fn shape(&self) -> Result<ShapeConfig, String> {
        let fail = match &self.fail {
            Some(f) => Some(Fault::parse(f).ok_or_else(|| {
                format!(
                    "path {}: fail={f}: expected an errno name (EIO), -ERRNO or an NVMe status (0x370)",
                    self.device
                )
            })?),
            None => None,
        };
        let flush_fail = match &self.flush_fail {
            Some(f) => Some(Fault::parse(f).ok_or_else(|| {
                format!(
                    "path {}: flush-fail={f}: expected an errno name (EIO), -ERRNO or an NVMe status (0x370)",
                    self.device
                )
            })?),
            None => None,
        };
        let fail_lba = match &self.fail_lba {
            Some(l) => Some(LbaFault::parse(l).ok_or_else(|| {
                format!(
                    "path {}: fail-lba={l}: expected START-END[:FAULT] in 512-byte sectors (FAULT as for fail)",
                    self.device
                )
            })?),
            None => None,
        };
        let fail_rate_ppm = match &self.fail_rate {
            Some(r) => mpath_io::parse_fail_rate(r).ok_or_else(|| {
                format!(
                    "path {}: fail-rate={r}: expected a fraction 0-1 (0.1) or a percentage (10%)",
                    self.device
                )
            })?,
            None => 0,
        };
        let model = self.model()?;
        Ok(ShapeConfig {
            model,
            fail_rate_ppm,
            delay_us: self.delay_us.unwrap_or(0),
            bw_mbps: self.bw_mbps.unwrap_or(0),
            fail,
            fail_after: self.fail_after.unwrap_or(0),
            hang: self.hang,
            flush_delay_us: self.flush_delay_us.unwrap_or(0),
            flush_fail,
            fail_lba,
        })
    }

    /// The path models this spec asks for.
    fn model(&self) -> Result<ModelConfig, String> {
        let service_dist = match &self.service_dist {
            Some(d) => ServiceDist::parse(d).ok_or_else(|| {
                format!(
                    "path {}: service-dist={d}: expected fixed, exponential or lognormal",
                    self.device
                )
            })?,
            None => ServiceDist::Fixed,
        };
        let tail_alpha_milli = match self.tail_alpha {
            Some(a) if a.is_finite() && a > 0.0 && a < 1000.0 => (a * 1000.0).round() as u32,
            Some(a) => {
                return Err(format!(
                    "path {}: tail-alpha={a}: expected a number over 1",
                    self.device
                ))
            }
            None => 0,
        };
        let bucket = self.bucket_iops.is_some() || self.bucket_mib_s.is_some();
        let m = ModelConfig {
            channels: self.channels.unwrap_or(0),
            service_us: self.service_us.unwrap_or(0),
            service_dist,
            bucket_iops: self.bucket_iops.unwrap_or(0),
            bucket_mib_s: self.bucket_mib_s.unwrap_or(0),
            bucket_burst_ms: self.bucket_burst_ms.unwrap_or(if bucket {
                mpath_io::DEFAULT_BURST_MS
            } else {
                0
            }),
            stall_every_ms: self.stall_every_ms.unwrap_or(0),
            stall_ms: self.stall_ms.unwrap_or(0),
            stall_writes_only: self.stall_writes_only,
            rtt_us: self.rtt_us.unwrap_or(0),
            window_kib: self.window_kib.unwrap_or(0),
            loss_ppm: self.loss_ppm.unwrap_or(0),
            tail_alpha_milli,
            tail_us: self.tail_us.unwrap_or(0),
        };
        if self.service_dist.is_some() && m.service_us == 0 {
            return Err(format!(
                "path {}: service-dist needs service-us",
                self.device
            ));
        }
        if self.bucket_burst_ms.is_some() && !bucket {
            return Err(format!(
                "path {}: bucket-burst-ms needs bucket-iops or bucket-mib-s",
                self.device
            ));
        }
        m.validate()
            .map_err(|e| format!("path {}: {e}", self.device))?;
        Ok(m)
    }

    /// This path's own marginal settings over the disk's `defaults`;
    /// `None` when the spec sets none.
    pub fn marginal(&self, defaults: &mpath::MarginalConfig) -> Option<mpath::MarginalConfig> {
        if self.marginal_err_rate.is_none()
            && self.marginal_sample_ms.is_none()
            && self.marginal_recheck_gap_ms.is_none()
        {
            return None;
        }
        let ms = std::time::Duration::from_millis;
        Some(mpath::MarginalConfig {
            err_rate: self.marginal_err_rate.unwrap_or(defaults.err_rate),
            sample_time: self.marginal_sample_ms.map_or(defaults.sample_time, ms),
            recheck_gap: self
                .marginal_recheck_gap_ms
                .map_or(defaults.recheck_gap, ms),
        })
    }

    /// The lab keys this spec sets (shaping and faults): they need `--lab`.
    pub fn lab_keys(&self) -> Vec<&'static str> {
        [
            ("delay-us", self.delay_us.is_some()),
            ("bw-mbps", self.bw_mbps.is_some()),
            ("fail", self.fail.is_some()),
            ("fail-after", self.fail_after.is_some()),
            ("hang", self.hang),
            ("flush-delay-us", self.flush_delay_us.is_some()),
            ("flush-fail", self.flush_fail.is_some()),
            ("fail-lba", self.fail_lba.is_some()),
            ("fail-rate", self.fail_rate.is_some()),
            ("channels", self.channels.is_some()),
            ("service-us", self.service_us.is_some()),
            ("service-dist", self.service_dist.is_some()),
            ("bucket-iops", self.bucket_iops.is_some()),
            ("bucket-mib-s", self.bucket_mib_s.is_some()),
            ("bucket-burst-ms", self.bucket_burst_ms.is_some()),
            ("stall-every-ms", self.stall_every_ms.is_some()),
            ("stall-ms", self.stall_ms.is_some()),
            ("stall-writes-only", self.stall_writes_only),
            ("rtt-us", self.rtt_us.is_some()),
            ("window-kib", self.window_kib.is_some()),
            ("loss-ppm", self.loss_ppm.is_some()),
            ("tail-alpha", self.tail_alpha.is_some()),
            ("tail-us", self.tail_us.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }

    /// Refuses lab keys unless the daemon runs with `--lab`.
    pub fn check_lab(&self, lab: bool) -> Result<(), String> {
        let keys = self.lab_keys();
        if lab || keys.is_empty() {
            return Ok(());
        }
        Err(format!(
            "path {}: {} only with --lab (lab = true in the configuration): \
             lab shaping and faults are for tests, not for a VM's disk",
            self.device,
            keys.join(", ")
        ))
    }

    pub fn validate(&self) -> Result<(), String> {
        self.shape()?;
        if let Some(m) = self.marginal(&mpath::MarginalConfig::default()) {
            m.validate()
                .map_err(|e| format!("path {}: {e}", self.device))?;
        }
        if let Some(w) = self.weight {
            if w > 100 {
                return Err(format!("path {}: weight {w} is over 100", self.device));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marginal_and_fail_rate_keys() {
        let p = PathSpec::parse(
            "/dev/sdb,fail-rate=10%,marginal-err-rate=0.02,marginal-recheck-gap-ms=5000",
        )
        .unwrap();
        assert_eq!(p.shape().unwrap().fail_rate_ppm, 100_000);
        assert_eq!(p.lab_keys(), vec!["fail-rate"]);
        let d = mpath::MarginalConfig::default();
        let m = p.marginal(&d).unwrap();
        assert_eq!(m.err_rate, 0.02);
        assert_eq!(m.sample_time, d.sample_time);
        assert_eq!(m.recheck_gap, std::time::Duration::from_secs(5));
        assert_eq!(PathSpec::parse("/dev/sdb").unwrap().marginal(&d), None);
        assert!(PathSpec::parse("/dev/sdb,fail-rate=2").is_err());
        assert!(PathSpec::parse("/dev/sdb,marginal-err-rate=1.5").is_err());
    }

    #[test]
    fn path_model_keys() {
        let p = PathSpec::parse(
            "null:1G,channels=4,service-us=80,service-dist=exponential,bucket-iops=500,\
             stall-every-ms=200,stall-ms=5,stall-writes-only,rtt-us=100,window-kib=256,\
             loss-ppm=50,tail-alpha=1.5,tail-us=20",
        )
        .unwrap();
        let m = p.shape().unwrap().model;
        assert_eq!(m.channels, 4);
        assert_eq!(m.service_us, 80);
        assert_eq!(m.service_dist, ServiceDist::Exponential);
        assert_eq!(m.bucket_iops, 500);
        assert_eq!(m.bucket_burst_ms, 100, "QEMU's default burst");
        assert!(m.stall_writes_only);
        assert_eq!((m.stall_every_ms, m.stall_ms), (200, 5));
        assert_eq!((m.rtt_us, m.window_kib, m.loss_ppm), (100, 256, 50));
        assert_eq!((m.tail_alpha_milli, m.tail_us), (1500, 20));
        assert_eq!(p.lab_keys().len(), 12);
        assert!(p.check_lab(false).unwrap_err().contains("bucket-iops"));
        assert!(p.check_lab(true).is_ok());
        let b = PathSpec::parse("x,bucket-mib-s=8,bucket-burst-ms=0").unwrap();
        assert_eq!(b.shape().unwrap().model.bucket_burst_ms, 0);
        for bad in [
            "x,channels=4",
            "x,service-us=10,service-dist=weird",
            "x,service-dist=fixed",
            "x,bucket-burst-ms=10",
            "x,stall-ms=5",
            "x,stall-every-ms=5,stall-ms=5",
            "x,stall-writes-only",
            "x,window-kib=64",
            "x,loss-ppm=2000000,rtt-us=100",
            "x,tail-us=10",
            "x,tail-alpha=1,tail-us=10",
            "x,tail-alpha=nan,tail-us=10",
            "x,channels=-1,service-us=1",
        ] {
            assert!(PathSpec::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn full_spec() {
        let p = PathSpec::parse(
            "/dev/sdb,name=a,weight=4,preferred,direct=off,inline=off,block-size=4096",
        )
        .unwrap();
        assert_eq!(p.device, "/dev/sdb");
        assert_eq!(p.name.as_deref(), Some("a"));
        assert_eq!(p.weight, Some(4));
        assert!(p.preferred);
        assert_eq!(p.direct, Some(false));
        assert_eq!(p.inline, Some(false));
        assert_eq!(p.block_size, Some(4096));
    }

    #[test]
    fn lab_flush_and_sector_faults() {
        let p =
            PathSpec::parse("x,flush-delay-us=500,flush-fail=EIO,fail-lba=100-107:ENOSPC").unwrap();
        let s = p.shape().unwrap();
        assert_eq!(s.flush_delay_us, 500);
        assert_eq!(s.flush_fail, Some(Fault::Errno(5)));
        assert_eq!(s.fail_lba, LbaFault::parse("100-107:ENOSPC"));
    }

    #[test]
    fn bad_specs() {
        for s in [
            "x,fail=EWHAT",
            "x,delay-us=-1",
            "",
            ",name=a",
            "x,bogus=1",
            "x,weight=abc",
            "x,weight=101",
            "x,name=",
            "x,direct=maybe",
            "x,fail-lba=9-3",
            "x,fail-lba=1-2:EWHAT",
            "x,fail-lba",
            "x,flush-fail=bogus",
        ] {
            assert!(PathSpec::parse(s).is_err(), "{s:?} should be refused");
        }
    }

    #[test]
    fn lab_keys_need_lab() {
        let plain = PathSpec::parse("x,name=a,weight=2,max-transfer=64k").unwrap();
        assert!(plain.check_lab(false).is_ok());
        for s in [
            "x,delay-us=5",
            "x,bw-mbps=1",
            "x,fail=EIO",
            "x,fail-after=3",
            "x,hang",
        ] {
            let p = PathSpec::parse(s).unwrap();
            let err = p.check_lab(false).unwrap_err();
            assert!(err.contains("--lab"), "{s}: {err}");
            assert!(p.check_lab(true).is_ok(), "{s}");
        }
    }
}
