//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `TABLE_NAME` | (required) | all | the archive table |
//! | `AWS_ENDPOINT_URL_DYNAMODB` | AWS | local runs | another endpoint (DynamoDB Local); `DYNAMODB_ENDPOINT_URL` is its alias, `AWS_ENDPOINT_URL` every service's |
//! | `DEADLINE_MARGIN_MS` | `2000` | all | stop this long before the Lambda deadline |
//! | `STREAM_CONCURRENCY` | `1000` | stream | items of a batch handled at once |
//! | `WORKER_JOB` | (any) | schedule | the one job a schedule function runs |
//! | `LOG_FORMAT`, `RUST_LOG` | `json`, `info` | all | logs (`worker_engine::telemetry`) |
//! | `UNZIPPED_RETENTION_HOURS` | `24` | expire-unzipped | unzipped files older than this expire |
//! | `UNZIP_STUCK_HOURS` | `48` | expire-unzipped | unzipping files older than this are reported |
//! | `NOTIFY_EVENT_BUS` | (off) | expire-unzipped | EventBridge bus of `UnzippedFileExpired` events |
//!
//! [`COMMON_ENV`] (`worker_engine::settings`) and each job's `SPEC`
//! declare the same list with who reads each variable.

use worker_engine::env::{ConfigError, Env};
use worker_engine::settings::JobSettings;

use crate::keys::Job;
use crate::unzip::UnzipSettings;

pub type EnvVar = worker_engine::job::EnvVar<Job>;

/// What `TABLE_NAME` names.
const TABLE: &str = "the archive table";

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, TABLE);

/// Everything the worker is configured with: the common settings and
/// [`ArchiveSettings`].
pub type Settings = worker_engine::settings::Settings<Job, ArchiveSettings>;

/// The archive worker's own settings: its jobs'.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ArchiveSettings {
    pub unzip: UnzipSettings,
}

impl JobSettings for ArchiveSettings {
    const TABLE: &'static str = TABLE;
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(ArchiveSettings {
            unzip: UnzipSettings::from_env(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_lookup(&worker_testkit::env::lookup(vars))
    }

    #[test]
    fn settings_from_the_environment() {
        let s = settings(&[("TABLE_NAME", "archive")]).unwrap();
        assert_eq!(s, Settings::for_table("archive"));
        assert_eq!(s.unzip.retention_hours, 24);
        assert_eq!(s.unzip.stuck_hours, 48);
        let s = settings(&[
            ("TABLE_NAME", "archive"),
            ("WORKER_JOB", "expire-unzipped"),
            ("UNZIPPED_RETENTION_HOURS", "6"),
            ("NOTIFY_EVENT_BUS", "bus"),
            ("STREAM_CONCURRENCY", "0"),
        ])
        .unwrap();
        assert_eq!(s.common.job, Some(Job::ExpireUnzipped));
        assert_eq!(s.unzip.retention_hours, 6);
        assert_eq!(s.unzip.event_bus.as_deref(), Some("bus"));
        assert_eq!(s.common.stream_concurrency, 1);
        let e = settings(&[]).unwrap_err();
        assert_eq!(e.name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("rebuild-lookup"), "{e}");
        let e = settings(&[("TABLE_NAME", "t"), ("UNZIP_STUCK_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "UNZIP_STUCK_HOURS");
    }
}
