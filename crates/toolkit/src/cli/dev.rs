//! `<app> dev`: a local event-source loop. Polls the stream of every
//! DynamoDB event source of the app's template ([`event_sources`]), each
//! on its own table like Lambda's event source mapping with its own
//! settings (batch size, batching window,
//! in order per shard (per partition key with a parallelization factor),
//! retry from the first failed sequence number, bounded
//! retries, optional bisect, maximum record age, `FilterCriteria`, the
//! failure destination written to a local file) and fires the schedule
//! ticks on their schedules in their time zones, calling the same handlers
//! as the Lambda functions within their timeouts. Every setting comes from
//! the app's deployment template (`--template`) unless a flag overrides it.
//! Anything that writes to the table (the service, a script, `table load`)
//! sees the worker react live; every batch and tick is logged on stdout.
//! `--state-file` keeps where reading started and how far it got, so a
//! restart resumes every stream without skipping or repeating a record.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::deployment::{DeployOpts, deadline, describe_timeout};
use super::replay::{check_config, load_snapshot, worker};
use super::target::{AppTable, RemoteWriteOpts, Scope, TableOpts, Target, refuse_remote_writes};
use super::{CliApp, CliError};
use crate::mapping::{
    Action, BatchLog, EnvironmentFault, EventFunction, InvokeError, MAX_PARALLELIZATION_FACTOR,
    MappingConfig,
};
use crate::replay::dev::{
    EventSourceLoop, LoopError, MappingSource, Schedule, Ticker, failure_record,
};
use crate::stream_reader::{StartAt, StreamTail};
use crate::template::{Deployment, StreamMapping};
use worker_engine::FailureKind;
use worker_engine::schedule::JobName;
use worker_engine::stream::BatchReport;
use worker_engine::stream::SequenceNumber;
use worker_engine::{EventError, Worker};

/// Where an event source starts reading a stream it has no saved position
/// for (the `StartingPosition` of a DynamoDB stream's mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StartingPosition {
    /// Only records written after the loop started (LATEST).
    Latest,
    /// Every record still in the stream (TRIM_HORIZON).
    TrimHorizon,
}

impl StartingPosition {
    /// The template's spelling: `LATEST`, `TRIM_HORIZON`.
    pub fn as_str(self) -> &'static str {
        match self {
            StartingPosition::Latest => "LATEST",
            StartingPosition::TrimHorizon => "TRIM_HORIZON",
        }
    }

    /// A template's `StartingPosition`.
    pub fn from_template(s: &str) -> Option<StartingPosition> {
        match s {
            "LATEST" => Some(StartingPosition::Latest),
            "TRIM_HORIZON" => Some(StartingPosition::TrimHorizon),
            _ => None,
        }
    }
}

/// Options of `dev`.
#[derive(Debug, Clone, Default, Args)]
pub struct DevArgs {
    /// Load this snapshot into the table before the loop starts (for an
    /// app of several tables, also a JSON object of item arrays by table
    /// name, each loaded into its table). Its writes are records of the
    /// streams: handled when reading starts at trim-horizon, skipped at
    /// latest.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Most records per invocation (Lambda BatchSize). Default: each event
    /// source's in the template, else 1000; given, for every event source.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: Option<u32>,
    /// Seconds to gather records before invoking with less than a full
    /// batch (Lambda MaximumBatchingWindowInSeconds). Default: each event
    /// source's in the template, else 0; given, for every event source.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(0..=300))]
    pub batching_window: Option<u32>,
    /// Failed retries of a record before its batch is given up on (Lambda
    /// MaximumRetryAttempts). Default: each event source's in the template,
    /// else 5; given, for every event source.
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Split a batch in two when the function fails (Lambda
    /// BisectBatchOnFunctionError): --bisect, --bisect=false. Default: each
    /// event source's in the template, else off; given, for every event
    /// source.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub bisect: Option<bool>,
    /// Give up on records older than this when they are read (Lambda
    /// MaximumRecordAgeInSeconds). Default: each event source's in the
    /// template, else never; given, for every event source.
    #[arg(long, value_name = "SECS")]
    pub max_record_age: Option<u64>,
    /// Batches of one shard in flight at once (Lambda
    /// ParallelizationFactor, 1-10): a shard's records are split by a hash
    /// of their partition key, order kept per key only. Default: each event
    /// source's in the template, else 1; given, for every event source.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub parallelization_factor: Option<u32>,
    /// Where records given up on are reported, one JSON line each (what the
    /// mapping's on-failure destination would receive, naming the stream).
    /// Default: dev-failures.jsonl for an event source with a failure
    /// destination in the template; given, for every event source.
    #[arg(long, value_name = "FILE")]
    pub failure_file: Option<PathBuf>,
    /// Where to start reading the stream: trim-horizon (every record still
    /// in it) or latest (only records written from now on). Default: each
    /// event source's StartingPosition in the template, else latest; given,
    /// for every event source. With --state-file, only where the file has
    /// no position: a restart resumes after it.
    #[arg(long, value_enum)]
    pub starting_position: Option<StartingPosition>,
    /// A job's schedule, JOB=EXPR (repeatable): 5-field cron in UTC
    /// ("0 3 * * *"), EventBridge "cron(0 3 * * ? *)", "rate(15 minutes)" or
    /// "never". Default: the template's schedule of the job in its time
    /// zone (disabled: never), else the job's local schedule.
    #[arg(long = "cron", value_name = "JOB=EXPR")]
    pub cron: Vec<String>,
    /// Milliseconds between polls of the streams.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub poll_interval: u64,
    /// Stop once every stream is quiet (nothing new, nothing pending)
    /// instead of running until Ctrl-C; schedule ticks do not fire.
    #[arg(long)]
    pub until_idle: bool,
    /// Keep where reading started and the last record done per shard of
    /// every event source in this file: a restart resumes after it, reading
    /// every record written while the loop was stopped (shards without a
    /// position, created since or empty then, from their start), none
    /// twice.
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
    /// Print one JSON document on stdout when the loop stops (the lines go
    /// to stderr).
    #[arg(long)]
    pub json: bool,
    /// Set a worker configuration variable, as in the Lambda environment
    /// (repeatable), e.g. --env LOG_FORMAT=text.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::replay::env_pair)]
    pub env: Vec<String>,
    /// The table and its endpoint (by default an embedded DynamoDB Local).
    #[command(flatten)]
    pub table: TableOpts,
    /// Whether a table not on this machine may be followed (the worker
    /// writes to it).
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
    /// The template whose event sources and schedules the loop follows,
    /// and the functions' timeout.
    #[command(flatten)]
    pub deploy: DeployOpts,
}

/// The mapping of one event source as `dev` runs it: flags over the
/// template's event source over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DevMapping {
    /// Batch size, batching window, retries, bisect and parallelization
    /// factor (without flags or template: 1000 records, no window, 5
    /// retries, no bisect, factor 1).
    pub config: MappingConfig,
    /// Records older than this are given up on (to the failure file);
    /// `None`: no limit.
    pub max_record_age: Option<Duration>,
    /// The template's `FilterCriteria` patterns; empty: every record is
    /// delivered.
    pub filters: Vec<Value>,
    /// Where records given up on are written (one on-failure message a
    /// line); `None`: they are only logged.
    pub failure_file: Option<PathBuf>,
    /// The timeout of the function the event source invokes.
    pub timeout: Option<Duration>,
    /// Where reading starts without a saved position.
    pub starting_position: StartingPosition,
}

