//! `<app> dev`: a local event-source loop. Polls the table's
//! stream like Lambda's event source mapping (batch size, batching window,
//! in order per shard (per partition key with a parallelization factor),
//! retry from the first failed sequence number, bounded
//! retries, optional bisect, maximum record age, `FilterCriteria`, the
//! failure destination written to a local file) and fires the schedule
//! ticks on their schedules in their time zones, calling the same handlers
//! as the Lambda functions within their timeouts. Every setting comes from
//! the app's deployment template (`--template`) unless a flag overrides it.
//! Anything that writes to the table (the service, a script, `table load`)
//! sees the worker react live; every batch and tick is logged on stdout.
//! `--state-file` keeps the stream position (per shard) across restarts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::deployment::{DeployOpts, deadline, describe_timeout};
use super::replay::{check_config, load_snapshot, worker};
use super::target::{AppTable, RemoteWriteOpts, TableOpts, Target, refuse_remote_writes};
use super::{CliApp, CliError};
use crate::replay::dev::{
    Action, BatchLog, EventFunction, EventSourceLoop, InvokeError, MAX_PARALLELIZATION_FACTOR,
    MappingConfig, MappingSource, Schedule, Ticker, failure_record,
};
use crate::runtime::Worker;
use crate::schedule::JobName;
use crate::stream::decode::SequenceNumber;
use crate::stream::engine::BatchReport;
use crate::stream_reader::{StartAt, StreamTail};
use crate::template::Deployment;

/// Where the loop starts reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum StartingPosition {
    /// Only records written after the loop started.
    #[default]
    Latest,
    /// Every record still in the stream.
    TrimHorizon,
}

/// Options of `dev`.
#[derive(Debug, Clone, Default, Args)]
pub struct DevArgs {
    /// Load this snapshot before the loop starts (its writes are not
    /// handled with the default --starting-position latest).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Most records per invocation (Lambda BatchSize). Default: the
    /// template's, else 1000.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: Option<u32>,
    /// Seconds to gather records before invoking with less than a full
    /// batch (Lambda MaximumBatchingWindowInSeconds). Default: the
    /// template's, else 0.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(0..=300))]
    pub batching_window: Option<u32>,
    /// Failed retries of a record before its batch is given up on (Lambda
    /// MaximumRetryAttempts). Default: the template's, else 5.
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Split a batch in two when the function fails (Lambda
    /// BisectBatchOnFunctionError): --bisect, --bisect=false. Default: the
    /// template's, else off.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub bisect: Option<bool>,
    /// Give up on records older than this when they are read (Lambda
    /// MaximumRecordAgeInSeconds). Default: the template's, else never.
    #[arg(long, value_name = "SECS")]
    pub max_record_age: Option<u64>,
    /// Batches of one shard in flight at once (Lambda
    /// ParallelizationFactor, 1-10): a shard's records are split by a hash
    /// of their partition key, order kept per key only. Default: the
    /// template's, else 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub parallelization_factor: Option<u32>,
    /// Where records given up on are reported, one JSON line each (what the
    /// mapping's on-failure destination would receive). Default:
    /// dev-failures.jsonl when the template has a failure destination.
    #[arg(long, value_name = "FILE")]
    pub failure_file: Option<PathBuf>,
    /// Where to start reading the stream (with --state-file, only shards it
    /// has no position for).
    #[arg(long, value_enum, default_value_t = StartingPosition::Latest)]
    pub starting_position: StartingPosition,
    /// A job's schedule, JOB=EXPR (repeatable): 5-field cron in UTC
    /// ("0 3 * * *"), EventBridge "cron(0 3 * * ? *)", "rate(15 minutes)" or
    /// "never". Default: the template's schedule of the job in its time
    /// zone (disabled: never), else the job's local schedule.
    #[arg(long = "cron", value_name = "JOB=EXPR")]
    pub cron: Vec<String>,
    /// Milliseconds between polls of the stream.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub poll_interval: u64,
    /// Stop once the stream is quiet (nothing new, nothing pending) instead
    /// of running until Ctrl-C; schedule ticks do not fire.
    #[arg(long)]
    pub until_idle: bool,
    /// Keep the stream position (the last record done per shard) in this
    /// file: a restart resumes after it instead of re-reading or skipping.
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
    #[command(flatten)]
    pub table: TableOpts,
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
    #[command(flatten)]
    pub deploy: DeployOpts,
}

/// The mapping `dev` runs: flags over the template over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DevMapping {
    pub config: MappingConfig,
    pub max_record_age: Option<Duration>,
    pub filters: Vec<Value>,
    pub failure_file: Option<PathBuf>,
    /// The stream function's timeout.
    pub timeout: Option<Duration>,
}

