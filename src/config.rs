//! Configuration from the environment (Lambda) or the command line, and the
//! injected clock every job reads the time from.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TABLE_NAME` | (required) | the Nishiki table, e.g. `nishiki-table-prod-db` |
//! | `AWS_ENDPOINT_URL_DYNAMODB` | AWS | another endpoint, e.g. DynamoDB Local (`DYNAMODB_ENDPOINT_URL`: its alias; `AWS_ENDPOINT_URL`: every service's) |
//! | `DEADLINE_MARGIN_MS` | `2000` | stop this long before the Lambda deadline |
//! | `STREAM_CONCURRENCY` | `1000` | items of a stream batch handled at once (`1`: strictly in order) |
//! | `AUDIT_GRACE_SECS` | `3600` | a violation must persist this long before it is repaired |
//! | `EMPTY_GROUP_GRACE_SECS` | `86400` | the same, for groups without members |
//! | `EMPTY_GROUP_POLICY` | `delete` | `delete` or `report` empty groups |
//! | `AUDIT_SEGMENTS` | `4` | parallel scan segments of the audit |
//! | `EXPIRY_HORIZON_DAYS` | `3` | flag foods expiring up to the end of today + N days |
//! | `EXPIRY_TIME_ZONE` | `UTC` | IANA zone the days are counted in |
//! | `FLAG_RETENTION_DAYS` | `7` | flags vanish (TTL) this long after the food expired |
//! | `NOTIFY_EVENT_BUS` | (off) | EventBridge bus for `FoodsNearingExpiry` events |
//! | `INVITATION_TTL` | `off` | `on`: stamp `WorkerExpiresAt` on invitation links for TTL |
//! | `PARKING_TABLE` | (off) | the parking table of records that fail for good (`worker_engine::park`) |
//! | `PARKING_RETENTION_DAYS` | `14` | parked records expire (TTL) this long after parking |
//! | `LOG_FORMAT` | `json` | `json` or `text` (local runs; Lambda: `LoggingConfig.LogFormat`) |
//! | `RUST_LOG` | `info` | log filter (local runs; Lambda: `LoggingConfig.ApplicationLogLevel`) |
//! | `WORKER_JOB` | (any) | pins a schedule function to one job; a tick for another job is refused |
//!
//! [`env_vars`] declares the same list with which function reads each
//! variable: [`COMMON_ENV`] here, and each job's in its description
//! ([`crate::jobs::JobSpec`]); the deployed functions
//! (`APP.functions()`) and `infra/template.yaml` are checked against it.

use crate::keys::Job;

pub use worker_engine::clock::{Clock, ManualClock, SystemClock};

use crate::jobs::expiry::ExpirySettings;
use crate::jobs::invitations::InvitationSettings;
use crate::jobs::relationships::RelationshipSettings;

use worker_engine::settings::JobSettings;
pub use worker_engine::{ConfigError, Env};

/// An environment variable of Nishiki's worker.
pub type EnvVar = worker_engine::EnvVar<Job>;
/// Which deployed function reads a variable.
pub type ReadBy = worker_engine::ReadBy<Job>;

/// The variables every function reads, whatever its jobs (the engine's
/// common ones, `worker_engine::settings`); each job declares its own in
/// its [`crate::jobs::JobSpec`].
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, "the Nishiki table");

/// Every environment variable the worker's code reads: [`COMMON_ENV`],
/// then each job's, as the job descriptions declare them.
pub fn env_vars() -> Vec<&'static EnvVar> {
    crate::jobs::APP.env_vars()
}

/// Everything the worker is configured with: the common settings
/// (`config.common`: table, endpoint, deadline margin, stream concurrency,
/// pinned job, parking table) and each job's own ([`JobsSettings`],
/// dereferenced: `config.expiry`).
pub type Config = worker_engine::settings::Settings<Job, JobsSettings>;

/// Each job's own settings (read by the job's module).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobsSettings {
    /// The cascades' and the audit's settings (grace periods, empty-group
    /// policy, scan segments).
    pub relationships: RelationshipSettings,
    /// The invitation sweep's settings (`INVITATION_TTL`).
    pub invitations: InvitationSettings,
    /// The expiry job's settings (horizon, time zone, retention, event
    /// bus).
    pub expiry: ExpirySettings,
}