impl DevMapping {
    /// Resolve the settings of `args` with those of the template's event
    /// source `t`.
    pub fn resolve(args: &DevArgs, t: Option<&StreamMapping>) -> DevMapping {
        DevMapping {
            config: MappingConfig {
                batch_size: args.batch_size.or(t.map(|t| t.batch_size)).unwrap_or(1000) as usize,
                batching_window: Duration::from_secs(u64::from(
                    args.batching_window
                        .or(t.map(|t| t.batching_window_secs))
                        .unwrap_or(0),
                )),
                max_retries: match (args.max_retries, t) {
                    (Some(n), _) => n,
                    (None, Some(t)) => t.max_retries.unwrap_or(u32::MAX),
                    (None, None) => 5,
                },
                bisect_on_error: args.bisect.or(t.map(|t| t.bisect)).unwrap_or(false),
                parallelization_factor: args
                    .parallelization_factor
                    .or(t.map(|t| t.parallelization_factor))
                    .unwrap_or(1)
                    .clamp(1, MAX_PARALLELIZATION_FACTOR as u32)
                    as usize,
                // The table's, set where the table is known.
                partition_key: None,
            },
            max_record_age: args
                .max_record_age
                .or(t.and_then(|t| t.max_record_age_secs))
                .map(Duration::from_secs),
            filters: t.map(|t| t.filters.clone()).unwrap_or_default(),
            failure_file: args.failure_file.clone().or_else(|| {
                t.and_then(|t| t.on_failure.as_ref())
                    .map(|_| PathBuf::from("dev-failures.jsonl"))
            }),
            timeout: args.deploy.timeout(t.and_then(|t| t.timeout_secs)),
            starting_position: args
                .starting_position
                .or(t
                    .and_then(|t| t.starting_position.as_deref())
                    .and_then(StartingPosition::from_template))
                .unwrap_or(StartingPosition::Latest),
        }
    }

    /// The settings, as the JSON summary shows them.
    fn to_json(&self) -> Value {
        let c = &self.config;
        json!({
            "batchSize": c.batch_size,
            "batchingWindowSecs": c.batching_window.as_secs(),
            "maxRetries": (c.max_retries != u32::MAX).then_some(c.max_retries),
            "bisect": c.bisect_on_error,
            "maxRecordAgeSecs": self.max_record_age.map(|a| a.as_secs()),
            "parallelizationFactor": c.parallelization_factor,
            "filters": self.filters,
            "timeoutSecs": self.timeout.map(|t| t.as_secs_f64()),
            "failureFile": self.failure_file.as_ref().map(|f| f.display().to_string()),
            "startingPosition": self.starting_position,
        })
    }

    /// The settings, as the loop's header shows them.
    fn line(&self) -> String {
        let c = &self.config;
        format!(
            "batch size {}, batching window {} s, max retries {}, bisect on error {}, max record age {}, parallelization factor {}, filters {}, starting position {}, {}",
            c.batch_size,
            c.batching_window.as_secs(),
            if c.max_retries == u32::MAX {
                "unbounded".to_owned()
            } else {
                c.max_retries.to_string()
            },
            if c.bisect_on_error { "on" } else { "off" },
            self.max_record_age
                .map_or("none".to_owned(), |a| format!("{} s", a.as_secs())),
            c.parallelization_factor,
            self.filters.len(),
            self.starting_position.as_str(),
            describe_timeout(self.timeout),
        )
    }
}

/// The schedule of every job: defaults, overridden by `--cron JOB=EXPR`.
pub fn schedules<A: CliApp>(
    overrides: &[String],
) -> Result<Vec<(String, String, Schedule)>, CliError> {
    schedules_from::<A>(None, overrides)
}

