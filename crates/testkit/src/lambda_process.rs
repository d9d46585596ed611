//! An app's Lambda `bootstrap`s as processes, built with the settings
//! that ship and driven through a local Lambda Runtime API
//! ([`crate::runtime_api`]) the way Lambda drives them, for the memory and
//! cold-start benchmarks of every app (`cargo bench --bench lambda_process`
//! of each package).
//!
//! [`build`] builds them with the `bootstrap` profile (the release settings
//! of `scripts/package`) into `target/bootstrap/`: `cargo bench` builds the
//! package's bins with the bench profile, into `target/release/`.
//! [`peak`] runs one fresh process, hands it a payload several times (a
//! redelivery must be idempotent, and a warm process keeps what it grew)
//! and reads its peak resident memory (`VmHWM` of `/proc/<pid>/status`)
//! after its init and after each delivery.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::runtime_api::{Outcome, RuntimeApi};

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;
/// Lambda's payload limit for a synchronous invocation (a stream batch's too).
pub const PAYLOAD_LIMIT: usize = 6 * 1024 * 1024;

/// The workspace's target directory (`CARGO_TARGET_DIR`, else `target/`).
fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Builds `bins` of `package` (and `examples`) with the `bootstrap`
/// profile; the directory they are in. Panics when the build fails.
pub fn build(package: &str, bins: &[&str], examples: &[&str]) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--profile", "bootstrap", "-p", package])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    for example in examples {
        cmd.args(["--example", example]);
    }
    let status = cmd.status().expect("run cargo");
    assert!(
        status.success(),
        "cargo build --profile bootstrap -p {package} {bins:?} {examples:?}"
    );
    target_dir().join("bootstrap")
}

/// `VmHWM` and `VmRSS` of a process, in bytes.
pub fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A `bootstrap` started against `api` with a Lambda-like environment
/// (region, dummy credentials) and `env`.
pub fn spawn(binary: &Path, api: &RuntimeApi, env: &[(&str, String)]) -> Child {
    crate::runtime_api::function_command(binary, api)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .spawn()
        .expect("start the bootstrap")
}

/// One delivery of a payload to a warm process.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// From the invocation to the function's response.
    pub took: Duration,
    /// The function's response (a JSON body).
    pub response: serde_json::Value,
    /// `VmHWM` after it, in bytes.
    pub hwm: u64,
    /// `VmRSS` after it, in bytes.
    pub rss: u64,
}

/// What [`peak`] measured of one process.
#[derive(Debug, Clone)]
pub struct Peak {
    /// `VmHWM` once the process asked for its first invocation, in bytes.
    pub init: u64,
    /// Each delivery, in order.
    pub deliveries: Vec<Delivery>,
}

impl Peak {
    /// The process's peak resident memory, in MiB.
    pub fn mib(&self) -> f64 {
        self.deliveries
            .iter()
            .map(|d| d.hwm)
            .chain([self.init])
            .max()
            .unwrap_or(0) as f64
            / MIB
    }

    /// One line: the init and each delivery's time and memory.
    pub fn describe(&self) -> String {
        let mut line = format!("VmHWM after init {:.1} MiB", self.init as f64 / MIB);
        for (n, d) in self.deliveries.iter().enumerate() {
            line += &format!(
                "; delivery {}: {:.1} s, VmHWM {:.1} MiB (VmRSS {:.1})",
                n + 1,
                d.took.as_secs_f64(),
                d.hwm as f64 / MIB,
                d.rss as f64 / MIB
            );
        }
        line
    }
}

/// Starts `binary` with `env`, hands it `payload` `deliveries` times and
/// measures it. Panics when an invocation fails (the function reports an
/// error): a memory figure of a run that did not do the work is no figure.
pub async fn peak(
    binary: &Path,
    env: &[(&str, String)],
    payload: &[u8],
    deliveries: usize,
) -> Peak {
    let api = RuntimeApi::start().await.expect("runtime API");
    let mut child = spawn(binary, &api, env);
    let pid = child.id();
    api.first_next().await;
    let (init, _) = memory(pid);
    let mut measured = Vec::new();
    for _ in 0..deliveries {
        let started = Instant::now();
        let outcome = api.invoke(payload.to_vec(), Duration::from_secs(900)).await;
        let took = started.elapsed();
        let response = match &outcome {
            Outcome::Response(_) => outcome.json(),
            Outcome::Error { error_type, body } => {
                let _ = child.kill();
                panic!(
                    "{}: the invocation failed: {error_type}: {}",
                    binary.display(),
                    String::from_utf8_lossy(body)
                )
            }
        };
        let (hwm, rss) = memory(pid);
        measured.push(Delivery {
            took,
            response,
            hwm,
            rss,
        });
    }
    let _ = child.kill();
    let _ = child.wait();
    Peak {
        init,
        deliveries: measured,
    }
}

/// The smallest Lambda memory size, in MB (a multiple of 64 from 128, as
/// the templates use), that holds `peak_mib` with `margin` to spare
/// (`0.25`: the peak may grow by a quarter).
pub fn memory_size(peak_mib: f64, margin: f64) -> u32 {
    let need_mb = peak_mib * (1.0 + margin) * MIB / 1e6;
    let mut size = 128;
    while f64::from(size) < need_mb {
        size += 64;
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_size_is_the_smallest_step_that_holds_the_peak_and_margin() {
        assert_eq!(memory_size(10.0, 0.25), 128);
        // 57 MiB + 25% = 74.7 MB: 128.
        assert_eq!(memory_size(57.0, 0.25), 128);
        // 100 MiB + 25% = 131.1 MB: 192.
        assert_eq!(memory_size(100.0, 0.25), 192);
        assert_eq!(memory_size(200.0, 0.0), 256);
    }
}
