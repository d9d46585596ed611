//! The variables every app's functions read, whatever its jobs: the table,
//! a local endpoint, the deadline margin, the stream concurrency and the
//! job a schedule function is pinned to, and the parking table of the
//! stream function ([`crate::park`]). An app declares them with
//! [`common_env!`](crate::common_env) (its `AppSpec::env`) and reads them
//! with [`CommonSettings::from_env`], then adds its jobs' own: its
//! settings are a [`Settings`], the common ones and its [`JobSettings`].

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::env::{ConfigError, Env};
use crate::park::ParkingSettings;
use crate::schedule::JobName;

/// The app's table (its home table when it has several); required.
pub const TABLE_NAME: &str = "TABLE_NAME";
/// The project's alias of `AWS_ENDPOINT_URL_DYNAMODB`
/// ([`crate::aws::endpoint_from_env`] reads both, and `AWS_ENDPOINT_URL`).
pub const ENDPOINT: &str = crate::aws::DYNAMODB_ENDPOINT_ALIAS;
/// Milliseconds before the Lambda deadline at which batches and jobs stop
/// starting work ([`CommonSettings::deadline_margin`]); default 2000.
pub const DEADLINE_MARGIN_MS: &str = "DEADLINE_MARGIN_MS";
/// Items of a stream batch handled at once
/// ([`CommonSettings::stream_concurrency`]); `1`: strictly in order.
pub const STREAM_CONCURRENCY: &str = "STREAM_CONCURRENCY";
/// The one job a schedule function runs ([`CommonSettings::job`]); a tick
/// naming another is refused.
pub const WORKER_JOB: &str = "WORKER_JOB";

/// A larger `STREAM_CONCURRENCY` is clamped to this (the largest batch).
pub(crate) const MAX_STREAM_CONCURRENCY: usize = 10_000;

/// The variables every function reads, as an app's `&[EnvVar<J>]`:
/// `common_env!(Job, "the orders table")` (the text says what `TABLE_NAME`
/// names).
///
/// An app of several tables names each by a variable of its own instead of
/// `TABLE_NAME`: `common_env!(Job; USERS, ORDERS)` lists its `EnvVar`s first,
/// then the others (read with `CommonSettings::from_env_on`).
#[macro_export]
macro_rules! common_env {
    ($job:ty, $table:expr) => {
        $crate::common_env!($job;
            $crate::EnvVar::<$job> {
                name: $crate::settings::TABLE_NAME,
                read_by: &[$crate::ReadBy::All],
                default: None,
                meaning: $table,
            }
        )
    };
    ($job:ty; $($first:expr),+ $(,)?) => {
        &[
            $($first,)+
            $crate::EnvVar::<$job> {
                name: $crate::aws::DYNAMODB_ENDPOINT_URL,
                read_by: &[$crate::ReadBy::LocalOnly],
                default: None,
                meaning: "another DynamoDB endpoint (DynamoDB Local); the SDK's variable",
            },
            $crate::EnvVar::<$job> {
                name: $crate::settings::ENDPOINT,
                read_by: &[$crate::ReadBy::LocalOnly],
                default: None,
                meaning: "alias of AWS_ENDPOINT_URL_DYNAMODB",
            },
            $crate::EnvVar::<$job> {
                name: $crate::aws::ENDPOINT_URL,
                read_by: &[$crate::ReadBy::LocalOnly],
                default: None,
                meaning: "every service's endpoint where its own AWS_ENDPOINT_URL_<SERVICE> is unset; the SDK's variable",
            },
            $crate::EnvVar::<$job> {
                name: $crate::clock::NOW_VAR,
                read_by: &[$crate::ReadBy::LocalOnly],
                default: None,
                meaning: "a fixed clock (RFC 3339) for a local run against a table on this machine",
            },
            $crate::EnvVar::<$job> {
                name: $crate::aws::IGNORE_ENDPOINT_URLS,
                read_by: &[$crate::ReadBy::LocalOnly],
                default: Some("false"),
                meaning: "true: ignore every AWS_ENDPOINT_URL* variable; the SDK's variable",
            },
            $crate::EnvVar::<$job> {
                name: $crate::settings::DEADLINE_MARGIN_MS,
                read_by: &[$crate::ReadBy::All],
                default: Some("2000"),
                meaning: "stop this long before the Lambda deadline",
            },
            $crate::EnvVar::<$job> {
                name: $crate::settings::STREAM_CONCURRENCY,
                read_by: &[$crate::ReadBy::Stream],
                default: Some("1000"),
                meaning: "items of a stream batch handled at once (1: strictly in order)",
            },
            $crate::EnvVar::<$job> {
                name: $crate::settings::WORKER_JOB,
                read_by: &[$crate::ReadBy::Schedule],
                default: None,
                meaning: "the one job a schedule function runs (a tick for another is refused)",
            },
            $crate::park::ParkingSettings::env_vars::<$job>()[0],
            $crate::park::ParkingSettings::env_vars::<$job>()[1],
            $crate::EnvVar::<$job> {
                name: "LOG_FORMAT",
                read_by: &[$crate::ReadBy::LocalOnly],
                default: Some("json"),
                meaning: "json or text log lines, local runs (Lambda: LoggingConfig, worker_engine::telemetry)",
            },
            $crate::EnvVar::<$job> {
                name: "RUST_LOG",
                read_by: &[$crate::ReadBy::LocalOnly],
                default: Some("info"),
                meaning: "log filter, local runs (Lambda: LoggingConfig, worker_engine::telemetry)",
            },
        ]
    };
}