/// The schedule of every job: the template's (in its time zone; a
/// disabled schedule never fires), else the job's local schedule,
/// overridden by `--cron JOB=EXPR`.
pub fn schedules_from<A: CliApp>(
    deployment: Option<&Deployment>,
    overrides: &[String],
) -> Result<Vec<(String, String, Schedule)>, CliError> {
    // (job, expression, time zone, where it comes from)
    let mut exprs: Vec<(A::Job, String, Option<String>, String)> = A::Job::ALL
        .iter()
        .map(|j| {
            let from = |d: &Deployment, id: &str| format!("schedule {id} of {}", d.file);
            match deployment.and_then(|d| d.schedule_of(j.as_str()).map(|s| (d, s))) {
                Some((d, s)) if s.enabled => (
                    *j,
                    s.expression.clone(),
                    s.time_zone.clone(),
                    from(d, &s.id),
                ),
                Some((d, s)) => (*j, "never".to_owned(), None, from(d, &s.id)),
                None => (
                    *j,
                    A::local_cron(*j).to_owned(),
                    None,
                    format!("local schedule of {j}"),
                ),
            }
        })
        .collect();
    for o in overrides {
        let (name, expr) = o.split_once('=').ok_or_else(|| {
            CliError::Usage(format!(
                "--cron {o:?}: expected JOB=EXPR, e.g. audit='0 3 * * *'"
            ))
        })?;
        let job = A::Job::parse(name.trim()).ok_or_else(|| {
            CliError::Usage(format!(
                "--cron {o:?}: unknown job, expected one of {}",
                A::Job::known()
            ))
        })?;
        if let Some(slot) = exprs.iter_mut().find(|(j, ..)| *j == job) {
            *slot = (job, expr.trim().to_owned(), None, format!("--cron {job}"));
        }
    }
    exprs
        .into_iter()
        .map(|(job, expr, zone, from)| {
            let schedule: Schedule = expr
                .parse()
                .map_err(|e| CliError::Usage(format!("{from}: {e}")))?;
            match zone.filter(|z| z != "UTC") {
                None => Ok((job.as_str().to_owned(), expr, schedule)),
                Some(z) => {
                    let tz: chrono_tz::Tz = z
                        .parse()
                        .map_err(|_| CliError::Usage(format!("{from}: unknown time zone {z:?}")))?;
                    Ok((
                        job.as_str().to_owned(),
                        format!("{expr} {z}"),
                        schedule.in_zone(tz),
                    ))
                }
            }
        })
        .collect()
}

/// Where each event source of the loop started reading and how far it
/// got, as `--state-file` keeps it: a restart resumes every source where
/// the last run stopped, so no record written while the loop was stopped
/// is skipped (within the stream's 24 hours) and none is handled twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevState {
    /// Per event source, by its id: `<Function>.<Event>` of the template
    /// (`StreamFunction.TableStream`), or without one the name of the
    /// table whose stream it reads.
    pub sources: BTreeMap<String, SourceState>,
    /// A file of the one-stream form (`{"streamArn": ..., "shards":
    /// {...}}`): it resumes whichever source reads that stream.
    #[serde(skip)]
    pub single: Option<SourceState>,
}

/// One event source's place in its stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceState {
    /// The ARN of the stream read: a position for another stream (the
    /// table was recreated) is not used.
    pub stream_arn: String,
    /// Where reading started the first time this file was used (absent in
    /// the one-stream form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_position: Option<StartingPosition>,
    /// When reading started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Per shard, the last record done, or (a LATEST start) the shard's
    /// last record when reading started. A restart reads each shard after
    /// its position, and a shard without one from its start (TRIM_HORIZON):
    /// it had no record when reading started, or it was created since.
    pub shards: BTreeMap<String, String>,
}

/// What a state file holds for one event source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved<'a> {
    /// Its place in this stream: resume after it.
    Position(&'a SourceState),
    /// A position in another stream (the table was made again): start
    /// afresh.
    OtherStream(&'a str),
    /// Nothing: start afresh.
    Nothing,
}

impl DevState {
    /// The state in `path`, if the file exists.
    pub fn read(path: &Path) -> Result<Option<DevState>, CliError> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum File {
            Sources(DevState),
            Single(SourceState),
        }
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CliError::input(path.display(), format!("cannot read: {e}"))),
        };
        match serde_json::from_str(&text) {
            Ok(File::Sources(state)) => Ok(Some(state)),
            Ok(File::Single(single)) => Ok(Some(DevState {
                sources: BTreeMap::new(),
                single: Some(single),
            })),
            Err(_) => Err(CliError::input(
                path.display(),
                "not a dev state file (expected {\"sources\": {...}})",
            )),
        }
    }

    /// Write the state (to a temporary file renamed over `path`).
    pub fn write(&self, path: &Path) -> Result<(), CliError> {
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(self).expect("JSON values always serialize");
        std::fs::write(&tmp, text + "\n")
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| CliError::input(path.display(), format!("cannot write: {e}")))
    }

    /// What the file holds for the source `id` reading `stream_arn`: its
    /// own entry, else the one entry of that stream (kept under another id:
    /// the table's name without a template, the event source's with one,
    /// or the one-stream form).
    pub fn saved(&self, id: &str, stream_arn: &str) -> Saved<'_> {
        match self.sources.get(id) {
            Some(s) if s.stream_arn == stream_arn => Saved::Position(s),
            Some(s) => Saved::OtherStream(&s.stream_arn),
            None => {
                let mut same = self
                    .sources
                    .values()
                    .chain(&self.single)
                    .filter(|s| s.stream_arn == stream_arn);
                match (same.next(), same.next()) {
                    (Some(s), None) => Saved::Position(s),
                    _ => Saved::Nothing,
                }
            }
        }
    }
}

/// An event source the loop follows: one table's stream read through its
/// own mapping, with its place in the stream.
struct DevSource {
    /// Its key in the state file and the JSON summary.
    id: String,
    /// The table whose stream it reads.
    table: String,
    arn: String,
    mapping: DevMapping,
    events: EventSourceLoop<MappingSource<StreamTail>>,
    /// Where it started, and the positions it started from.
    state: SourceState,
    /// How it started: resumed, started afresh, records skipped at LATEST.
    notes: Vec<String>,
}

