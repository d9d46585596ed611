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

use std::time::Duration;

use worker_engine::env::{ConfigError, Env};
use worker_engine::park::ParkingSettings;
use worker_engine::settings::CommonSettings;

use crate::keys::Job;
use crate::unzip::UnzipSettings;

pub type EnvVar = worker_engine::job::EnvVar<Job>;

/// What `TABLE_NAME` names.
const TABLE: &str = "the archive table";

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, TABLE);

/// Everything the worker is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub table_name: String,
    pub endpoint_url: Option<String>,
    pub deadline_margin: Duration,
    /// Items of a stream batch handled at once (at least 1).
    pub stream_concurrency: usize,
    /// `WORKER_JOB`: the one job this process runs ticks for.
    pub job: Option<Job>,
    pub unzip: UnzipSettings,
    /// Where the stream function parks records that fail for good.
    pub parking: Option<ParkingSettings>,
}

impl Settings {
    fn of(common: CommonSettings<Job>, unzip: UnzipSettings) -> Self {
        Settings {
            table_name: common.table_name,
            endpoint_url: common.endpoint_url,
            deadline_margin: common.deadline_margin,
            stream_concurrency: common.stream_concurrency,
            job: common.job,
            unzip,
            parking: common.parking,
        }
    }

    /// The defaults, on `table_name`.
    pub fn for_table(table_name: impl Into<String>) -> Self {
        Settings::of(
            CommonSettings::for_table(table_name),
            UnzipSettings::default(),
        )
    }

    /// Read the settings through `lookup` (the process environment on
    /// Lambda); errors name the variable and what a valid value is.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        Ok(Settings::of(
            CommonSettings::from_env(&env, TABLE)?,
            UnzipSettings::from_env(&env)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(&|k| vars.get(k).cloned())
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
        assert_eq!(s.job, Some(Job::ExpireUnzipped));
        assert_eq!(s.unzip.retention_hours, 6);
        assert_eq!(s.unzip.event_bus.as_deref(), Some("bus"));
        assert_eq!(s.stream_concurrency, 1);
        let e = settings(&[]).unwrap_err();
        assert_eq!(e.name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("rebuild-lookup"), "{e}");
        let e = settings(&[("TABLE_NAME", "t"), ("UNZIP_STUCK_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "UNZIP_STUCK_HOURS");
    }
}
