//! Configuration from the environment (Lambda) or the command line, and the
//! injected clock every job reads the time from.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TABLE_NAME` | (required) | the Nishiki table, e.g. `nishiki-table-prod-db` |
//! | `DYNAMODB_ENDPOINT_URL` | AWS | another endpoint, e.g. DynamoDB Local |
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
//! | `LOG_FORMAT` | `json` | `json` or `text` |
//! | `RUST_LOG` | `info` | log filter |
//! | `WORKER_JOB` | (any) | pins a schedule function to one job; a tick for another job is refused |
//!
//! [`ENV_VARS`] declares the same list with which function reads each
//! variable; `src/deploy.rs` and `infra/template.yaml` are checked against it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::keys::Job;

/// Which deployed function reads an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBy {
    /// Every function (stream and schedule).
    All,
    /// The stream function.
    Stream,
    /// The schedule function running this job.
    Job(Job),
    /// Every schedule function.
    Schedule,
    /// Only local runs (tests, the CLI); never set in a deployment.
    LocalOnly,
}

/// One environment variable the worker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    pub name: &'static str,
    /// Who reads it (a variable read by [`Config::from_lookup`] everywhere
    /// but used only by some functions lists those functions).
    pub read_by: &'static [ReadBy],
    pub meaning: &'static str,
}

impl EnvVar {
    /// Whether the function running the stream (`job == None`) or the job
    /// `job` reads this variable.
    pub fn is_read_by(&self, job: Option<Job>) -> bool {
        self.read_by.iter().any(|r| match (r, job) {
            (ReadBy::All, _) => true,
            (ReadBy::Stream, None) => true,
            (ReadBy::Schedule, Some(_)) => true,
            (ReadBy::Job(j), Some(k)) => *j == k,
            _ => false,
        })
    }
}

/// The largest `STREAM_CONCURRENCY` (a larger value is clamped): the
/// event source mapping's largest `BatchSize` for a DynamoDB stream.
pub const MAX_STREAM_CONCURRENCY: usize = 10_000;

/// Every environment variable the worker's code reads (the table above).
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "TABLE_NAME",
        read_by: &[ReadBy::All],
        meaning: "the Nishiki table",
    },
    EnvVar {
        name: "DYNAMODB_ENDPOINT_URL",
        read_by: &[ReadBy::LocalOnly],
        meaning: "another DynamoDB endpoint (DynamoDB Local)",
    },
    EnvVar {
        name: "DEADLINE_MARGIN_MS",
        read_by: &[ReadBy::All],
        meaning: "stop this long before the Lambda deadline",
    },
    EnvVar {
        name: "STREAM_CONCURRENCY",
        read_by: &[ReadBy::Stream],
        meaning: "items of a stream batch handled at once (1: strictly in order)",
    },
    EnvVar {
        name: "AUDIT_GRACE_SECS",
        read_by: &[ReadBy::Job(Job::Audit)],
        meaning: "a violation must persist this long before it is repaired",
    },
    EnvVar {
        name: "EMPTY_GROUP_GRACE_SECS",
        read_by: &[ReadBy::Job(Job::Audit)],
        meaning: "the same, for groups without members",
    },
    EnvVar {
        name: "EMPTY_GROUP_POLICY",
        read_by: &[ReadBy::Job(Job::Audit)],
        meaning: "delete or report empty groups",
    },
    EnvVar {
        name: "AUDIT_SEGMENTS",
        read_by: &[ReadBy::Job(Job::Audit)],
        meaning: "parallel scan segments of the audit",
    },
    EnvVar {
        name: "EXPIRY_HORIZON_DAYS",
        read_by: &[
            ReadBy::Stream,
            ReadBy::Job(Job::FlagExpiring),
            ReadBy::Job(Job::Backfill),
        ],
        meaning: "flag foods expiring up to the end of today + N days",
    },
    EnvVar {
        name: "EXPIRY_TIME_ZONE",
        read_by: &[
            ReadBy::Stream,
            ReadBy::Job(Job::FlagExpiring),
            ReadBy::Job(Job::Backfill),
        ],
        meaning: "IANA zone the days are counted in",
    },
    EnvVar {
        name: "FLAG_RETENTION_DAYS",
        read_by: &[
            ReadBy::Stream,
            ReadBy::Job(Job::FlagExpiring),
            ReadBy::Job(Job::Backfill),
        ],
        meaning: "flags vanish (TTL) this long after the food expired",
    },
    EnvVar {
        name: "NOTIFY_EVENT_BUS",
        read_by: &[ReadBy::Job(Job::FlagExpiring)],
        meaning: "EventBridge bus for FoodsNearingExpiry events",
    },
    EnvVar {
        name: "INVITATION_TTL",
        read_by: &[ReadBy::Stream],
        meaning: "on: stamp WorkerExpiresAt on invitation links for TTL",
    },
    EnvVar {
        name: "WORKER_JOB",
        read_by: &[ReadBy::Schedule],
        meaning: "the one job a schedule function runs",
    },
    EnvVar {
        name: "LOG_FORMAT",
        read_by: &[ReadBy::All],
        meaning: "json or text log lines (src/telemetry.rs)",
    },
    EnvVar {
        name: "RUST_LOG",
        read_by: &[ReadBy::All],
        meaning: "log filter (src/telemetry.rs)",
    },
];