impl DevSource {
    /// Open the source: resume after the positions `saved` holds for it,
    /// else start where its mapping says (at LATEST after every record in
    /// the stream now, whose positions are kept as the start).
    async fn open(
        client: aws_sdk_dynamodbstreams::Client,
        (id, table, arn): (String, String, String),
        mut mapping: DevMapping,
        partition_key: &str,
        saved: Option<&DevState>,
    ) -> Result<DevSource, CliError> {
        // Lanes follow the table's partition key, as the mapping's do.
        mapping.config.partition_key = Some(partition_key.to_owned());
        let tail = StreamTail::new(client, arn.clone(), StartAt::TrimHorizon);
        let saved = saved.map_or(Saved::Nothing, |s| s.saved(&id, &arn));
        let (tail, resumed) = match saved {
            Saved::Position(s) => {
                let positions: Vec<(String, SequenceNumber)> = s
                    .shards
                    .iter()
                    .filter_map(|(shard, seq)| Some((shard.clone(), seq.parse().ok()?)))
                    .collect();
                (tail.resume_after(positions), Some(s.clone()))
            }
            _ => (tail, None),
        };
        let source = MappingSource::new(tail, mapping.filters.clone(), mapping.max_record_age);
        let mut events = EventSourceLoop::new(source, mapping.config.clone());
        let (state, notes) = match resumed {
            Some(state) => {
                let started = match (state.starting_position, &state.started_at) {
                    (Some(p), Some(at)) => format!(" (reading started at {} on {at})", p.as_str()),
                    _ => String::new(),
                };
                let note = format!(
                    "resuming after {} shard position(s) of the state file{started}; other shards from their start",
                    state.shards.len(),
                );
                (state, vec![note])
            }
            None => {
                let mut state = SourceState {
                    stream_arn: arn.clone(),
                    starting_position: Some(mapping.starting_position),
                    started_at: Some(super::rfc3339(Utc::now())),
                    shards: BTreeMap::new(),
                };
                let mut notes: Vec<String> = match saved {
                    Saved::OtherStream(other) => vec![format!(
                        "the state file's position is in another stream ({other}): starting afresh"
                    )],
                    _ => Vec::new(),
                };
                if mapping.starting_position == StartingPosition::Latest {
                    // Read to the end of every shard now; what was read,
                    // filtered out or too old is all skipped.
                    let read = events.skip_existing().await?;
                    let expired = events.source_mut().take_expired().len();
                    let filtered = std::mem::take(&mut events.source_mut().filtered);
                    let skipped = read + expired + filtered;
                    state.shards.extend(
                        events
                            .source()
                            .inner()
                            .positions()
                            .map(|(s, q)| (s.clone(), q.to_string())),
                    );
                    if skipped > 0 {
                        notes.push(format!(
                            "starting at latest: {skipped} existing records skipped"
                        ));
                    }
                }
                (state, notes)
            }
        };
        Ok(DevSource {
            id,
            table,
            arn,
            mapping,
            events,
            state,
            notes,
        })
    }

    /// Its place now: where it started, with the last record done per
    /// shard.
    fn position(&self) -> SourceState {
        let mut state = self.state.clone();
        state.shards.extend(
            self.events
                .checkpoints()
                .iter()
                .map(|(s, q)| (s.clone(), q.to_string())),
        );
        state
    }

    /// The function as deployed for this source (its timeout).
    fn function<'a, J: JobName>(&self, worker: &'a Worker<J>) -> Deployed<'a, J> {
        Deployed {
            worker,
            stream_timeout: self.mapping.timeout,
        }
    }

    /// The failure records of the batches given up on in `logs` and of
    /// the records too old to be read since the last call, appended to the
    /// failure file.
    fn give_up(&mut self, logs: &[BatchLog]) -> Vec<Value> {
        let mut out = discarded(logs, &self.arn);
        for (shard, c) in self.events.source_mut().take_expired() {
            let seq = c.sequence_number.as_ref().map(|s| s.to_string());
            out.push(failure_record(
                "RecordAgeExceeded",
                &shard,
                seq.as_deref(),
                seq.as_deref(),
                1,
                0,
                &self.arn,
            ));
        }
        report_failures(self.mapping.failure_file.as_deref(), &out);
        out
    }

    /// The source in the JSON summary.
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "table": self.table,
            "streamArn": self.arn,
            "mapping": self.mapping.to_json(),
            "filtered": self.events.source().filtered,
            "pending": self.events.pending(),
            "position": self.position().shards,
        })
    }
}

/// The `--state-file`: every source's position, written when it moves.
struct StateFile {
    path: Option<PathBuf>,
    /// The sources the file holds: those on streams this run does not
    /// follow are written back as they are.
    kept: BTreeMap<String, SourceState>,
    written: Option<DevState>,
}

impl StateFile {
    fn new(path: Option<PathBuf>, saved: Option<&DevState>) -> StateFile {
        StateFile {
            path,
            kept: saved.map(|s| s.sources.clone()).unwrap_or_default(),
            written: None,
        }
    }

    /// Write the sources' positions when they changed (or the file is
    /// missing).
    fn save(&mut self, sources: &[DevSource]) -> Result<(), CliError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Entries of the streams followed now are replaced by the sources'.
        let kept = self
            .kept
            .iter()
            .filter(|(_, k)| !sources.iter().any(|s| s.arn == k.stream_arn));
        let mut next = DevState {
            sources: kept.map(|(id, k)| (id.clone(), k.clone())).collect(),
            single: None,
        };
        next.sources
            .extend(sources.iter().map(|s| (s.id.clone(), s.position())));
        if self.written.as_ref() != Some(&next) || !path.exists() {
            next.write(path)?;
            self.written = Some(next);
        }
        Ok(())
    }
}

/// The worker as the deployed functions run it: each invocation within
/// its function's timeout.
struct Deployed<'a, J: JobName> {
    worker: &'a Worker<J>,
    stream_timeout: Option<Duration>,
}

#[async_trait]
impl<J: JobName> EventFunction for Deployed<'_, J> {
    /// An environment fault fails the invocation, as in Lambda, and stops
    /// the loop ([`EnvironmentFault`]).
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
        let report = self
            .worker
            .handle_stream(event, deadline(self.stream_timeout))
            .await?;
        match &report.environment_fault {
            Some(fault) => Err(Box::new(EnvironmentFault(fault.clone()))),
            None => Ok(report),
        }
    }

    async fn invoke_schedule(&self, event: &Value) -> Result<Value, InvokeError> {
        match self.worker.handle_schedule(event, None).await {
            Ok(report) => Ok(serde_json::to_value(report)?),
            Err(e) => Err(match environment_fault(&e) {
                Some(fault) => Box::new(fault),
                None => Box::new(e),
            }),
        }
    }
}

