//! `<app> dev`: a local event-source loop. Polls the table's
//! stream like Lambda's event source mapping (batch size, batching window,
//! in order per shard, retry from the first failed sequence number, bounded
//! retries, optional bisect) and fires the schedule ticks on their cron,
//! calling the same handlers as the Lambda functions. Anything that writes
//! to the table (the service, a script, `table load`) sees the worker react
//! live; every batch and tick is logged on stdout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use chrono::Utc;
use clap::{Args, ValueEnum};
use serde_json::json;

use super::replay::{check_config, load_snapshot, worker};
use super::target::{AppTable, TableOpts, Target};
use super::{CliApp, CliError};
use crate::replay::dev::{EventFunction, EventSourceLoop, MappingConfig, Schedule, Ticker};
use crate::schedule::JobName;
use crate::stream_reader::{StartAt, StreamTail};

/// Where the loop starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StartingPosition {
    /// Only records written after the loop started.
    Latest,
    /// Every record still in the stream.
    TrimHorizon,
}

/// Options of `dev`.
#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Load this snapshot before the loop starts (its writes are not
    /// handled with the default --starting-position latest).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Most records per invocation (Lambda BatchSize).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: u32,
    /// Seconds to gather records before invoking with less than a full
    /// batch (Lambda MaximumBatchingWindowInSeconds).
    #[arg(long, value_name = "SECS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=300))]
    pub batching_window: u32,
    /// Failed retries of a record before its batch is discarded (Lambda
    /// MaximumRetryAttempts).
    #[arg(long, default_value_t = 5)]
    pub max_retries: u32,
    /// Split a batch in two when the function fails (Lambda
    /// BisectBatchOnFunctionError).
    #[arg(long)]
    pub bisect: bool,
    /// Where to start reading the stream.
    #[arg(long, value_enum, default_value_t = StartingPosition::Latest)]
    pub starting_position: StartingPosition,
    /// A job's schedule, JOB=EXPR (repeatable): 5-field cron in UTC
    /// ("0 3 * * *"), EventBridge "cron(0 3 * * ? *)", "rate(15 minutes)" or
    /// "never". Default: each job's local schedule, as the app describes it.
    #[arg(long = "cron", value_name = "JOB=EXPR")]
    pub cron: Vec<String>,
    /// Milliseconds between polls of the stream.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub poll_interval: u64,
    /// Stop once the stream is quiet (nothing new, nothing pending) instead
    /// of running until Ctrl-C; schedule ticks do not fire.
    #[arg(long)]
    pub until_idle: bool,
    /// Set a worker configuration variable, as in the Lambda environment
    /// (repeatable), e.g. --env LOG_FORMAT=text.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub table: TableOpts,
}

/// The schedule of every job: defaults, overridden by `--cron JOB=EXPR`.
pub fn schedules<A: CliApp>(
    overrides: &[String],
) -> Result<Vec<(String, String, Schedule)>, CliError> {
    let mut exprs: Vec<(A::Job, String)> = A::Job::ALL
        .iter()
        .map(|j| (*j, A::local_cron(*j).to_owned()))
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
        if let Some(slot) = exprs.iter_mut().find(|(j, _)| *j == job) {
            slot.1 = expr.trim().to_owned();
        }
    }
    exprs
        .into_iter()
        .map(|(job, expr)| {
            let schedule: Schedule = expr
                .parse()
                .map_err(|e| CliError::Usage(format!("--cron {job}: {e}")))?;
            Ok((job.as_str().to_owned(), expr, schedule))
        })
        .collect()
}

