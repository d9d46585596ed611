//! Schedule ticks: parsing both EventBridge shapes and running the job a
//! tick names. An app names its jobs with a type of its own ([`JobName`]:
//! usually an enum), so a tick for a job the app does not have is refused
//! when it is parsed.
//!
//! Accepted input:
//! - EventBridge Scheduler input (our own JSON, no envelope):
//!   `{"job": "<name>", "scheduledTime": "<aws.scheduler.scheduled-time>"}`;
//! - an EventBridge rule envelope (`"detail-type": "Scheduled Event"`): the
//!   job is `detail.job`, or else the job name the rule's name ends with
//!   (`arn:...:rule/my-worker-<name>`); the scheduled time is `time`.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::error::HandlerError;

/// The jobs of an app: a closed set of names, as used on the command line,
/// in schedule input and in checkpoint keys.
pub trait JobName:
    Copy + Eq + Hash + Ord + fmt::Debug + fmt::Display + Serialize + Send + Sync + 'static
{
    /// Every job, in the order they are listed to a user.
    const ALL: &'static [Self];
    /// The job's name.
    fn as_str(self) -> &'static str;

    /// The job named `name`, if any.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|j| j.as_str() == name)
    }

    /// Every name, comma-separated (for error texts).
    fn known() -> String {
        Self::ALL
            .iter()
            .map(|j| j.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Declares an app's jobs: the enum, each variant with its name (as used on
/// the command line, in schedule input and in checkpoint keys), and its
/// [`JobName`], `Display` and `Serialize` (as the name). `ALL` (an array)
/// and `as_str` are also the enum's own, usable without the trait in scope.
///
/// ```
/// worker_engine::job_names! {
///     /// The scheduled jobs of the notes worker.
///     pub enum Job {
///         /// Deletes notes past their expiry.
///         PurgeExpired = "purge-expired",
///         Reindex = "reindex",
///     }
/// }
/// assert_eq!(Job::ALL.map(Job::as_str), ["purge-expired", "reindex"]);
/// use worker_engine::schedule::JobName;
/// assert_eq!(Job::parse("purge-expired"), Some(Job::PurgeExpired));
/// assert_eq!(<Job as JobName>::ALL, &Job::ALL);
/// assert_eq!(Job::Reindex.to_string(), "reindex");
/// assert_eq!(serde_json::to_string(&Job::ALL).unwrap(), r#"["purge-expired","reindex"]"#);
/// ```
#[macro_export]
macro_rules! job_names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every job, in the order they are listed to a user.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The job's name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl $crate::schedule::JobName for $name {
            const ALL: &'static [$name] = &$name::ALL;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::schedule::JobName::as_str(*self))
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str($crate::schedule::JobName::as_str(*self))
            }
        }
    };
}

/// Where a tick came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TickSource {
    /// An EventBridge Scheduler target's input (`{"job": ...}`).
    Scheduler,
    /// An EventBridge rule's `Scheduled Event`.
    Rule,
    /// The command line.
    Manual,
}

/// One schedule tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tick<J: JobName> {
    /// The job to run.
    pub job: J,
    /// When the tick was due, as the event says (`scheduledTime` or `time`
    /// of the input, a rule event's `time`); `None` when it does not say
    /// (a manual run, an input without it). Jobs read the time from
    /// [`JobRun::now`], not from here.
    pub scheduled_time: Option<DateTime<Utc>>,
    /// Which shape of event it came in.
    pub source: TickSource,
}

/// A schedule event that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TickError {
    #[error(
        "not a schedule event: expected {{\"job\": ...}} or an EventBridge \"Scheduled Event\""
    )]
    /// Neither shape of schedule event: no `job` key and no `detail-type`
    /// `Scheduled Event`.
    NotASchedule,
    /// The event names no job, or not as a string: set `job` in the
    /// target's input or the rule's detail.
    #[error("no job named: set \"job\" to one of {known} (in the input or the rule's detail)")]
    NoJob {
        /// The job names the app knows, listed for the message.
        known: String,
    },
    /// The event names a job the app does not have.
    #[error("unknown job {name:?}: expected one of {known}")]
    UnknownJob {
        /// The name the event gave.
        name: String,
        /// The job names the app knows, listed for the message.
        known: String,
    },
    /// The input's `scheduledTime` (or `time`) is not an RFC 3339 time; it
    /// holds the value as given.
    #[error("bad scheduled time {0:?}: expected RFC 3339, e.g. 2024-03-25T00:00:00Z")]
    BadTime(String),
    /// A `Scheduled Event` that does not parse as an EventBridge event;
    /// it holds the parser's message.
    #[error("malformed EventBridge envelope: {0}")]
    Envelope(String),
}

/// Whether a JSON value looks like a schedule event of either shape.
pub fn is_schedule_event(v: &Value) -> bool {
    v.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event")
        || (v.get("job").is_some() && v.get("Records").is_none())
}