impl JobSettings for JobsSettings {
    const TABLE: &'static str = "the table to work on, e.g. nishiki-table-dev-db";

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(JobsSettings {
            relationships: RelationshipSettings::from_env(env)?,
            invitations: InvitationSettings::from_env(env)?,
            expiry: ExpirySettings::from_env(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_need_only_the_table() {
        let c = from(&[("TABLE_NAME", "nishiki-table-dev-db")]).unwrap();
        assert_eq!(c, Config::for_table("nishiki-table-dev-db"));
        assert_eq!(c.expiry.horizon_days, 3);
        assert_eq!(
            c.relationships.empty_group_policy,
            crate::jobs::relationships::EmptyGroupPolicy::Delete
        );
    }

    #[test]
    fn every_variable_is_read() {
        let c = from(&[
            ("TABLE_NAME", "t"),
            ("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:8000"),
            ("DEADLINE_MARGIN_MS", "500"),
            ("STREAM_CONCURRENCY", "4"),
            ("AUDIT_GRACE_SECS", "60"),
            ("EMPTY_GROUP_GRACE_SECS", "120"),
            ("EMPTY_GROUP_POLICY", "report"),
            ("AUDIT_SEGMENTS", "8"),
            ("EXPIRY_HORIZON_DAYS", "5"),
            ("EXPIRY_TIME_ZONE", "Asia/Tokyo"),
            ("FLAG_RETENTION_DAYS", "2"),
            ("NOTIFY_EVENT_BUS", "bus"),
            ("INVITATION_TTL", "on"),
            ("PARKING_TABLE", "nishiki-worker-dev-parking"),
            ("PARKING_RETENTION_DAYS", "30"),
        ])
        .unwrap();
        assert_eq!(
            c.common.parking,
            Some(worker_engine::park::ParkingSettings {
                table: "nishiki-worker-dev-parking".into(),
                retention_days: 30
            })
        );
        assert_eq!(
            c.common.endpoint_url.as_deref(),
            Some("http://127.0.0.1:8000")
        );
        assert_eq!(c.common.deadline_margin, Duration::from_millis(500));
        assert_eq!(c.common.stream_concurrency, 4);
        let r = &c.relationships;
        assert_eq!(r.audit_grace, Duration::from_secs(60));
        assert_eq!(r.empty_group_grace, Duration::from_secs(120));
        assert_eq!(
            r.empty_group_policy,
            crate::jobs::relationships::EmptyGroupPolicy::Report
        );
        assert_eq!(r.audit_segments, 8);
        assert_eq!(c.expiry.horizon_days, 5);
        assert_eq!(c.expiry.time_zone, chrono_tz::Asia::Tokyo);
        assert_eq!(c.expiry.flag_retention_days, 2);
        assert_eq!(c.expiry.notify_event_bus.as_deref(), Some("bus"));
        assert!(c.invitations.ttl);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = from(&[]).unwrap_err();
        assert_eq!(e.name, "TABLE_NAME");
        let e = from(&[("TABLE_NAME", "t"), ("EXPIRY_TIME_ZONE", "Mars/Olympus")]).unwrap_err();
        assert_eq!(e.name, "EXPIRY_TIME_ZONE");
        assert!(e.to_string().contains("IANA"));
        let e = from(&[("TABLE_NAME", "t"), ("AUDIT_GRACE_SECS", "1h")]).unwrap_err();
        assert_eq!(e.name, "AUDIT_GRACE_SECS");
    }

    #[test]
    fn worker_job_pins_a_job() {
        let c = from(&[("TABLE_NAME", "t"), ("WORKER_JOB", "audit")]).unwrap();
        assert_eq!(c.common.job, Some(Job::Audit));
        let e = from(&[("TABLE_NAME", "t"), ("WORKER_JOB", "dance")]).unwrap_err();
        assert_eq!(e.name, "WORKER_JOB");
        assert!(e.to_string().contains("sweep-invitations"));
        let e = from(&[("TABLE_NAME", "t"), ("WORKER_JOB", "")]).unwrap_err();
        assert_eq!(e.name, "WORKER_JOB", "an empty pin is a broken environment");
    }

    /// Every variable `Config::from_lookup` asks for is declared in
    /// [`env_vars`] (and the declarations name no variable twice).
    #[test]
    fn every_variable_read_is_declared() {
        let asked = std::sync::Mutex::new(Vec::<String>::new());
        Config::from_lookup(&|name| {
            asked.lock().unwrap().push(name.to_owned());
            (name == "TABLE_NAME").then(|| "t".to_owned())
        })
        .unwrap();
        let declared: Vec<&str> = env_vars().iter().map(|v| v.name).collect();
        for name in asked.into_inner().unwrap() {
            assert!(declared.contains(&name.as_str()), "{name} is not declared");
        }
        let mut unique = declared.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), declared.len());
        let stream_reads = |n: &str| {
            env_vars()
                .into_iter()
                .find(|v| v.name == n)
                .unwrap()
                .is_read_by(None)
        };
        assert!(stream_reads("TABLE_NAME") && stream_reads("INVITATION_TTL"));
        assert!(!stream_reads("AUDIT_GRACE_SECS") && !stream_reads("WORKER_JOB"));
    }
}
