//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `TABLE_NAME` | (required) | all | the shop table |
//! | `DYNAMODB_ENDPOINT_URL` | AWS | local runs | another endpoint (DynamoDB Local) |
//! | `DEADLINE_MARGIN_MS` | `2000` | all | stop this long before the Lambda deadline |
//! | `STREAM_CONCURRENCY` | `1000` | stream | items of a batch handled at once |
//! | `WORKER_JOB` | (any) | schedule | the one job a schedule function runs |
//! | `LOG_FORMAT`, `RUST_LOG` | `json`, `info` | all | logs (`worker_engine::telemetry`) |
//! | `STUCK_STATUSES` | `PENDING,PAID` | stuck-orders | the statuses an order can be stuck in |
//! | `STUCK_AFTER_HOURS` | `48` | stuck-orders | an order unchanged this long in one of them is stuck |
//! | `NOTIFY_EVENT_BUS` | (off) | stuck-orders | EventBridge bus of `OrderStuck` events |
//!
//! [`COMMON_ENV`] and each job's `SPEC` declare the same list with who
//! reads each variable.

use std::time::Duration;

use worker_engine::env::{ConfigError, Env};
use worker_engine::schedule::JobName;

use crate::keys::Job;
use crate::stuck::StuckSettings;

pub type EnvVar = worker_engine::job::EnvVar<Job>;
pub type ReadBy = worker_engine::job::ReadBy<Job>;

pub const TABLE_NAME: &str = "TABLE_NAME";
pub const ENDPOINT: &str = "DYNAMODB_ENDPOINT_URL";
pub const DEADLINE_MARGIN_MS: &str = "DEADLINE_MARGIN_MS";
pub const STREAM_CONCURRENCY: &str = "STREAM_CONCURRENCY";
pub const WORKER_JOB: &str = "WORKER_JOB";

/// A larger `STREAM_CONCURRENCY` is clamped to this (the largest batch).
pub const MAX_STREAM_CONCURRENCY: usize = 10_000;

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = &[
    EnvVar {
        name: TABLE_NAME,
        read_by: &[ReadBy::All],
        default: None,
        meaning: "the shop table",
    },
    EnvVar {
        name: ENDPOINT,
        read_by: &[ReadBy::LocalOnly],
        default: None,
        meaning: "another DynamoDB endpoint (DynamoDB Local)",
    },
    EnvVar {
        name: DEADLINE_MARGIN_MS,
        read_by: &[ReadBy::All],
        default: Some("2000"),
        meaning: "stop this long before the Lambda deadline",
    },
    EnvVar {
        name: STREAM_CONCURRENCY,
        read_by: &[ReadBy::Stream],
        default: Some("1000"),
        meaning: "items of a stream batch handled at once (1: strictly in order)",
    },
    EnvVar {
        name: WORKER_JOB,
        read_by: &[ReadBy::Schedule],
        default: None,
        meaning: "the one job a schedule function runs (a tick for another is refused)",
    },
    EnvVar {
        name: "LOG_FORMAT",
        read_by: &[ReadBy::All],
        default: Some("json"),
        meaning: "json or text log lines (worker_engine::telemetry)",
    },
    EnvVar {
        name: "RUST_LOG",
        read_by: &[ReadBy::All],
        default: Some("info"),
        meaning: "log filter (worker_engine::telemetry)",
    },
];

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
    pub stuck: StuckSettings,
}

impl Settings {
    /// The defaults, on `table_name`.
    pub fn for_table(table_name: impl Into<String>) -> Self {
        Settings {
            table_name: table_name.into(),
            endpoint_url: None,
            deadline_margin: Duration::from_millis(2000),
            stream_concurrency: worker_engine::stream::engine::DEFAULT_CONCURRENCY,
            job: None,
            stuck: StuckSettings::default(),
        }
    }

    /// Read the settings through `lookup` (the process environment on
    /// Lambda); errors name the variable and what a valid value is.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        let mut s = Settings::for_table(env.required(TABLE_NAME, "the shop table")?);
        s.endpoint_url = env.non_empty(ENDPOINT);
        if let Some(ms) = env.number(DEADLINE_MARGIN_MS)? {
            s.deadline_margin = Duration::from_millis(ms);
        }
        if let Some(n) = env.number(STREAM_CONCURRENCY)? {
            s.stream_concurrency = n.clamp(1, MAX_STREAM_CONCURRENCY as u64) as usize;
        }
        s.job = env.parse(WORKER_JOB, |v| {
            Job::parse(v).ok_or(format!("expected one of {}", Job::known()))
        })?;
        s.stuck = StuckSettings::from_env(&env)?;
        Ok(s)
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
        let s = settings(&[("TABLE_NAME", "shop")]).unwrap();
        assert_eq!(s, Settings::for_table("shop"));
        assert_eq!(s.stuck.statuses, ["PENDING", "PAID"]);
        assert_eq!(s.stuck.after_hours, 48);
        let s = settings(&[
            ("TABLE_NAME", "shop"),
            ("WORKER_JOB", "stuck-orders"),
            ("STUCK_STATUSES", " SHIPPED , PAID ,"),
            ("STUCK_AFTER_HOURS", "6"),
            ("NOTIFY_EVENT_BUS", "bus"),
            ("STREAM_CONCURRENCY", "0"),
        ])
        .unwrap();
        assert_eq!(s.job, Some(Job::StuckOrders));
        assert_eq!(s.stuck.statuses, ["SHIPPED", "PAID"]);
        assert_eq!(s.stuck.after_hours, 6);
        assert_eq!(s.stuck.event_bus.as_deref(), Some("bus"));
        assert_eq!(s.stream_concurrency, 1);
        let e = settings(&[]).unwrap_err();
        assert_eq!(e.name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("stuck-orders"), "{e}");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_AFTER_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "STUCK_AFTER_HOURS");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_STATUSES", "A#B")]).unwrap_err();
        assert_eq!(e.name, "STUCK_STATUSES");
    }
}