/// The environment fault a failed tick met, if that is why it failed.
fn environment_fault<J: JobName>(e: &EventError<J>) -> Option<EnvironmentFault> {
    match e {
        EventError::Job(job) if job.kind() == FailureKind::Environment => {
            Some(EnvironmentFault(job.to_string()))
        }
        _ => None,
    }
}

/// Append what the failure destination would receive to the failure file.
fn report_failures(file: Option<&Path>, records: &[Value]) {
    let Some(path) = file else { return };
    if records.is_empty() {
        return;
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| {
            for r in records {
                writeln!(f, "{r}")?;
            }
            Ok(())
        });
    if let Err(e) = written {
        eprintln!("cannot write the failure file {}: {e}", path.display());
    }
}

/// The failure records of the batches given up on in `logs`.
fn discarded(logs: &[BatchLog], arn: &str) -> Vec<Value> {
    logs.iter()
        .filter_map(|l| match &l.action {
            Action::Discard {
                from_sequence,
                records,
            } => Some(failure_record(
                "RetryAttemptsExhausted",
                &l.shard,
                from_sequence.as_deref(),
                l.last_sequence.as_deref(),
                *records,
                l.attempt,
                arn,
            )),
            _ => None,
        })
        .collect()
}

/// An event source `dev` follows, before it is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcePlan {
    /// Its id (see [`DevState::sources`]).
    pub id: String,
    /// The table whose stream it reads: `None` the target table, else the
    /// index of one of the app's other tables.
    pub other: Option<usize>,
    /// The settings it runs with.
    pub mapping: DevMapping,
}

/// The event sources `dev` follows: every DynamoDB event source of the
/// template, each with its own settings (flags over them) on the table
/// its function's variables name (`others`: each other table's variable
/// and name; a source naming none of them reads the target table), the
/// target table's first, then the others' in the app's order. Without a
/// template, or one without a DynamoDB event source: every table's stream
/// with the defaults (flags over them).
pub fn event_sources(
    args: &DevArgs,
    deployment: Option<&Deployment>,
    target: &str,
    others: &[(&str, String)],
) -> Vec<SourcePlan> {
    let template = deployment.map_or(&[][..], |d| &d.streams[..]);
    if template.is_empty() {
        let mapping = DevMapping::resolve(args, None);
        return std::iter::once((target.to_owned(), None))
            .chain(
                others
                    .iter()
                    .enumerate()
                    .map(|(i, (_, name))| (name.clone(), Some(i))),
            )
            .map(|(id, other)| SourcePlan {
                id,
                other,
                mapping: mapping.clone(),
            })
            .collect();
    }
    let mut plans: Vec<SourcePlan> = template
        .iter()
        .map(|t| SourcePlan {
            id: format!("{}.{}", t.function, t.event),
            other: others
                .iter()
                .position(|(var, _)| t.table_variables.iter().any(|v| v == var)),
            mapping: DevMapping::resolve(args, Some(t)),
        })
        .collect();
    plans.sort_by_key(|p| p.other.map_or(0, |i| i + 1));
    plans
}

/// Whether the loop left something unhandled (exit status 3): a record
/// rejected, malformed or not the app's, a record given up on, a failed
/// tick.
fn not_all_handled(logs: &[BatchLog], ticks: &[Value], gave_up: &[Value]) -> bool {
    !gave_up.is_empty()
        || ticks.iter().any(|t| t.get("error").is_some())
        || logs
            .iter()
            .any(|l| l.rejected + l.malformed + l.foreign > 0)
}

/// `<app> dev`.
pub async fn run<A: CliApp>(args: DevArgs) -> Result<ExitCode, CliError> {
    let plan = check::<A>(&args)?;
    let mut dev = DevLoop::<A>::open(&args, &plan).await?;
    dev.state.save(&dev.sources)?;
    dev.print_header();
    if args.until_idle {
        dev.until_idle().await
    } else {
        dev.follow().await
    }
}

/// What `dev` runs, checked before anything is opened.
struct DevPlan {
    deployment: Option<Deployment>,
    /// Every job's schedule: (job, expression, schedule).
    schedules: Vec<(String, String, Schedule)>,
    app: AppTable,
    table: String,
    /// What the state file holds.
    saved: Option<DevState>,
}

/// Check the command: the template, the schedules, the tables and the
/// configuration, that the tables are local, the snapshot and the state
/// file readable.
fn check<A: CliApp>(args: &DevArgs) -> Result<DevPlan, CliError> {
    let deployment = args.deploy.deployment::<A>()?;
    let schedules = schedules_from::<A>(deployment.as_ref(), &args.cron)?;
    let (app, table) = AppTable::of::<A>().named(&args.table.table, Scope::Every)?;
    check_config::<A>(&app, &table, &args.env)?;
    refuse_remote_writes(args.table.endpoint_url.as_deref(), args.remote, "dev")?;
    if let Some(p) = &args.snapshot {
        super::tables::read_app_snapshot(p, &app, &table)?;
    }
    let saved = match &args.state_file {
        Some(p) => DevState::read(p)?,
        None => None,
    };
    Ok(DevPlan {
        deployment,
        schedules,
        app,
        table,
        saved,
    })
}

/// Open every event source of the loop ([`event_sources`]) on its table's
/// stream (`arn`: the target table's), each other table's stream refused
/// when it lacks what the handlers read.
async fn open_sources<A: CliApp>(
    args: &DevArgs,
    plan: &DevPlan,
    target: &Target,
    streams: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
) -> Result<Vec<DevSource>, CliError> {
    let tables: Vec<(&str, String)> = target
        .others
        .iter()
        .map(|o| (o.table.var, o.name.clone()))
        .collect();
    let mut sources = Vec::new();
    for source in event_sources(args, plan.deployment.as_ref(), &target.table, &tables) {
        let (table, arn, partition_key) = match source.other {
            None => (
                target.table.clone(),
                arn.to_owned(),
                plan.app.schema.key.partition_key,
            ),
            Some(i) => other_stream::<A>(target, streams, i).await?,
        };
        sources.push(
            DevSource::open(
                target.streams_client().await,
                (source.id, table, arn),
                source.mapping,
                partition_key,
                plan.saved.as_ref(),
            )
            .await?,
        );
    }
    Ok(sources)
}