/// `<app> dev`.
pub async fn run<A: CliApp>(args: DevArgs) -> Result<ExitCode, CliError> {
    let plan = schedules::<A>(&args.cron)?;
    let app = AppTable::of::<A>();
    check_config::<A>(&args.table.table, &args.env)?;
    if let Some(p) = &args.snapshot {
        crate::replay::snapshot::read_snapshot(p, app.keys())?;
    }
    let target = Target::open(&args.table, &app).await?;
    let arn = target.stream_arn().await?;
    if let Some(p) = &args.snapshot {
        let n = load_snapshot(&target, p).await?;
        println!("loaded {n} items from {}", p.display());
    }
    let (worker, _) = worker::<A>(&target, None, false, &args.env)?;
    let config = MappingConfig {
        batch_size: args.batch_size as usize,
        batching_window: Duration::from_secs(u64::from(args.batching_window)),
        max_retries: args.max_retries,
        bisect_on_error: args.bisect,
    };
    let tail = StreamTail::new(
        target.streams_client().await,
        arn.clone(),
        StartAt::TrimHorizon,
    );
    let mut mapping = EventSourceLoop::new(tail, config.clone());
    // One event source per other table's stream, as deployed.
    let mut other_mappings = Vec::new();
    for o in &target.others {
        let arn = o
            .store
            .stream_arn()
            .await?
            .ok_or_else(|| CliError::NoStream {
                app: A::NAME,
                endpoint: target.endpoint.clone(),
                table: o.name.clone(),
            })?;
        println!("  stream {arn}");
        let tail = StreamTail::new(target.streams_client().await, arn, StartAt::TrimHorizon);
        other_mappings.push(EventSourceLoop::new(tail, config.clone()));
    }
    if args.starting_position == StartingPosition::Latest {
        let mut skipped = mapping.skip_existing().await?;
        for m in &mut other_mappings {
            skipped += m.skip_existing().await?;
        }
        if skipped > 0 {
            println!("starting at latest: {skipped} existing records skipped");
        }
    }
    println!("worker loop on {}", target.describe());
    println!("  stream {arn}");
    println!(
        "  batch size {}, batching window {} s, max retries {}, bisect on error {}",
        config.batch_size,
        args.batching_window,
        config.max_retries,
        if config.bisect_on_error { "on" } else { "off" }
    );
    println!(
        "  write to it: {} table load --endpoint-url {} --table {} FILE",
        A::NAME,
        target.endpoint,
        target.table
    );
    if args.until_idle {
        // Every stream until none has anything new (one table's writes
        // may be another's records).
        let mut batches = 0;
        loop {
            let mut round = 0;
            for m in std::iter::once(&mut mapping).chain(other_mappings.iter_mut()) {
                let logs = m
                    .run_until_idle(&worker, Duration::from_secs(600))
                    .await
                    .map_err(|e| CliError::Usage(e.to_string()))?;
                for l in &logs {
                    println!("{}", l.line());
                }
                round += logs.len();
            }
            batches += round;
            if round == 0 {
                break;
            }
        }
        println!("idle after {batches} batches");
        return Ok(ExitCode::SUCCESS);
    }
    let now = Utc::now();
    let mut ticker = Ticker::new(plan, now);
    println!("  schedules (UTC):");
    for e in ticker.entries() {
        println!(
            "    {:<18} {:<16} next: {}",
            e.name,
            e.expr,
            e.next
                .map(super::rfc3339)
                .unwrap_or_else(|| "never".to_owned())
        );
    }
    println!("polling every {} ms; Ctrl-C stops", args.poll_interval);
    let interval = Duration::from_millis(args.poll_interval.max(10));
    loop {
        for m in std::iter::once(&mut mapping).chain(other_mappings.iter_mut()) {
            match m.poll_once(&worker).await {
                Ok(report) => {
                    for l in &report.batches {
                        println!("{} {}", Utc::now().format("%H:%M:%S"), l.line());
                    }
                }
                Err(e) => eprintln!(
                    "{} reading the stream failed (retrying): {e}",
                    Utc::now().format("%H:%M:%S")
                ),
            }
        }
        for (job, at) in ticker.due(Utc::now()) {
            let event = json!({"job": job, "scheduledTime": super::rfc3339(at)});
            match worker.invoke_schedule(&event).await {
                Ok(r) => println!(
                    "{} tick {job} (scheduled {}): {}",
                    Utc::now().format("%H:%M:%S"),
                    super::rfc3339(at),
                    r.get("summary").and_then(|s| s.as_str()).unwrap_or("done")
                ),
                Err(e) => println!("{} tick {job}: FAILED: {e}", Utc::now().format("%H:%M:%S")),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => {
                let pending: usize = mapping.pending()
                    + other_mappings.iter().map(|m| m.pending()).sum::<usize>();
                println!("stopping ({pending} records pending)");
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}
