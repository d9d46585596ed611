//! A job of an app, described once: its name, the stream handlers and
//! scheduled jobs it registers, the schedule each of those runs on, the
//! environment variables it reads, the DynamoDB access it needs and the
//! metrics it writes. Everything else is derived from these descriptions:
//! the app's list of variables (and the configuration docs), the deployed
//! functions with their permissions (the test kit's `deploy`), the metrics a
//! template may alarm on, and the template checks. Adding a job is its own
//! files plus one line in the app's list of jobs.
//!
//! `D` is what the app builds its handlers and jobs from (its store,
//! configuration and clock), `H` the app's stream handler type (usually a
//! trait object): the engine only carries the constructors.

use std::sync::Arc;

use crate::schedule::{JobName, ScheduledJob};

/// Which deployed function reads an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBy<J> {
    /// Every function (stream and schedule).
    All,
    /// The stream function.
    Stream,
    /// The schedule function running this job.
    Job(J),
    /// Every schedule function.
    Schedule,
    /// Only local runs (tests, the CLI); never set in a deployment.
    LocalOnly,
}

/// One environment variable a job (or the app) reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar<J: 'static> {
    /// The variable's name, as set in the template (`TABLE_NAME`).
    pub name: &'static str,
    /// Who reads it.
    pub read_by: &'static [ReadBy<J>],
    /// Its default, as a user would write it (`None`: required or off).
    pub default: Option<&'static str>,
    /// What it sets, in one line, for the docs and the command line's
    /// listing.
    pub meaning: &'static str,
}

impl<J: JobName> EnvVar<J> {
    /// Whether the stream function (`job == None`) or the schedule
    /// function of `job` reads this variable.
    pub fn is_read_by(&self, job: Option<J>) -> bool {
        self.read_by.iter().any(|r| match (r, job) {
            (ReadBy::All, _) => true,
            (ReadBy::Stream, None) => true,
            (ReadBy::Schedule, Some(_)) => true,
            (ReadBy::Job(j), Some(k)) => *j == k,
            _ => false,
        })
    }

    /// Only for local runs (never set in a deployment).
    pub(crate) fn local_only(&self) -> bool {
        self.read_by.contains(&ReadBy::LocalOnly)
    }
}

/// An action a function may call that the fixtures do not necessarily
/// exercise, and why it is granted anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    /// The IAM action granted (`dynamodb:DeleteItem`).
    pub action: &'static str,
    /// The path that calls it and why the fixtures may miss it, in one line.
    pub why: &'static str,
}

/// What a handler or a scheduled job needs of AWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// DynamoDB data actions on the table (`dynamodb:GetItem`, ...).
    pub dynamodb_actions: &'static [&'static str],
    /// Indexes it queries or scans (their ARNs are granted, no others).
    pub indexes: &'static [&'static str],
    /// Actions granted for a path the fixtures may not take.
    pub fallbacks: &'static [Fallback],
    /// Publishes to the app's event bus when one is configured.
    pub publishes_events: bool,
}

impl Access {
    /// No access at all.
    pub const NONE: Access = Access {
        dynamodb_actions: &[],
        indexes: &[],
        fallbacks: &[],
        publishes_events: false,
    };
}

/// When a scheduled job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Every so often: an EventBridge `rate(...)` expression.
    Rate(&'static str),
    /// Once a day, at a time of the zone an environment variable names.
    Daily {
        /// The variable naming the IANA time zone (`Europe/Paris`) the
        /// day is counted in.
        zone_env: &'static str,
    },
    /// Only when an operator asks (its schedule exists, disabled).
    OnDemand,
}

/// The stream side of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSpec {
    /// The handler's name (in logs and write counts).
    pub handler: &'static str,
    /// The metric its write requests count under.
    pub writes_metric: &'static str,
    /// What the stream handler needs of AWS (granted to the stream
    /// function).
    pub access: Access,
}