/// The app's other table `i`: its name, its stream (refused when it lacks
/// what the handlers read) and its partition key.
async fn other_stream<A: CliApp>(
    target: &Target,
    streams: &aws_sdk_dynamodbstreams::Client,
    i: usize,
) -> Result<(String, String, &'static str), CliError> {
    let o = &target.others[i];
    let arn = o
        .store
        .stream_arn()
        .await?
        .ok_or_else(|| CliError::NoStream {
            app: A::NAME,
            endpoint: target.endpoint.clone(),
            table: o.name.clone(),
        })?;
    let schema = &o.table.schema;
    super::capture::require_stream_view(streams, &arn, schema, A::NAME, &target.endpoint, &o.name)
        .await?;
    Ok((o.name.clone(), arn, schema.key.partition_key))
}

/// Where the loop's lines go: stdout, or stderr when stdout carries the
/// JSON summary (`--json`).
#[derive(Debug, Clone, Copy)]
struct Lines {
    json: bool,
}

impl Lines {
    /// Say `line`.
    fn say(self, line: String) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

/// The loop as it runs: its event sources and the worker they invoke,
/// where it keeps its place, and what it did so far.
struct DevLoop<'a, A: CliApp> {
    args: &'a DevArgs,
    plan: &'a DevPlan,
    target: Target,
    worker: Worker<A::Job>,
    sources: Vec<DevSource>,
    state: StateFile,
    lines: Lines,
    logs: Vec<BatchLog>,
    ticks: Vec<Value>,
    /// The failure records of what was given up on.
    failures: Vec<Value>,
}

