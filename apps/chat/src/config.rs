//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `USERS_TABLE` | (required) | all | the Users table |
//! | `COMMUNITIES_TABLE` | (required) | all | the Communities table |
//! | `NOTIFICATIONS_TABLE` | (required) | all | the Notifications table |
//! | `GROUP_CHATS_TABLE` | (required) | all | the GroupChats table |
//! | `PRIVATE_CHATS_TABLE` | (required) | all | the PrivateChats table |
//! | `CHAT_REQUESTS_TABLE` | (required) | all | the ChatRequests table |
//! | `DYNAMODB_ENDPOINT_URL` | AWS | local runs | another endpoint (DynamoDB Local) |
//! | `DEADLINE_MARGIN_MS` | `2000` | all | stop this long before the Lambda deadline |
//! | `STREAM_CONCURRENCY` | `1000` | stream | items of a batch handled at once |
//! | `WORKER_JOB` | (any) | schedule | the one job a schedule function runs |
//! | `LOG_FORMAT`, `RUST_LOG` | `json`, `info` | all | logs (`worker_engine::telemetry`) |
//! | `REQUEST_EXPIRY_DAYS` | `30` | expire-requests | pending requests older than this expire |
//! | `TWIN_GRACE_MINUTES` | `60` | audit-requests | a copy's twin may be missing this long |
//!
//! [`COMMON_ENV`] and each job's `SPEC` declare the same list with who
//! reads each variable. Every function reads every table's name: the
//! stream function tells the tables' records apart by it.

use std::collections::BTreeMap;
use std::time::Duration;

use worker_engine::env::{ConfigError, Env};
use worker_engine::schedule::JobName;

use crate::keys::Job;
use crate::schema::Table;

pub type EnvVar = worker_engine::job::EnvVar<Job>;
pub type ReadBy = worker_engine::job::ReadBy<Job>;

pub const ENDPOINT: &str = "DYNAMODB_ENDPOINT_URL";
pub const DEADLINE_MARGIN_MS: &str = "DEADLINE_MARGIN_MS";
pub const STREAM_CONCURRENCY: &str = "STREAM_CONCURRENCY";
pub const WORKER_JOB: &str = "WORKER_JOB";
pub const REQUEST_EXPIRY_DAYS: &str = "REQUEST_EXPIRY_DAYS";
pub const TWIN_GRACE_MINUTES: &str = "TWIN_GRACE_MINUTES";

/// A larger `STREAM_CONCURRENCY` is clamped to this (the largest batch).
pub const MAX_STREAM_CONCURRENCY: usize = 10_000;

const fn table_var(t: Table, meaning: &'static str) -> EnvVar {
    EnvVar {
        name: t.env_var(),
        read_by: &[ReadBy::All],
        default: None,
        meaning,
    }
}

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = &[
    table_var(Table::Users, "the Users table"),
    table_var(Table::Communities, "the Communities table"),
    table_var(Table::Notifications, "the Notifications table"),
    table_var(Table::GroupChats, "the GroupChats table"),
    table_var(Table::PrivateChats, "the PrivateChats table"),
    table_var(Table::ChatRequests, "the ChatRequests table"),
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
    /// Each table's name.
    pub tables: BTreeMap<Table, String>,
    pub endpoint_url: Option<String>,
    pub deadline_margin: Duration,
    /// Items of a stream batch handled at once (at least 1).
    pub stream_concurrency: usize,
    /// `WORKER_JOB`: the one job this process runs ticks for.
    pub job: Option<Job>,
    pub expiry_days: u64,
    pub twin_grace_minutes: u64,
}

impl Settings {
    /// The defaults, on tables named by `name`.
    pub fn for_tables(name: impl Fn(Table) -> String) -> Self {
        Settings {
            tables: Table::ALL.iter().map(|t| (*t, name(*t))).collect(),
            endpoint_url: None,
            deadline_margin: Duration::from_millis(2000),
            stream_concurrency: worker_engine::stream::engine::DEFAULT_CONCURRENCY,
            job: None,
            expiry_days: 30,
            twin_grace_minutes: 60,
        }
    }

    /// The name of `table`.
    pub fn table(&self, table: Table) -> &str {
        &self.tables[&table]
    }

    /// Read the settings through `lookup` (the process environment on
    /// Lambda); errors name the variable and what a valid value is.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        let mut tables = BTreeMap::new();
        for t in Table::ALL {
            tables.insert(t, env.required(t.env_var(), "a table name")?);
        }
        let mut s = Settings::for_tables(|t| tables[&t].clone());
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
        if let Some(d) = env.number(REQUEST_EXPIRY_DAYS)? {
            s.expiry_days = d;
        }
        if let Some(m) = env.number(TWIN_GRACE_MINUTES)? {
            s.twin_grace_minutes = m;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let mut all: HashMap<String, String> = Table::ALL
            .iter()
            .map(|t| (t.env_var().to_owned(), format!("{}-prod", t.name())))
            .collect();
        for (k, v) in vars {
            if v.is_empty() {
                all.remove(*k);
            } else {
                all.insert(k.to_string(), v.to_string());
            }
        }
        Settings::from_lookup(&|k| all.get(k).cloned())
    }

    #[test]
    fn settings_from_the_environment() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, Settings::for_tables(|t| format!("{}-prod", t.name())));
        assert_eq!(s.table(Table::ChatRequests), "ChatRequests-prod");
        assert_eq!(s.expiry_days, 30);
        let s = settings(&[
            ("WORKER_JOB", "expire-requests"),
            ("REQUEST_EXPIRY_DAYS", "7"),
            ("TWIN_GRACE_MINUTES", "5"),
            ("STREAM_CONCURRENCY", "0"),
        ])
        .unwrap();
        assert_eq!(s.job, Some(Job::ExpireRequests));
        assert_eq!((s.expiry_days, s.twin_grace_minutes), (7, 5));
        assert_eq!(s.stream_concurrency, 1);
        let e = settings(&[("GROUP_CHATS_TABLE", "")]).unwrap_err();
        assert_eq!(e.name, "GROUP_CHATS_TABLE");
        let e = settings(&[("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("audit-requests"), "{e}");
        let e = settings(&[("REQUEST_EXPIRY_DAYS", "a month")]).unwrap_err();
        assert_eq!(e.name, "REQUEST_EXPIRY_DAYS");
    }
}