/// Parse a tick from either shape.
pub fn parse_tick<J: JobName>(v: &Value) -> Result<Tick<J>, TickError> {
    let unknown = |name: String| TickError::UnknownJob {
        name,
        known: J::known(),
    };
    if v.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
        let ev: EventBridgeEvent<Value> =
            serde_json::from_value(v.clone()).map_err(|e| TickError::Envelope(e.to_string()))?;
        let from_detail = ev
            .detail
            .get("job")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let from_rule = ev.resources.as_ref().and_then(|rs| {
            rs.iter().find_map(|arn| {
                let rule = arn.rsplit('/').next()?;
                J::ALL
                    .iter()
                    .find(|j| rule.ends_with(j.as_str()))
                    .map(|j| j.as_str().to_owned())
            })
        });
        let name = from_detail
            .or(from_rule)
            .ok_or_else(|| TickError::NoJob { known: J::known() })?;
        return Ok(Tick {
            job: J::parse(&name).ok_or_else(|| unknown(name))?,
            scheduled_time: ev.time.map(|t| t.to_utc()),
            source: TickSource::Rule,
        });
    }
    let Some(obj) = v.as_object().filter(|o| o.contains_key("job")) else {
        return Err(TickError::NotASchedule);
    };
    let name = obj["job"]
        .as_str()
        .ok_or_else(|| TickError::NoJob { known: J::known() })?;
    let job = J::parse(name).ok_or_else(|| unknown(name.to_owned()))?;
    let scheduled_time = match obj.get("scheduledTime").or_else(|| obj.get("time")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            DateTime::parse_from_rfc3339(s)
                .map_err(|_| TickError::BadTime(s.clone()))?
                .to_utc(),
        ),
        Some(other) => return Err(TickError::BadTime(other.to_string())),
    };
    Ok(Tick {
        job,
        scheduled_time,
        source: TickSource::Scheduler,
    })
}

/// The time budget and clock of one job run.
#[derive(Debug, Clone)]
pub struct JobRun<J: JobName> {
    /// The time the job sees as "now".
    pub now: DateTime<Utc>,
    /// The tick that started the run.
    pub tick: Tick<J>,
    /// When the run must have stopped (the Lambda deadline), if any.
    pub deadline: Option<Instant>,
    /// Stop this long before the deadline.
    pub margin: Duration,
}

impl<J: JobName> JobRun<J> {
    /// Whether there is still time to start another unit of work.
    pub fn has_time(&self) -> bool {
        match self.deadline {
            None => true,
            Some(d) => d.saturating_duration_since(Instant::now()) > self.margin,
        }
    }
}

/// What a job run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobReport<J: JobName> {
    /// The job that ran.
    pub job: J,
    /// False when the run stopped early (deadline); the next tick continues.
    pub complete: bool,
    /// One line for logs and the CLI.
    pub summary: String,
    /// The job's own figures.
    pub details: Value,
    /// The job's own metrics, typed (written with the run counters; not
    /// part of the report's JSON, which `details` already carries).
    #[serde(skip)]
    pub metrics: Vec<crate::metrics::Metric>,
}

/// A job run on a schedule. Must be idempotent per tick: a tick may be
/// delivered twice, and a run stopped at its deadline
/// ([`JobRun::has_time`]) is continued by the next tick.
///
/// A job of a notes app that reports how late its tick ran, parsed from
/// the Scheduler's input and run by a [`Scheduler`] (a real job reads and
/// writes through its [`Store`](crate::Store)):
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use worker_engine::{HandlerError, JobReport, JobRun, ScheduledJob, async_trait, job_names};
/// use worker_engine::schedule::{Scheduler, parse_tick};
///
/// job_names! {
///     pub enum Job { PurgeExpired = "purge-expired" }
/// }
///
/// struct PurgeExpired;
///
/// #[async_trait]
/// impl ScheduledJob<Job> for PurgeExpired {
///     fn job(&self) -> Job { Job::PurgeExpired }
///     async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
///         let late = run.tick.scheduled_time.map(|t| (run.now - t).num_seconds());
///         Ok(JobReport {
///             job: self.job(),
///             complete: run.has_time(),
///             summary: format!("0 notes purged ({} s late)", late.unwrap_or(0)),
///             details: serde_json::json!({ "purged": 0 }),
///             metrics: Vec::new(),
///         })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let tick = parse_tick::<Job>(&serde_json::json!({
///     "job": "purge-expired", "scheduledTime": "2024-03-25T00:15:00Z"
/// })).unwrap();
/// let run = JobRun {
///     now: "2024-03-25T00:15:02Z".parse().unwrap(),
///     tick,
///     deadline: None,
///     margin: Duration::from_secs(2),
/// };
/// let scheduler = Scheduler::default().with(Arc::new(PurgeExpired));
/// let report = scheduler.run(&run).await.unwrap();
/// assert_eq!(report.summary, "0 notes purged (2 s late)");
/// assert!(report.complete);
/// # }
/// ```
#[async_trait]
pub trait ScheduledJob<J: JobName>: Send + Sync {
    /// The job's name: the [`Scheduler`] runs this job for its ticks.
    fn job(&self) -> J;
    /// Run once: start a unit of work only while [`JobRun::has_time`], and
    /// report `complete: false` when work remains (the next tick goes on).
    /// Errors: a [`HandlerError`]; the invocation fails (an environment
    /// fault as `EnvironmentFault`).
    async fn run(&self, run: &JobRun<J>) -> Result<JobReport<J>, HandlerError>;
}