/// A configuration value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {reason}")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: String,
    pub reason: String,
}

/// What to do with a group nobody belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyGroupPolicy {
    /// Delete it (with its containers, links, invitation and flags) after the grace period.
    Delete,
    /// Only report it.
    Report,
}

impl FromStr for EmptyGroupPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delete" => Ok(EmptyGroupPolicy::Delete),
            "report" => Ok(EmptyGroupPolicy::Report),
            _ => Err("expected delete or report".into()),
        }
    }
}

/// Everything the jobs are configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub table_name: String,
    pub endpoint_url: Option<String>,
    pub deadline_margin: Duration,
    /// Items of a stream batch handled at once (at least 1).
    pub stream_concurrency: usize,
    pub audit_grace: Duration,
    pub empty_group_grace: Duration,
    pub empty_group_policy: EmptyGroupPolicy,
    pub audit_segments: u32,
    pub expiry_horizon_days: u32,
    pub expiry_time_zone: Tz,
    pub flag_retention_days: u32,
    pub notify_event_bus: Option<String>,
    pub invitation_ttl: bool,
    /// `WORKER_JOB`: the one job this process runs schedule ticks for
    /// (`None`: any job).
    pub job: Option<Job>,
}

impl Config {
    /// Defaults for a table (used by tests and the CLI).
    pub fn for_table(table_name: impl Into<String>) -> Self {
        Config {
            table_name: table_name.into(),
            endpoint_url: None,
            deadline_margin: Duration::from_millis(2000),
            stream_concurrency: worker_engine::stream::engine::DEFAULT_CONCURRENCY,
            audit_grace: Duration::from_secs(3600),
            empty_group_grace: Duration::from_secs(86_400),
            empty_group_policy: EmptyGroupPolicy::Delete,
            audit_segments: 4,
            expiry_horizon_days: 3,
            expiry_time_zone: Tz::UTC,
            flag_retention_days: 7,
            notify_event_bus: None,
            invitation_ttl: false,
            job: None,
        }
    }

    /// Read the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the configuration through `lookup` (testable without touching
    /// the process environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let table = lookup("TABLE_NAME")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ConfigError {
                name: "TABLE_NAME",
                value: String::new(),
                reason: "required: the table to work on, e.g. nishiki-table-dev-db".into(),
            })?;
        let mut c = Config::for_table(table);
        c.endpoint_url = lookup("DYNAMODB_ENDPOINT_URL").filter(|s| !s.is_empty());
        let parse = |name: &'static str| -> Result<Option<u64>, ConfigError> {
            lookup(name)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| ConfigError {
                        name,
                        value: v.clone(),
                        reason: "expected a whole number".into(),
                    })
                })
                .transpose()
        };
        if let Some(v) = parse("DEADLINE_MARGIN_MS")? {
            c.deadline_margin = Duration::from_millis(v);
        }
        if let Some(v) = parse("STREAM_CONCURRENCY")? {
            c.stream_concurrency = v.clamp(1, MAX_STREAM_CONCURRENCY as u64) as usize;
        }
        if let Some(v) = parse("AUDIT_GRACE_SECS")? {
            c.audit_grace = Duration::from_secs(v);
        }
        if let Some(v) = parse("EMPTY_GROUP_GRACE_SECS")? {
            c.empty_group_grace = Duration::from_secs(v);
        }
        if let Some(v) = parse("AUDIT_SEGMENTS")? {
            c.audit_segments = v.clamp(1, 64) as u32;
        }
        if let Some(v) = parse("EXPIRY_HORIZON_DAYS")? {
            c.expiry_horizon_days = v.min(365) as u32;
        }
        if let Some(v) = parse("FLAG_RETENTION_DAYS")? {
            c.flag_retention_days = v.min(3650) as u32;
        }
        if let Some(v) = lookup("EMPTY_GROUP_POLICY") {
            c.empty_group_policy = v.parse().map_err(|reason| ConfigError {
                name: "EMPTY_GROUP_POLICY",
                value: v.clone(),
                reason,
            })?;
        }
        if let Some(v) = lookup("EXPIRY_TIME_ZONE") {
            c.expiry_time_zone = v.parse().map_err(|_| ConfigError {
                name: "EXPIRY_TIME_ZONE",
                value: v.clone(),
                reason: "expected an IANA time zone such as UTC or Asia/Tokyo".into(),
            })?;
        }
        c.notify_event_bus = lookup("NOTIFY_EVENT_BUS").filter(|s| !s.is_empty());
        if let Some(v) = lookup("INVITATION_TTL") {
            c.invitation_ttl = match v.as_str() {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" | "" => false,
                _ => {
                    return Err(ConfigError {
                        name: "INVITATION_TTL",
                        value: v,
                        reason: "expected on or off".into(),
                    });
                }
            };
        }
        if let Some(v) = lookup("WORKER_JOB").filter(|s| !s.is_empty()) {
            c.job = Some(v.parse().map_err(|_| ConfigError {
                name: "WORKER_JOB",
                value: v.clone(),
                reason: format!("expected one of {}", Job::ALL.map(Job::as_str).join(", ")),
            })?);
        }
        Ok(c)
    }
}