/// One scheduled job of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSpec<J: 'static> {
    /// The job's name: what `WORKER_JOB` pins its schedule function to.
    pub job: J,
    /// The logical id of its schedule function in the template.
    pub function: &'static str,
    /// When it runs when deployed.
    pub schedule: Schedule,
    /// Its default schedule in the local event-source loop: a 5-field
    /// cron in UTC, or `never`.
    pub local_cron: &'static str,
    /// What the job needs of AWS (granted to its schedule function only).
    pub access: Access,
    /// The metrics its reports carry, besides the run counters.
    pub metrics: &'static [&'static str],
}

/// A job, described once.
pub struct JobSpec<J: 'static, D: ?Sized + 'static, H: ?Sized + 'static> {
    /// The job's name (docs, logs).
    pub name: &'static str,
    /// What it keeps true, in one line.
    pub summary: &'static str,
    /// The variables it reads.
    pub env: &'static [EnvVar<J>],
    /// Its stream side, if it has one.
    pub stream: Option<StreamSpec>,
    /// Its scheduled jobs.
    pub scheduled: &'static [ScheduleSpec<J>],
    /// Builds its stream handlers (as many as `stream` describes: zero or one).
    pub handlers: fn(&D) -> Vec<Arc<H>>,
    /// Builds its scheduled jobs, one per entry of `scheduled`.
    pub jobs: fn(&D) -> Vec<Arc<dyn ScheduledJob<J>>>,
}

/// An app: its common variables and its jobs.
///
/// A notes app of one job, with no stream side and one hourly scheduled
/// job (its handlers and jobs built from `()` here; an app builds them from
/// its `app::TableDeps`):
///
/// ```
/// use worker_engine::{Access, AppSpec, JobSpec, Schedule, ScheduleSpec};
/// use worker_engine::schema::{DEFAULT_KEY, TableSchema};
/// use worker_engine::stream::RecordProcessor;
///
/// worker_engine::job_names! {
///     pub enum Job { PurgeExpired = "purge-expired" }
/// }
///
/// const NOTES: JobSpec<Job, (), dyn RecordProcessor> = JobSpec {
///     name: "notes",
///     summary: "purges expired notes",
///     env: &[],
///     stream: None,
///     scheduled: &[ScheduleSpec {
///         job: Job::PurgeExpired,
///         function: "PurgeExpiredFunction",
///         schedule: Schedule::Rate("rate(1 hour)"),
///         local_cron: "0 * * * *",
///         access: Access { dynamodb_actions: &["dynamodb:DeleteItem"], ..Access::NONE },
///         metrics: &[],
///     }],
///     handlers: |_| Vec::new(),
///     jobs: |_| Vec::new(),
/// };
///
/// const APP: AppSpec<Job, (), dyn RecordProcessor> = AppSpec {
///     name: "notes-worker",
///     namespace: "NotesWorker",
///     env: worker_engine::common_env!(Job, "the notes table"),
///     jobs: &[&NOTES],
///     schema: || TableSchema::new(DEFAULT_KEY),
///     checkpoint: |_| None,
///     decode: worker_engine::stream::decode_event_bytes,
/// };
///
/// APP.check().unwrap();
/// assert_eq!(APP.schedule(Job::PurgeExpired).unwrap().function, "PurgeExpiredFunction");
/// // The schedule function reads the common variables and its pin.
/// let vars = APP.env_of(Some(Job::PurgeExpired));
/// assert!(vars.contains(&"TABLE_NAME") && vars.contains(&"WORKER_JOB"));
/// ```
pub struct AppSpec<J: 'static, D: ?Sized + 'static, H: ?Sized + 'static> {
    /// The command line's name (`my-worker`).
    pub name: &'static str,
    /// The CloudWatch namespace of its metrics.
    pub namespace: &'static str,
    /// Variables every app reads (table, endpoint, deadline margin, ...).
    pub env: &'static [EnvVar<J>],
    /// Its jobs, each described once; the command line, templates and
    /// functions are built from them.
    pub jobs: &'static [&'static JobSpec<J, D, H>],
    /// Its table as it expects it (keys, attribute types, indexes,
    /// stream): what tests, the command line and templates create. An app
    /// of several tables ([`crate::TableSet`]): its home table.
    pub schema: fn() -> crate::schema::TableSchema,
    /// The key of a job's resume checkpoint, if the job keeps one (the
    /// command line's `checkpoints list|reset`).
    pub checkpoint: fn(J) -> Option<crate::store::Key>,
    /// How its stream function reads a Lambda event's bytes:
    /// [`crate::stream::decode_event_bytes`] (each image an item),
    /// `decode_views::<V>` (of each image, the app's view `V` of it:
    /// [`crate::stream::decode_views`]), or a function that gives the app's
    /// [`crate::stream::ChangeReader`] to
    /// [`crate::stream::decode_event_bytes_with`] (each image typed as the
    /// event is read).
    pub decode: crate::stream::DecodeEvent,
}