impl<'a, A: CliApp> DevLoop<'a, A> {
    /// Open the tables and their streams (refusing one that lacks what the
    /// handlers read, before anything is written or read), load the
    /// snapshot, make the worker and open every event source.
    async fn open(args: &'a DevArgs, plan: &'a DevPlan) -> Result<DevLoop<'a, A>, CliError> {
        let lines = Lines { json: args.json };
        let target = Target::open(&args.table, &plan.app, &plan.table).await?;
        target.announce_writes().await;
        // The target table's stream here, the other tables' with their
        // sources.
        let arn = target.stream_arn().await?;
        let streams = target.streams_client().await;
        super::capture::require_stream_view(
            &streams,
            &arn,
            &plan.app.schema,
            A::NAME,
            &target.endpoint,
            &target.table,
        )
        .await?;
        if let Some(p) = &args.snapshot {
            let n = load_snapshot(&target, p).await?;
            lines.say(format!("loaded {n} items from {}", p.display()));
        }
        let (worker, _) = worker::<A>(&target, None, false, &args.env)?;
        let sources = open_sources::<A>(args, plan, &target, &streams, &arn).await?;
        Ok(DevLoop {
            args,
            plan,
            state: StateFile::new(args.state_file.clone(), plan.saved.as_ref()),
            target,
            worker,
            sources,
            lines,
            logs: Vec::new(),
            ticks: Vec::new(),
            failures: Vec::new(),
        })
    }

    /// The loop's header: the table, where the settings come from, every
    /// event source with its settings, how to write to the table.
    fn print_header(&self) {
        let say = |line: String| self.lines.say(line);
        say(format!("worker loop on {}", self.target.describe()));
        say(format!(
            "  {}",
            settings_origin::<A>(self.plan.deployment.as_ref())
        ));
        for s in &self.sources {
            let source = if s.id == s.table {
                String::new()
            } else {
                format!(", event source {}", s.id)
            };
            say(format!("  stream {} (table {}{source})", s.arn, s.table));
            say(format!("    {}", s.mapping.line()));
            if let Some(f) = &s.mapping.failure_file {
                say(format!(
                    "    records given up on are reported to {}",
                    f.display()
                ));
            }
            for note in &s.notes {
                say(format!("    {note}"));
            }
        }
        say(format!(
            "  write to it: {} table load --endpoint-url {} --table {} FILE",
            A::NAME,
            self.target.endpoint,
            self.target.table
        ));
    }

    /// `--until-idle`: every stream until none has anything new (one
    /// table's writes may be another's records), then the batches, the
    /// summary and the exit status.
    async fn until_idle(mut self) -> Result<ExitCode, CliError> {
        loop {
            let mut round = 0;
            for s in &mut self.sources {
                let more = s
                    .events
                    .run_until_idle(&s.function(&self.worker), Duration::from_secs(600))
                    .await
                    .map_err(|e| match e {
                        LoopError::Environment(fault) => CliError::Environment(fault),
                        e => CliError::Usage(e.to_string()),
                    })?;
                self.failures.extend(s.give_up(&more));
                round += more.len();
                self.logs.extend(more);
            }
            if round == 0 {
                break;
            }
        }
        for l in &self.logs {
            self.lines.say(l.line());
        }
        self.state.save(&self.sources)?;
        self.lines.say(format!(
            "idle after {} batches ({} records filtered out, {} given up on)",
            self.logs.len(),
            self.filtered(),
            self.failures.len()
        ));
        Ok(self.finish())
    }

    /// Until Ctrl-C: poll every stream and fire the ticks due, then the
    /// summary and the exit status. An environment fault stops the loop
    /// (its place saved).
    async fn follow(mut self) -> Result<ExitCode, CliError> {
        let mut ticker = Ticker::new(self.plan.schedules.clone(), Utc::now());
        self.lines.say("  schedules:".to_owned());
        for e in ticker.entries() {
            self.lines.say(format!(
                "    {:<18} {:<28} next: {}",
                e.name,
                e.expr,
                e.next
                    .map(super::rfc3339)
                    .unwrap_or_else(|| "never".to_owned())
            ));
        }
        let poll_interval = self.args.poll_interval;
        self.lines
            .say(format!("polling every {poll_interval} ms; Ctrl-C stops"));
        let interval = Duration::from_millis(poll_interval.max(10));
        // One listener for the whole loop: a Ctrl-C during a poll is not lost.
        let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            self.poll().await?;
            self.state.save(&self.sources)?;
            for (job, at) in ticker.due(Utc::now()) {
                let line = self.tick(job, at).await?;
                self.lines
                    .say(format!("{} {line}", Utc::now().format("%H:%M:%S")));
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = &mut stop => {
                    let pending: usize = self.sources.iter().map(|s| s.events.pending()).sum();
                    self.lines.say(format!("stopping ({pending} records pending)"));
                    self.state.save(&self.sources)?;
                    return Ok(self.finish());
                }
            }
        }
    }

    /// Poll every stream once, saying each batch; a stream that cannot be
    /// read is retried at the next poll.
    async fn poll(&mut self) -> Result<(), CliError> {
        for s in &mut self.sources {
            match s.events.poll_once(&s.function(&self.worker)).await {
                Ok(report) => {
                    for l in &report.batches {
                        let at = Utc::now().format("%H:%M:%S");
                        self.lines.say(format!("{at} {}", l.line()));
                    }
                    self.failures.extend(s.give_up(&report.batches));
                    self.logs.extend(report.batches);
                    if let Some(fault) = report.environment_fault {
                        self.state.save(&self.sources)?;
                        return Err(CliError::Environment(fault));
                    }
                }
                Err(e) => eprintln!(
                    "{} reading the stream of {} failed (retrying): {e}",
                    Utc::now().format("%H:%M:%S"),
                    s.table
                ),
            }
        }
        Ok(())
    }

    /// Fire the tick of `job` scheduled `at` within its function's
    /// timeout: the line saying what it did.
    async fn tick(&mut self, job: String, at: DateTime<Utc>) -> Result<String, CliError> {
        let scheduled = super::rfc3339(at);
        let event = json!({"job": job, "scheduledTime": scheduled});
        let deployment = self.plan.deployment.as_ref();
        let timeout = self
            .args
            .deploy
            .timeout(deployment.and_then(|d| d.job_timeout(&job)));
        Ok(
            match self.worker.handle_schedule(&event, deadline(timeout)).await {
                Ok(r) => {
                    self.ticks
                        .push(json!({"job": job, "scheduledTime": scheduled, "report": r}));
                    format!(
                        "tick {job} (scheduled {scheduled}): {}{}",
                        r.summary,
                        if r.complete {
                            ""
                        } else {
                            " (stopped at the deadline; the next tick continues)"
                        }
                    )
                }
                Err(e) => {
                    if let Some(fault) = environment_fault(&e) {
                        self.state.save(&self.sources)?;
                        return Err(CliError::Environment(fault.0));
                    }
                    self.ticks.push(
                        json!({"job": job, "scheduledTime": scheduled, "error": e.to_string()}),
                    );
                    format!("tick {job}: FAILED: {e}")
                }
            },
        )
    }

    /// The records filtered out, over every source.
    fn filtered(&self) -> usize {
        self.sources
            .iter()
            .map(|s| s.events.source().filtered)
            .sum()
    }

    /// Print the JSON summary (`--json`); the loop's exit status.
    fn finish(&self) -> ExitCode {
        if self.args.json {
            let first = &self.sources[0];
            let schedules = self.plan.schedules.iter();
            super::output::print_json(&json!({
                "table": self.target.table,
                "streamArn": first.arn,
                "template": self.plan.deployment.as_ref().map(|d| d.file.clone()),
                "mapping": first.mapping.to_json(),
                "sources": self.sources.iter().map(DevSource::to_json).collect::<Vec<_>>(),
                "schedules": schedules.map(|(job, expr, _)| json!({"job": job, "schedule": expr})).collect::<Vec<_>>(),
                "batches": self.logs,
                "ticks": self.ticks,
                "filtered": self.filtered(),
                "failures": self.failures,
                "pending": self.sources.iter().map(|s| s.events.pending()).sum::<usize>(),
                "position": first.position().shards,
            }));
        }
        super::exit_status(
            not_all_handled(&self.logs, &self.ticks, &self.failures),
            false,
        )
    }
}