/// Where jobs read the time from (injected, so tests and `--now` control it).
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The real time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that can be set and moved by hand.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<std::sync::Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(std::sync::Mutex::new(at)))
    }
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = at;
    }
    pub fn advance(&self, by: chrono::Duration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_need_only_the_table() {
        let c = from(&[("TABLE_NAME", "nishiki-table-dev-db")]).unwrap();
        assert_eq!(c, Config::for_table("nishiki-table-dev-db"));
        assert_eq!(c.expiry_horizon_days, 3);
        assert_eq!(c.empty_group_policy, EmptyGroupPolicy::Delete);
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
        ])
        .unwrap();
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(c.deadline_margin, Duration::from_millis(500));
        assert_eq!(c.stream_concurrency, 4);
        assert_eq!(c.audit_grace, Duration::from_secs(60));
        assert_eq!(c.empty_group_grace, Duration::from_secs(120));
        assert_eq!(c.empty_group_policy, EmptyGroupPolicy::Report);
        assert_eq!(c.audit_segments, 8);
        assert_eq!(c.expiry_horizon_days, 5);
        assert_eq!(c.expiry_time_zone, chrono_tz::Asia::Tokyo);
        assert_eq!(c.flag_retention_days, 2);
        assert_eq!(c.notify_event_bus.as_deref(), Some("bus"));
        assert!(c.invitation_ttl);
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
        assert_eq!(c.job, Some(Job::Audit));
        let e = from(&[("TABLE_NAME", "t"), ("WORKER_JOB", "dance")]).unwrap_err();
        assert_eq!(e.name, "WORKER_JOB");
        assert!(e.to_string().contains("sweep-invitations"));
    }

    /// Every variable `Config::from_lookup` asks for is declared in
    /// [`ENV_VARS`] (and the declaration names no variable twice).
    #[test]
    fn every_variable_read_is_declared() {
        let asked = std::sync::Mutex::new(Vec::<String>::new());
        Config::from_lookup(|name| {
            asked.lock().unwrap().push(name.to_owned());
            (name == "TABLE_NAME").then(|| "t".to_owned())
        })
        .unwrap();
        let declared: Vec<&str> = ENV_VARS.iter().map(|v| v.name).collect();
        for name in asked.into_inner().unwrap() {
            assert!(
                declared.contains(&name.as_str()),
                "{name} is not in ENV_VARS"
            );
        }
        let mut unique = declared.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), declared.len());
        let stream_reads = |n: &str| {
            ENV_VARS
                .iter()
                .find(|v| v.name == n)
                .unwrap()
                .is_read_by(None)
        };
        assert!(stream_reads("TABLE_NAME") && stream_reads("INVITATION_TTL"));
        assert!(!stream_reads("AUDIT_GRACE_SECS") && !stream_reads("WORKER_JOB"));
    }

    #[test]
    fn manual_clock_moves() {
        let t0 = "2024-03-25T00:00:00Z".parse().unwrap();
        let c = ManualClock::new(t0);
        c.advance(chrono::Duration::hours(1));
        assert_eq!(c.now(), t0 + chrono::Duration::hours(1));
    }
}