impl<J: JobName, D: ?Sized, H: ?Sized> AppSpec<J, D, H> {
    /// Every variable the app reads: its own, then each job's, in order.
    pub fn env_vars(&self) -> Vec<&'static EnvVar<J>> {
        self.env
            .iter()
            .chain(self.jobs.iter().flat_map(|j| j.env.iter()))
            .collect()
    }

    /// Every stream handler, in the order they see a change.
    pub fn handlers(&self, deps: &D) -> Vec<Arc<H>> {
        self.jobs.iter().flat_map(|j| (j.handlers)(deps)).collect()
    }

    /// Every scheduled job.
    pub fn scheduled(&self, deps: &D) -> Vec<Arc<dyn ScheduledJob<J>>> {
        self.jobs.iter().flat_map(|j| (j.jobs)(deps)).collect()
    }

    /// Every schedule, with the job it belongs to.
    pub fn schedules(&self) -> impl Iterator<Item = &'static ScheduleSpec<J>> + '_ {
        self.jobs.iter().flat_map(|j| j.scheduled.iter())
    }

    /// The schedule of a job.
    pub fn schedule(&self, job: J) -> Option<&'static ScheduleSpec<J>> {
        self.schedules().find(|s| s.job == job)
    }

    /// The stream sides of the jobs.
    pub fn stream_specs(&self) -> impl Iterator<Item = &'static StreamSpec> + '_ {
        self.jobs.iter().filter_map(|j| j.stream.as_ref())
    }

    /// The worker's settings from the common ones: the deadline margin, the
    /// stream concurrency, the pinned job, and every job's writes metric.
    pub fn worker_settings(
        &self,
        common: &crate::settings::CommonSettings<J>,
    ) -> crate::runtime::WorkerSettings<J> {
        crate::runtime::WorkerSettings {
            deadline_margin: common.deadline_margin,
            stream_concurrency: common.stream_concurrency,
            pinned_job: common.job,
            writes_metrics: self.stream_specs().map(|s| s.writes_metric).collect(),
        }
    }

    /// The variables `read_by` (stream: `None`) reads that a deployment
    /// sets (local-only ones left out).
    pub fn env_of(&self, job: Option<J>) -> Vec<&'static str> {
        self.env_vars()
            .into_iter()
            .filter(|v| !v.local_only() && v.is_read_by(job))
            .map(|v| v.name)
            .collect()
    }

    /// Checks a description cannot express in types: names unique, every
    /// job of `J` scheduled exactly once, handler and metric names unique.
    pub fn check(&self) -> Result<(), String> {
        let mut names: Vec<&str> = self.env_vars().iter().map(|v| v.name).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("variable {} is declared twice", w[0]));
        }
        for job in J::ALL {
            let n = self.schedules().filter(|s| s.job == *job).count();
            if n != 1 {
                return Err(format!("job {job} has {n} schedules, not 1"));
            }
        }
        let mut handlers: Vec<&str> = self.stream_specs().map(|s| s.handler).collect();
        handlers.sort_unstable();
        if let Some(w) = handlers.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("stream handler {} is declared twice", w[0]));
        }
        let mut functions: Vec<&str> = self.schedules().map(|s| s.function).collect();
        functions.sort_unstable();
        if let Some(w) = functions.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("function {} runs two jobs", w[0]));
        }
        Ok(())
    }

    /// The worker whose stream side is `stream`, with every job scheduled.
    fn assemble(
        &self,
        stream: Box<dyn crate::runtime::StreamSide>,
        deps: &D,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        common: &crate::settings::CommonSettings<J>,
    ) -> crate::runtime::Worker<J> {
        let scheduler = self.scheduled(deps).into_iter().fold(
            crate::schedule::Scheduler::default(),
            crate::schedule::Scheduler::with,
        );
        crate::runtime::Worker::new(stream, scheduler, clock, self.worker_settings(common))
            .with_decoder(self.decode)
    }
}