/// The scheduled jobs, by name.
#[derive(Clone)]
pub struct Scheduler<J: JobName> {
    jobs: HashMap<J, Arc<dyn ScheduledJob<J>>>,
}

impl<J: JobName> Default for Scheduler<J> {
    fn default() -> Self {
        Scheduler {
            jobs: HashMap::new(),
        }
    }
}

impl<J: JobName> Scheduler<J> {
    /// Add `job` under [`ScheduledJob::job`], replacing a job of the same
    /// name.
    pub fn with(mut self, job: Arc<dyn ScheduledJob<J>>) -> Self {
        self.jobs.insert(job.job(), job);
        self
    }

    /// The names of the jobs it runs, sorted.
    pub fn jobs(&self) -> Vec<J> {
        let mut v: Vec<_> = self.jobs.keys().copied().collect();
        v.sort();
        v
    }

    /// Run the job of a tick.
    pub async fn run(&self, run: &JobRun<J>) -> Result<JobReport<J>, HandlerError> {
        let job = self.jobs.get(&run.tick.job).ok_or_else(|| {
            HandlerError::invalid(format!(
                "job {} is not available in this build",
                run.tick.job
            ))
        })?;
        let report = job.run(run).await?;
        tracing::info!(
            job = %report.job,
            complete = report.complete,
            details = %report.details,
            "{}",
            report.summary
        );
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An app's jobs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
    enum Job {
        Sweep,
        Audit,
        Compact,
    }

    impl fmt::Display for Job {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.as_str())
        }
    }

    impl JobName for Job {
        const ALL: &'static [Job] = &[Job::Sweep, Job::Audit, Job::Compact];
        fn as_str(self) -> &'static str {
            match self {
                Job::Sweep => "sweep",
                Job::Audit => "audit",
                Job::Compact => "compact-daily",
            }
        }
    }

    fn parse(v: &Value) -> Result<Tick<Job>, TickError> {
        parse_tick(v)
    }

    #[test]
    fn scheduler_input() {
        let t = parse(&json!({"job": "sweep", "scheduledTime": "2024-03-25T00:15:00Z"})).unwrap();
        assert_eq!(t.job, Job::Sweep);
        assert_eq!(
            t.scheduled_time,
            Some("2024-03-25T00:15:00Z".parse().unwrap())
        );
        assert_eq!(t.source, TickSource::Scheduler);
        assert_eq!(
            parse(&json!({"job": "audit"})).unwrap().scheduled_time,
            None
        );
    }

    #[test]
    fn rule_envelope_with_job_in_detail_or_rule_name() {
        let env = |detail: Value, rule: &str| {
            json!({
                "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
                "detail-type": "Scheduled Event", "source": "aws.events",
                "account": "123456789012", "time": "2024-03-25T00:00:00Z", "region": "us-east-1",
                "resources": [format!("arn:aws:events:us-east-1:123456789012:rule/{rule}")],
                "detail": detail
            })
        };
        let t = parse(&env(json!({"job": "compact-daily"}), "whatever")).unwrap();
        assert_eq!(t.job, Job::Compact);
        assert_eq!(t.source, TickSource::Rule);
        assert_eq!(
            t.scheduled_time,
            Some("2024-03-25T00:00:00Z".parse().unwrap())
        );
        assert_eq!(
            parse(&env(json!({}), "my-worker-audit")).unwrap().job,
            Job::Audit
        );
        assert!(matches!(
            parse(&env(json!({}), "nightly")),
            Err(TickError::NoJob { .. })
        ));
        assert!(is_schedule_event(&env(json!({}), "x")));
    }

    #[test]
    fn bad_ticks_say_what_to_do() {
        assert_eq!(parse(&json!({"Records": []})), Err(TickError::NotASchedule));
        let e = parse(&json!({"job": "vacuum"})).unwrap_err();
        assert!(e.to_string().contains("sweep, audit, compact-daily"), "{e}");
        assert!(matches!(
            parse(&json!({"job": "audit", "scheduledTime": "yesterday"})),
            Err(TickError::BadTime(_))
        ));
        assert!(!is_schedule_event(&json!({"Records": [], "job": 1})));
    }

    #[test]
    fn deadline_budget() {
        let tick = parse(&json!({"job": "audit"})).unwrap();
        let mut run = JobRun {
            now: Utc::now(),
            tick,
            deadline: None,
            margin: Duration::from_secs(2),
        };
        assert!(run.has_time());
        run.deadline = Some(Instant::now() + Duration::from_secs(1));
        assert!(!run.has_time());
        run.deadline = Some(Instant::now() + Duration::from_secs(60));
        assert!(run.has_time());
    }
}