/// What the common variables configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonSettings<J> {
    /// The table the worker's own store is opened on (`TABLE_NAME`, or the
    /// home table's variable of an app of several tables).
    pub table_name: String,
    /// Another DynamoDB endpoint (DynamoDB Local), from
    /// `AWS_ENDPOINT_URL_DYNAMODB`, [`ENDPOINT`] or `AWS_ENDPOINT_URL`;
    /// `None`: AWS.
    pub endpoint_url: Option<String>,
    /// Stop starting work this long before the Lambda deadline
    /// (`DEADLINE_MARGIN_MS`; default 2 s).
    pub deadline_margin: Duration,
    /// Items of a stream batch handled at once (1 to
    /// `MAX_STREAM_CONCURRENCY`).
    pub stream_concurrency: usize,
    /// `WORKER_JOB`: the one job this process runs ticks for.
    pub job: Option<J>,
    /// Where the stream function parks records that fail for good (`None`:
    /// `PARKING_TABLE` unset, they are logged and counted only).
    pub parking: Option<ParkingSettings>,
}

impl<J: JobName> CommonSettings<J> {
    /// The defaults, on `table_name`.
    pub fn for_table(table_name: impl Into<String>) -> Self {
        CommonSettings {
            table_name: table_name.into(),
            endpoint_url: None,
            deadline_margin: Duration::from_millis(2000),
            stream_concurrency: crate::stream::engine::DEFAULT_CONCURRENCY,
            job: None,
            parking: None,
        }
    }

    /// Read them; `table` says what `TABLE_NAME` names (in the error when
    /// it is missing). Errors name the variable and a valid value.
    pub fn from_env(env: &Env, table: &str) -> Result<Self, ConfigError> {
        Self::from_env_on(env, env.required(TABLE_NAME, table)?)
    }

    /// Read them but `TABLE_NAME`, on `table_name`: an app of several tables
    /// reads their variables itself (`common_env!(Job; ...)`) and names the
    /// one its worker's own store is opened on.
    pub(crate) fn from_env_on(env: &Env, table_name: String) -> Result<Self, ConfigError> {
        let mut s = CommonSettings::for_table(table_name);
        s.endpoint_url = crate::aws::endpoint_from_env("DynamoDB", |n| env.non_empty(n));
        if let Some(ms) = env.number(DEADLINE_MARGIN_MS)? {
            s.deadline_margin = Duration::from_millis(ms);
        }
        if let Some(n) = env.number(STREAM_CONCURRENCY)? {
            s.stream_concurrency = n.clamp(1, MAX_STREAM_CONCURRENCY as u64) as usize;
        }
        s.job = env.parse(WORKER_JOB, |v| {
            J::parse(v).ok_or(format!("expected one of {}", J::known()))
        })?;
        s.parking = ParkingSettings::from_env(env)?;
        Ok(s)
    }
}

/// What a required table variable names, in the error when it is missing
/// (unless the app says more).
pub(crate) const A_TABLE_NAME: &str = "a table name";

/// The settings of an app's own jobs, read from the same variables as the
/// [`CommonSettings`] (the second half of its [`Settings`]): a struct of
/// each job's, the one job's settings themselves, or `()` for none.
pub trait JobSettings: Sized + Default {
    /// What `TABLE_NAME` names, in the error when it is missing.
    const TABLE: &'static str = A_TABLE_NAME;
    /// Read them; errors name the variable and what a valid value is. By
    /// default none are read (an app whose jobs have no settings).
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let _ = env;
        Ok(Self::default())
    }
    /// The table the worker's own store is opened on: `TABLE_NAME`,
    /// required, by default. An app of several tables
    /// ([`crate::TableSet`]) reads its home table's variable instead.
    fn table_name(env: &Env) -> Result<String, ConfigError> {
        env.required(TABLE_NAME, Self::TABLE)
    }
}