impl<J: JobName, D: ?Sized, C: crate::stream::TypedChange>
    AppSpec<J, D, dyn crate::stream::ChangeHandler<C>>
{
    /// The [`Worker`](crate::runtime::Worker) of an app of typed changes
    /// ([`crate::stream::Router`]): every job's stream handler behind one
    /// [`Router`](crate::stream::Router), in the order of
    /// [`AppSpec::jobs`], each handler's writes counted in `writes` under
    /// its job's `writes_metric`; every job scheduled.
    pub fn routed_worker(
        &self,
        deps: &D,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        common: &crate::settings::CommonSettings<J>,
        writes: std::sync::Arc<crate::metrics::WriteCounter>,
    ) -> crate::runtime::Worker<J> {
        let router = self.jobs.iter().fold(
            crate::stream::Router::new(clock.clone()).counting(writes.clone()),
            |router, job| {
                let metric = job.stream.map(|s| s.writes_metric);
                (job.handlers)(deps)
                    .into_iter()
                    .fold(router, |r, h| match metric {
                        Some(m) => r.with_metric(h, m),
                        None => r.with(h),
                    })
            },
        );
        self.assemble(Box::new(router), deps, clock, common)
            .with_write_counter(writes)
    }
}

impl<J: JobName, D: ?Sized> AppSpec<J, D, dyn crate::stream::RecordProcessor> {
    /// The worker of every job over `deps`: every job's stream handler as
    /// one processor (in the order of [`AppSpec::jobs`]), every scheduled
    /// job, the [`AppSpec::worker_settings`]. An app of several tables
    /// routes its changes with [`AppSpec::worker_on_tables`]; one that
    /// routes them otherwise (by item kind) assembles its `Worker` itself.
    pub fn worker(
        &self,
        deps: &D,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        common: &crate::settings::CommonSettings<J>,
    ) -> crate::runtime::Worker<J> {
        use crate::runtime::{AllHandlers, EveryBatch};
        let handlers = AllHandlers(self.handlers(deps));
        self.assemble(Box::new(EveryBatch(handlers)), deps, clock, common)
    }
}

impl<J: JobName, D: ?Sized, T: crate::tables::TableSet>
    AppSpec<J, D, dyn crate::tables::TableHandler<T>>
{
    /// The [`Worker`](crate::runtime::Worker) of an app of several tables
    /// ([`crate::TableSet`]): each record goes to the handlers of the table
    /// its `eventSourceARN` names (of `names`), in the order of its jobs;
    /// every job scheduled.
    pub fn worker_on_tables(
        &self,
        deps: &D,
        names: &crate::tables::TableNames<T>,
        clock: std::sync::Arc<dyn crate::clock::Clock>,
        common: &crate::settings::CommonSettings<J>,
    ) -> crate::runtime::Worker<J> {
        let routes = crate::tables::routes(&self.handlers(deps), names);
        let stream = Box::new(crate::runtime::EveryBatch(routes));
        self.assemble(stream, deps, clock, common)
    }
}