impl DevMapping {
    /// Resolve the settings of `args` with the template's.
    pub fn resolve(args: &DevArgs, deployment: Option<&Deployment>) -> DevMapping {
        let t = deployment.and_then(|d| d.stream.as_ref());
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
        }
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

/// The stream position a restart resumes after, as `--state-file` keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevState {
    pub stream_arn: String,
    /// The last record done, per shard.
    pub shards: BTreeMap<String, String>,
}

impl DevState {
    /// The state in `path`, if the file exists.
    pub fn read(path: &Path) -> Result<Option<DevState>, CliError> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| CliError::input(path.display(), format!("not a dev state file: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CliError::input(path.display(), format!("cannot read: {e}"))),
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
}

/// The worker as the deployed functions run it: each invocation within
/// its function's timeout.
struct Deployed<'a, J: JobName> {
    worker: &'a Worker<J>,
    stream_timeout: Option<Duration>,
}

#[async_trait]
impl<J: JobName> EventFunction for Deployed<'_, J> {
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
        Ok(self
            .worker
            .handle_stream(event, deadline(self.stream_timeout))
            .await?)
    }

    async fn invoke_schedule(&self, event: &Value) -> Result<Value, InvokeError> {
        Ok(serde_json::to_value(
            self.worker.handle_schedule(event, None).await?,
        )?)
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

/// `<app> dev`.
pub async fn run<A: CliApp>(args: DevArgs) -> Result<ExitCode, CliError> {
    let deployment = args.deploy.deployment::<A>()?;
    let plan = schedules_from::<A>(deployment.as_ref(), &args.cron)?;
    let mut mapping = DevMapping::resolve(&args, deployment.as_ref());
    let app = AppTable::of::<A>();
    // Lanes follow the table's partition key, as the mapping's do.
    mapping.config.partition_key = Some(app.schema.key.partition_key.to_owned());
    check_config::<A>(&args.table.table, &args.env)?;
    refuse_remote_writes(args.table.endpoint_url.as_deref(), args.remote, "dev")?;
    if let Some(p) = &args.snapshot {
        crate::replay::snapshot::read_snapshot(p, app.keys())?;
    }
    let saved = match &args.state_file {
        Some(p) => DevState::read(p)?,
        None => None,
    };
    let json_out = args.json;
    let say = |line: String| {
        if json_out {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let target = Target::open(&args.table, &app).await?;
    target.announce_writes().await;
    let arn = target.stream_arn().await?;
    if let Some(p) = &args.snapshot {
        let n = load_snapshot(&target, p).await?;
        say(format!("loaded {n} items from {}", p.display()));
    }
    let (worker, _) = worker::<A>(&target, None, false, &args.env)?;
    let function = Deployed {
        worker: &worker,
        stream_timeout: mapping.timeout,
    };
    let resume: Vec<(String, SequenceNumber)> = match &saved {
        Some(s) if s.stream_arn == arn => s
            .shards
            .iter()
            .filter_map(|(shard, seq)| Some((shard.clone(), seq.parse().ok()?)))
            .collect(),
        Some(s) => {
            eprintln!(
                "state file is for another stream ({}); starting afresh",
                s.stream_arn
            );
            Vec::new()
        }
        None => Vec::new(),
    };
    let resuming = !resume.is_empty();
    let start = if resuming || args.starting_position == StartingPosition::TrimHorizon {
        StartAt::TrimHorizon
    } else {
        StartAt::Latest
    };
    let tail = StreamTail::new(
        target.streams_client().await,
        arn.clone(),
        StartAt::TrimHorizon,
    )
    .resume_after(resume.iter().cloned());
    let source = MappingSource::new(tail, mapping.filters.clone(), mapping.max_record_age);
    let mut events = EventSourceLoop::new(source, mapping.config.clone());
    // One event source per other table's stream, as deployed. They take the
    // main mapping's batching, retries and record age; the template's
    // filters and `--state-file` are the main stream's.
    let mut others = Vec::new();
    for o in &target.others {
        let other_arn = o
            .store
            .stream_arn()
            .await?
            .ok_or_else(|| CliError::NoStream {
                app: A::NAME,
                endpoint: target.endpoint.clone(),
                table: o.name.clone(),
            })?;
        let tail = StreamTail::new(
            target.streams_client().await,
            other_arn.clone(),
            StartAt::TrimHorizon,
        );
        let source = MappingSource::new(tail, Default::default(), mapping.max_record_age);
        let config = MappingConfig {
            partition_key: Some(o.table.schema.key.partition_key.to_owned()),
            ..mapping.config.clone()
        };
        others.push((other_arn, EventSourceLoop::new(source, config)));
    }
    if resuming {
        say(format!(
            "resuming after the position in {} ({} shard(s))",
            args.state_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            resume.len()
        ));
    } else if start == StartAt::Latest {
        let mut skipped = events.skip_existing().await?;
        for (_, o) in &mut others {
            skipped += o.skip_existing().await?;
        }
        if skipped > 0 {
            say(format!(
                "starting at latest: {skipped} existing records skipped"
            ));
        }
    }
    let mut state = DevState {
        stream_arn: arn.clone(),
        shards: resume
            .iter()
            .map(|(s, q)| (s.clone(), q.to_string()))
            .collect(),
    };
    let save_state = |events: &EventSourceLoop<MappingSource<StreamTail>>, state: &mut DevState| {
        let Some(path) = &args.state_file else {
            return Ok(());
        };
        let mut next = state.clone();
        next.shards.extend(
            events
                .checkpoints()
                .iter()
                .map(|(s, q)| (s.clone(), q.to_string())),
        );
        if next != *state || !path.exists() {
            next.write(path)?;
            *state = next;
        }
        Ok::<(), CliError>(())
    };
    // Skipping to latest is a position too.
    if !resuming && start == StartAt::Latest {
        state.shards.extend(
            events
                .source()
                .inner()
                .positions()
                .map(|(s, q)| (s.clone(), q.to_string())),
        );
    }
    save_state(&events, &mut state)?;
    let c = &mapping.config;
    say(format!("worker loop on {}", target.describe()));
    say(format!("  stream {arn}"));
    for (other_arn, _) in &others {
        say(format!("  stream {other_arn}"));
    }
    say(format!(
        "  {}",
        deployment
            .as_ref()
            .map_or("no template: the defaults".to_owned(), |d| format!(
                "settings from {}",
                d.file
            ))
    ));
    say(format!(
        "  batch size {}, batching window {} s, max retries {}, bisect on error {}, max record age {}, parallelization factor {}, filters {}, {}",
        c.batch_size,
        c.batching_window.as_secs(),
        if c.max_retries == u32::MAX {
            "unbounded".to_owned()
        } else {
            c.max_retries.to_string()
        },
        if c.bisect_on_error { "on" } else { "off" },
        mapping
            .max_record_age
            .map_or("none".to_owned(), |a| format!("{} s", a.as_secs())),
        c.parallelization_factor,
        mapping.filters.len(),
        describe_timeout(mapping.timeout),
    ));
    if let Some(f) = &mapping.failure_file {
        say(format!(
            "  records given up on are reported to {}",
            f.display()
        ));
    }
    say(format!(
        "  write to it: {} table load --endpoint-url {} --table {} FILE",
        A::NAME,
        target.endpoint,
        target.table
    ));
    let mut all_logs: Vec<BatchLog> = Vec::new();
    let mut ticks: Vec<Value> = Vec::new();
    let mut failures: Vec<Value> = Vec::new();
    let expired = |events: &mut EventSourceLoop<MappingSource<StreamTail>>| -> Vec<Value> {
        events
            .source_mut()
            .take_expired()
            .iter()
            .map(|(shard, c)| {
                let seq = c.sequence_number.as_ref().map(|s| s.to_string());
                failure_record(
                    "RecordAgeExceeded",
                    shard,
                    seq.as_deref(),
                    seq.as_deref(),
                    1,
                    0,
                    &arn,
                )
            })
            .collect()
    };
    let finish = |logs: &[BatchLog],
                  ticks: &[Value],
                  failures: &[Value],
                  events: &EventSourceLoop<MappingSource<StreamTail>>,
                  state: &DevState| {
        if json_out {
            super::output::print_json(&json!({
                "table": target.table,
                "streamArn": arn,
                "template": deployment.as_ref().map(|d| d.file.clone()),
                "mapping": {
                    "batchSize": c.batch_size,
                    "batchingWindowSecs": c.batching_window.as_secs(),
                    "maxRetries": (c.max_retries != u32::MAX).then_some(c.max_retries),
                    "bisect": c.bisect_on_error,
                    "maxRecordAgeSecs": mapping.max_record_age.map(|a| a.as_secs()),
                    "parallelizationFactor": c.parallelization_factor,
                    "filters": mapping.filters,
                    "timeoutSecs": mapping.timeout.map(|t| t.as_secs_f64()),
                    "failureFile": mapping.failure_file.as_ref().map(|f| f.display().to_string()),
                },
                "schedules": plan.iter().map(|(job, expr, _)| json!({"job": job, "schedule": expr})).collect::<Vec<_>>(),
                "batches": logs,
                "ticks": ticks,
                "filtered": events.source().filtered,
                "failures": failures,
                "pending": events.pending(),
                "position": state.shards,
            }));
        }
    };
    if args.until_idle {
        let logs = events
            .run_until_idle(&function, Duration::from_secs(600))
            .await
            .map_err(|e| CliError::Usage(e.to_string()))?;
        let mut gave_up = discarded(&logs, &arn);
        gave_up.extend(expired(&mut events));
        let mut logs = logs;
        // Every stream until none has anything new (one table's writes
        // may be another's records).
        loop {
            let mut round = 0;
            for (other_arn, o) in &mut others {
                let more = o
                    .run_until_idle(&function, Duration::from_secs(600))
                    .await
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                gave_up.extend(discarded(&more, other_arn));
                round += more.len();
                logs.extend(more);
            }
            if round == 0 {
                break;
            }
            let more = events
                .run_until_idle(&function, Duration::from_secs(600))
                .await
                .map_err(|e| CliError::Usage(e.to_string()))?;
            gave_up.extend(discarded(&more, &arn));
            gave_up.extend(expired(&mut events));
            logs.extend(more);
        }
        report_failures(mapping.failure_file.as_deref(), &gave_up);
        for l in &logs {
            say(l.line());
        }
        save_state(&events, &mut state)?;
        say(format!(
            "idle after {} batches ({} records filtered out, {} given up on)",
            logs.len(),
            events.source().filtered,
            gave_up.len()
        ));
        finish(&logs, &ticks, &gave_up, &events, &state);
        return Ok(ExitCode::SUCCESS);
    }
    let now = Utc::now();
    let mut ticker = Ticker::new(plan.clone(), now);
    say("  schedules:".to_owned());
    for e in ticker.entries() {
        say(format!(
            "    {:<18} {:<28} next: {}",
            e.name,
            e.expr,
            e.next
                .map(super::rfc3339)
                .unwrap_or_else(|| "never".to_owned())
        ));
    }
    say(format!(
        "polling every {} ms; Ctrl-C stops",
        args.poll_interval
    ));
    let interval = Duration::from_millis(args.poll_interval.max(10));
    // One listener for the whole loop: a Ctrl-C during a poll is not lost.
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        match events.poll_once(&function).await {
            Ok(report) => {
                for l in &report.batches {
                    say(format!("{} {}", Utc::now().format("%H:%M:%S"), l.line()));
                }
                let mut gave_up = discarded(&report.batches, &arn);
                gave_up.extend(expired(&mut events));
                report_failures(mapping.failure_file.as_deref(), &gave_up);
                failures.extend(gave_up);
                all_logs.extend(report.batches);
                save_state(&events, &mut state)?;
            }
            Err(e) => eprintln!(
                "{} reading the stream failed (retrying): {e}",
                Utc::now().format("%H:%M:%S")
            ),
        }
        for (other_arn, o) in &mut others {
            match o.poll_once(&function).await {
                Ok(report) => {
                    for l in &report.batches {
                        say(format!("{} {}", Utc::now().format("%H:%M:%S"), l.line()));
                    }
                    let gave_up = discarded(&report.batches, other_arn);
                    report_failures(mapping.failure_file.as_deref(), &gave_up);
                    failures.extend(gave_up);
                    all_logs.extend(report.batches);
                }
                Err(e) => eprintln!(
                    "{} reading the stream of {other_arn} failed (retrying): {e}",
                    Utc::now().format("%H:%M:%S")
                ),
            }
        }
        for (job, at) in ticker.due(Utc::now()) {
            let event = json!({"job": job, "scheduledTime": super::rfc3339(at)});
            let timeout = args
                .deploy
                .timeout(deployment.as_ref().and_then(|d| d.job_timeout(&job)));
            let line = match worker.handle_schedule(&event, deadline(timeout)).await {
                Ok(r) => {
                    ticks.push(
                        json!({"job": job, "scheduledTime": super::rfc3339(at), "report": r}),
                    );
                    format!(
                        "tick {job} (scheduled {}): {}{}",
                        super::rfc3339(at),
                        r.summary,
                        if r.complete {
                            ""
                        } else {
                            " (stopped at the deadline; the next tick continues)"
                        }
                    )
                }
                Err(e) => {
                    ticks.push(json!({"job": job, "scheduledTime": super::rfc3339(at), "error": e.to_string()}));
                    format!("tick {job}: FAILED: {e}")
                }
            };
            say(format!("{} {line}", Utc::now().format("%H:%M:%S")));
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => {
                let pending = events.pending()
                    + others.iter().map(|(_, o)| o.pending()).sum::<usize>();
                say(format!("stopping ({pending} records pending)"));
                save_state(&events, &mut state)?;
                finish(&all_logs, &ticks, &failures, &events, &state);
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}