/// Where the loop's settings come from, as its header says.
fn settings_origin<A: CliApp>(deployment: Option<&Deployment>) -> String {
    match deployment {
        None => match A::TEMPLATE {
            Some(path) => format!(
                "no template ({path} is not in {}; --template FILE): the defaults",
                std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|_| "this directory".to_owned())
            ),
            None => "no template: the defaults".to_owned(),
        },
        Some(d) if d.streams.is_empty() => format!(
            "settings from {} (no DynamoDB event source in it: every table's stream with the defaults)",
            d.file
        ),
        Some(d) => format!("settings from {}", d.file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(starting_position: Option<&str>) -> Deployment {
        let position = starting_position
            .map(|p| format!("StartingPosition: {p}"))
            .unwrap_or_default();
        let yaml = format!(
            r#"
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        S:
          Type: DynamoDB
          Properties: {{Stream: !GetAtt T.StreamArn, BatchSize: 7, {position}}}
"#
        );
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        Deployment::from_template(&crate::template::to_json(&yaml), "t.yaml").unwrap()
    }

    #[test]
    fn the_starting_position_is_the_flag_else_the_templates_else_latest() {
        let flag = |p| DevArgs {
            starting_position: p,
            ..DevArgs::default()
        };
        let at = |args: &DevArgs, d: Option<&Deployment>| {
            DevMapping::resolve(args, d.and_then(|d| d.streams.first())).starting_position
        };
        let horizon = deployment(Some("TRIM_HORIZON"));
        assert_eq!(
            at(&flag(None), Some(&horizon)),
            StartingPosition::TrimHorizon
        );
        assert_eq!(
            at(&flag(Some(StartingPosition::Latest)), Some(&horizon)),
            StartingPosition::Latest
        );
        let latest = deployment(Some("LATEST"));
        assert_eq!(at(&flag(None), Some(&latest)), StartingPosition::Latest);
        assert_eq!(
            at(&flag(None), Some(&deployment(None))),
            StartingPosition::Latest
        );
        assert_eq!(at(&flag(None), None), StartingPosition::Latest);
        assert_eq!(
            at(&flag(Some(StartingPosition::TrimHorizon)), None),
            StartingPosition::TrimHorizon
        );
    }

    /// Every event source of the template, each with its own settings on
    /// the table its function's variables name (the target's first); flags
    /// set every source's.
    #[test]
    fn every_event_source_of_the_template_is_followed_with_its_own_settings() {
        let yaml = r#"
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 90
      Environment:
        Variables:
          ORDERS_TABLE: !Ref Orders
          PEOPLE_TABLE: !Ref People
          VISITS_TABLE: !Ref Visits
      Events:
        PeopleStream:
          Type: DynamoDB
          Properties: {Stream: !GetAtt People.StreamArn, StartingPosition: LATEST, BatchSize: 10}
        OrdersStream:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt Orders.StreamArn
            StartingPosition: TRIM_HORIZON
            BatchSize: 20
            MaximumRetryAttempts: 3
            FilterCriteria: {Filters: [{Pattern: '{"eventName": ["REMOVE"]}'}]}
            DestinationConfig: {OnFailure: {Type: SQS, Destination: !GetAtt Q.Arn}}
        VisitsStream:
          Type: DynamoDB
          Properties: {Stream: !GetAtt Visits.StreamArn, StartingPosition: TRIM_HORIZON, BatchSize: 30}
"#;
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let d = Deployment::from_template(&crate::template::to_json(&yaml), "t.yaml").unwrap();
        let others = [
            ("PEOPLE_TABLE", "people".to_owned()),
            ("PLACES_TABLE", "places".to_owned()),
            ("ORDERS_TABLE", "orders".to_owned()),
        ];
        let plans = event_sources(&DevArgs::default(), Some(&d), "visits", &others);
        let seen: Vec<(&str, Option<usize>, usize, StartingPosition)> = plans
            .iter()
            .map(|p| {
                (
                    p.id.as_str(),
                    p.other,
                    p.mapping.config.batch_size,
                    p.mapping.starting_position,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("F.VisitsStream", None, 30, StartingPosition::TrimHorizon),
                ("F.PeopleStream", Some(0), 10, StartingPosition::Latest),
                ("F.OrdersStream", Some(2), 20, StartingPosition::TrimHorizon),
            ]
        );
        let orders = &plans[2].mapping;
        assert_eq!(orders.config.max_retries, 3);
        assert_eq!(orders.filters.len(), 1);
        assert_eq!(
            orders.failure_file,
            Some(PathBuf::from("dev-failures.jsonl"))
        );
        let people = &plans[1].mapping;
        assert!(people.filters.is_empty() && people.failure_file.is_none());
        assert!(
            plans
                .iter()
                .all(|p| p.mapping.timeout == Some(Duration::from_secs(90)))
        );

        // A flag sets every source's.
        let args = DevArgs {
            batch_size: Some(5),
            starting_position: Some(StartingPosition::Latest),
            ..DevArgs::default()
        };
        let plans = event_sources(&args, Some(&d), "visits", &others);
        assert!(plans.iter().all(|p| p.mapping.config.batch_size == 5
            && p.mapping.starting_position == StartingPosition::Latest));
        assert_eq!(
            plans[2].mapping.filters.len(),
            1,
            "the filters stay each source's"
        );

        // No template: every table, the defaults.
        let plans = event_sources(&DevArgs::default(), None, "visits", &others);
        let ids: Vec<&str> = plans.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["visits", "people", "places", "orders"]);
        assert!(plans.iter().all(|p| p.mapping.config.batch_size == 1000));
    }

    #[test]
    fn a_state_file_keeps_every_source_and_reads_the_one_stream_form() {
        let dir = std::env::temp_dir().join(format!("dev-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        let _ = std::fs::remove_file(&path);
        assert_eq!(DevState::read(&path).unwrap(), None, "no file: no state");

        // Started at LATEST on an empty stream: no shard position, yet a
        // place to resume from.
        let empty = SourceState {
            stream_arn: "arn:a".into(),
            starting_position: Some(StartingPosition::Latest),
            started_at: Some("2024-03-25T09:00:00Z".into()),
            shards: BTreeMap::new(),
        };
        let state = DevState {
            sources: [("A".to_owned(), empty.clone())].into(),
            single: None,
        };
        state.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"startingPosition\": \"LATEST\""), "{text}");
        let read = DevState::read(&path).unwrap().unwrap();
        assert_eq!(read, state);
        assert_eq!(read.saved("A", "arn:a"), Saved::Position(&empty));
        assert_eq!(read.saved("A", "arn:new"), Saved::OtherStream("arn:a"));
        assert_eq!(read.saved("B", "arn:b"), Saved::Nothing);
        assert_eq!(
            read.saved("F.Stream", "arn:a"),
            Saved::Position(&empty),
            "the one entry of the stream, under another id"
        );
        let mut two = read.clone();
        two.sources.insert("C".into(), empty.clone());
        assert_eq!(two.saved("F.Stream", "arn:a"), Saved::Nothing, "which one?");

        std::fs::write(
            &path,
            r#"{"streamArn": "arn:a", "shards": {"shard-1": "42"}}"#,
        )
        .unwrap();
        let one = DevState::read(&path).unwrap().unwrap();
        let Saved::Position(s) = one.saved("any", "arn:a") else {
            panic!("the one-stream form resumes its stream: {one:?}");
        };
        assert_eq!(s.shards["shard-1"], "42");
        assert_eq!(one.saved("any", "arn:b"), Saved::Nothing);

        std::fs::write(&path, "[1, 2]").unwrap();
        let e = DevState::read(&path).unwrap_err().to_string();
        assert!(e.contains("not a dev state file"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