/// Everything an app's worker is configured with: the variables every app
/// reads (`settings.common`) and its jobs' own, `S` (dereferenced:
/// `settings.event_bus` is `S`'s `event_bus`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings<J, S> {
    /// The variables every app reads.
    pub common: CommonSettings<J>,
    /// The app's jobs' own settings (what `Settings` dereferences to).
    pub own: S,
}

impl<J: JobName, S: JobSettings> Settings<J, S> {
    /// The defaults, on `table_name`.
    pub fn for_table(table_name: impl Into<String>) -> Self {
        Settings {
            common: CommonSettings::for_table(table_name),
            own: S::default(),
        }
    }

    /// Read them through `lookup` (the process environment on Lambda, the
    /// command line's `--env`, a test's map); errors name the variable and
    /// what a valid value is.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        Ok(Settings {
            common: CommonSettings::from_env_on(&env, S::table_name(&env)?)?,
            own: S::from_env(&env)?,
        })
    }

    /// Read them from the process environment (Lambda).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }
}

/// No settings of the app's own.
impl JobSettings for () {}

impl<J, S> Deref for Settings<J, S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.own
    }
}

impl<J, S> DerefMut for Settings<J, S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::EnvVar;
    use std::collections::HashMap;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
    enum Job {
        Sweep,
    }

    impl JobName for Job {
        const ALL: &'static [Job] = &[Job::Sweep];
        fn as_str(self) -> &'static str {
            "sweep"
        }
    }

    impl std::fmt::Display for Job {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.as_str())
        }
    }

    const ENV: &[EnvVar<Job>] = common_env!(Job, "the notes table");

    fn read(vars: &[(&str, &str)]) -> Result<CommonSettings<Job>, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = |k: &str| vars.get(k).cloned();
        CommonSettings::from_env(&Env::new(&lookup), "the notes table")
    }

    #[test]
    fn the_common_variables() {
        assert_eq!(ENV.len(), 13);
        assert!(ENV[0].is_read_by(None) && ENV[0].is_read_by(Some(Job::Sweep)));
        assert!(ENV[1].local_only());
        // The parking table is the stream function's; logs are set by
        // Lambda's LoggingConfig when deployed.
        let parking = ENV.iter().find(|v| v.name == "PARKING_TABLE").unwrap();
        assert!(parking.is_read_by(None) && !parking.is_read_by(Some(Job::Sweep)));
        assert!(
            ENV.iter()
                .filter(|v| v.name == "RUST_LOG" || v.name == "LOG_FORMAT")
                .all(|v| v.local_only())
        );
        // Several tables: their own variables first, instead of TABLE_NAME.
        const TABLES: &[EnvVar<Job>] = common_env!(Job;
            EnvVar { name: "NOTES_TABLE", read_by: &[crate::job::ReadBy::All], default: None, meaning: "notes" },
            EnvVar { name: "TAGS_TABLE", read_by: &[crate::job::ReadBy::All], default: None, meaning: "tags" },
        );
        let names: Vec<&str> = TABLES.iter().map(|v| v.name).collect();
        assert_eq!(&names[..2], ["NOTES_TABLE", "TAGS_TABLE"]);
        assert_eq!(
            names[2..],
            ENV[1..].iter().map(|v| v.name).collect::<Vec<_>>()[..]
        );
        assert_eq!(
            read(&[("TABLE_NAME", "t")]).unwrap(),
            CommonSettings::for_table("t")
        );
        let s = read(&[
            ("TABLE_NAME", "t"),
            ("WORKER_JOB", "sweep"),
            ("STREAM_CONCURRENCY", "0"),
            ("DEADLINE_MARGIN_MS", "500"),
        ])
        .unwrap();
        assert_eq!((s.job, s.stream_concurrency), (Some(Job::Sweep), 1));
        assert_eq!(s.deadline_margin, Duration::from_millis(500));
        assert_eq!(s.parking, None);
        let parked = read(&[("TABLE_NAME", "t"), ("PARKING_TABLE", "p")]).unwrap();
        assert_eq!(parked.parking.map(|p| p.table), Some("p".to_owned()));
        assert_eq!(read(&[]).unwrap_err().name, "TABLE_NAME");
        let lookup = |k: &str| (k == "PARKING_TABLE").then(|| "parked".to_owned());
        let s = CommonSettings::<Job>::from_env_on(&Env::new(&lookup), "notes".into()).unwrap();
        assert_eq!(s.table_name, "notes");
        assert_eq!(s.parking.map(|p| p.table).as_deref(), Some("parked"));
        let e = read(&[("TABLE_NAME", "t"), ("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("sweep"), "{e}");
    }
}
