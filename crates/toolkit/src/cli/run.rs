//! `<app> run JOB`: run one scheduled job now, on a snapshot or a
//! table, and show its report and what it changed (in every table of an
//! app of several, [`super::tables`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{Value, json};

use super::deployment::{DeployOpts, deadline, describe_timeout};
use super::output::{
    job_spinner, made_json, made_line, planned_json, planned_line, print_json, tables_diff_block,
    write_count, writes_block, writes_json,
};
use super::replay::{check_config, load_snapshot, recording_worker};
use super::tables::{
    SnapshotWritten, TableWrites, diff_all, read_app_snapshot, scan_all, take_made, take_planned,
    write_all,
};
use super::target::{
    AppTable, RemoteWriteOpts, Scope, TableOpts, Target, WriteDestination, is_loopback,
    refuse_remote_writes,
};
use super::{CliApp, CliError, parse_now};
use crate::layers::{MadeWrite, PlannedWrite};
use crate::replay::diff::TablesDiff;
use worker_engine::HandlerError;
use worker_engine::schedule::{JobName, JobReport};
use worker_engine::store::MetricsSnapshot;

/// Options of `run`.
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// The job to run (the app lists its jobs: [`super::job_names`]).
    #[arg(value_name = "JOB")]
    pub job: String,
    /// Load the table from this snapshot first (a JSON array of items in
    /// DynamoDB JSON; for an app of several tables, also a JSON object of
    /// such arrays by table name, each loaded into its table).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// The time the job sees (RFC 3339). Default: real time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// Write the table after the run to this file, sorted by PK then SK
    /// (for an app of several tables, every table: a JSON object of arrays
    /// by table name).
    #[arg(long, value_name = "FILE")]
    pub write_snapshot: Option<PathBuf>,
    /// Compute and print what the job would write; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// On a table the command did not start itself: scan the whole table
    /// before and after the job to show what changed (the cost, from the
    /// table's size, is printed first). Without it only the writes the job
    /// made are shown and the command reads only what the job reads.
    #[arg(long)]
    pub diff: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Set a worker configuration variable, as in the Lambda environment
    /// (repeatable), e.g. --env LOG_FORMAT=text.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::replay::env_pair)]
    pub env: Vec<String>,
    /// The table and its endpoint (by default an embedded DynamoDB Local).
    #[command(flatten)]
    pub table: TableOpts,
    /// Whether a table not on this machine may be written to (without it,
    /// a dry run).
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
    /// The template and timeout the run follows.
    #[command(flatten)]
    pub deploy: DeployOpts,
}

/// What reading the whole table twice (`--diff`) costs, from DescribeTable:
/// `(items, bytes, read units per scan)` (eventually consistent reads: one
/// unit per 8 KB).
pub async fn scan_cost(target: &Target) -> Result<(i64, i64, f64), CliError> {
    let (items, bytes) = target.store.table_size().await?;
    Ok((items, bytes, (bytes as f64 / 8192.0).ceil()))
}

/// `<app> run`.
pub async fn run<A: CliApp>(args: RunArgs) -> Result<ExitCode, CliError> {
    let plan = plan::<A>(&args)?;
    let opened = open(&args, &plan).await?;
    let ran = execute::<A>(&args, &plan, &opened).await?;
    let report = Report {
        args: &args,
        plan: &plan,
        opened: &opened,
        ran: &ran,
    };
    if args.json {
        report.print_json();
    } else {
        report.print_text();
    }
    if let Err(e) = &ran.result
        && e.kind() == worker_engine::FailureKind::Environment
    {
        return Err(CliError::Environment(e.to_string()));
    }
    let incomplete = ran.result.as_ref().is_ok_and(|r| !r.complete);
    Ok(super::exit_status(ran.result.is_err(), incomplete))
}

/// What `run` runs and where, checked before anything is opened.
struct Plan<J> {
    job: J,
    app: AppTable,
    table: String,
    /// The timeout of the job's function.
    timeout: Option<Duration>,
}

/// Check the command: the job known and in this build, the configuration,
/// the snapshot readable and allowed to be loaded; the job's timeout.
fn plan<A: CliApp>(args: &RunArgs) -> Result<Plan<A::Job>, CliError> {
    let job = A::Job::parse(&args.job).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown job {:?}: expected one of {}",
            args.job,
            A::Job::known()
        ))
    })?;
    let (app, table) = AppTable::of::<A>().named(&args.table.table, Scope::Every)?;
    let available = check_config::<A>(&app, &table, &args.env)?;
    if !available.contains(&job) {
        return Err(CliError::Usage(format!(
            "job {job} is not available in this build (available: {})",
            if available.is_empty() {
                "none".to_owned()
            } else {
                available
                    .iter()
                    .map(|j| j.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )));
    }
    if let Some(p) = &args.snapshot {
        read_app_snapshot(p, &app, &table)?;
        // Loading a snapshot writes.
        refuse_remote_writes(
            args.table.endpoint_url.as_deref(),
            args.remote,
            "run --snapshot",
        )?;
    }
    let deployment = args.deploy.deployment::<A>()?;
    let timeout = args.deploy.timeout(
        deployment
            .as_ref()
            .and_then(|d| d.job_timeout(job.as_str())),
    );
    Ok(Plan {
        job,
        app,
        table,
        timeout,
    })
}

/// The tables the job runs on, opened, and how the run treats them.
struct Opened {
    target: Target,
    /// Nothing is written: asked for, or the table is elsewhere and remote
    /// writes are not allowed.
    dry_run: bool,
    /// Where the writes go, when that is not this machine.
    destination: Option<WriteDestination>,
    /// The tables are scanned before and after the job, to show what
    /// changed.
    scan: bool,
}

/// Open the tables, say whether the run writes, load the snapshot, and
/// say what `--diff` costs on a table elsewhere.
async fn open<J>(args: &RunArgs, plan: &Plan<J>) -> Result<Opened, CliError> {
    let target = Target::open(&args.table, &plan.app, &plan.table).await?;
    // A table elsewhere is only read unless remote writes are allowed.
    let remote = !target.is_embedded() && !is_loopback(&target.endpoint);
    let dry_run = args.dry_run || (remote && !args.remote.allow_remote_writes);
    if dry_run && !args.dry_run {
        eprintln!(
            "{} is not on this machine: dry run, nothing is written (add --allow-remote-writes to write)",
            target.describe()
        );
    }
    let destination = if dry_run {
        None
    } else {
        target.announce_writes().await
    };
    if let Some(p) = &args.snapshot {
        load_snapshot(&target, p).await?;
    }
    let scan = target.is_embedded() || args.diff;
    if args.diff && !target.is_embedded() {
        let (items, bytes, units) = scan_cost(&target).await?;
        eprintln!(
            "--diff scans {} twice (before and after the job): {items} items, {bytes} bytes by DescribeTable (refreshed about every 6 h), about {units:.0} read units per scan",
            target.describe()
        );
    }
    Ok(Opened {
        target,
        dry_run,
        destination,
        scan,
    })
}

/// What running the job did.
struct Ran<J: JobName> {
    result: Result<JobReport<J>, HandlerError>,
    elapsed: Duration,
    /// The requests of the run.
    metrics: MetricsSnapshot,
    planned: Vec<TableWrites<PlannedWrite>>,
    made: Vec<TableWrites<MadeWrite>>,
    /// What changed in the tables, when they were scanned.
    diff: Option<TablesDiff>,
    /// The snapshot written after the run (`--write-snapshot`).
    written: Option<SnapshotWritten>,
}

/// Run the job within its timeout (scanning the tables before and after
/// when asked), and write the snapshot after it.
async fn execute<A: CliApp>(
    args: &RunArgs,
    plan: &Plan<A::Job>,
    opened: &Opened,
) -> Result<Ran<A::Job>, CliError> {
    let target = &opened.target;
    let (worker, layers) = recording_worker::<A>(target, args.now, opened.dry_run, &args.env)?;
    let before = if opened.scan {
        Some(scan_all(target, None).await?)
    } else {
        None
    };
    let (spinner, ticker) = job_spinner(plan.job.as_str(), target.store.clone());
    let started = std::time::Instant::now();
    let metrics_before = target.store.metrics().snapshot();
    let result = worker.run_job(plan.job, deadline(plan.timeout)).await;
    ticker.abort();
    spinner.finish_and_clear();
    let elapsed = started.elapsed();
    let metrics = target.store.metrics().snapshot().since(&metrics_before);
    let planned = take_planned(&layers);
    let made = take_made(&layers);
    let after = if opened.scan || args.write_snapshot.is_some() {
        Some(scan_all(target, None).await?)
    } else {
        None
    };
    let diff = match (&before, &after) {
        (Some(b), Some(a)) => Some(diff_all(target, b, a)),
        _ => None,
    };
    let written = match (&args.write_snapshot, &after) {
        (Some(path), Some(after)) => Some(write_all(path, target, after)?),
        _ => None,
    };
    Ok(Ran {
        result,
        elapsed,
        metrics,
        planned,
        made,
        diff,
        written,
    })
}

/// The command's report of one run.
struct Report<'a, J: JobName> {
    args: &'a RunArgs,
    plan: &'a Plan<J>,
    opened: &'a Opened,
    ran: &'a Ran<J>,
}

impl<J: JobName> Report<'_, J> {
    /// The report as one JSON document (`--json`).
    fn print_json(&self) {
        let (target, ran) = (&self.opened.target, self.ran);
        let (report, error) = match &ran.result {
            Ok(r) => (serde_json::to_value(r).unwrap_or(Value::Null), Value::Null),
            Err(e) => (Value::Null, Value::from(e.to_string())),
        };
        print_json(&json!({
            "job": self.plan.job.as_str(),
            "table": target.table,
            "endpoint": if target.is_embedded() { Value::Null } else { Value::from(target.endpoint.clone()) },
            "now": self.args.now.map(super::rfc3339),
            "dryRun": self.opened.dry_run,
            "timeoutSecs": self.plan.timeout.map(|t| t.as_secs_f64()),
            "writingTo": self.opened.destination,
            "report": report,
            "error": error,
            "elapsedMs": ran.elapsed.as_millis() as u64,
            "metrics": ran.metrics,
            "plannedWrites": writes_json(&ran.planned, planned_json),
            "writes": writes_json(&ran.made, made_json),
            "diff": ran.diff.as_ref().map(|d| d.to_json()),
            "snapshotWritten": ran.written.as_ref().map(SnapshotWritten::to_json),
        }));
    }

    /// The report as text: the run, the job's report, its requests, what
    /// it wrote (or would have), the snapshot written.
    fn print_text(&self) {
        let ran = self.ran;
        println!(
            "ran {} on {}{} in {:.1} s ({})",
            self.plan.job,
            self.opened.target.describe(),
            self.args
                .now
                .map(|t| format!(", now = {}", super::rfc3339(t)))
                .unwrap_or_default(),
            ran.elapsed.as_secs_f64(),
            describe_timeout(self.plan.timeout)
        );
        match &ran.result {
            Ok(r) => {
                println!(
                    "{}: {}{}",
                    r.job,
                    r.summary,
                    if r.complete {
                        ""
                    } else {
                        " (stopped at the deadline; run it again to resume, as the next tick would)"
                    }
                );
                println!(
                    "details: {}",
                    serde_json::to_string_pretty(&r.details).unwrap_or_default()
                );
            }
            Err(e) => println!("FAILED: {e}"),
        }
        let metrics = &ran.metrics;
        println!(
            "requests: {} scan pages, {} queries, {} gets, {} writes; {:.1} RCU, {:.1} WCU",
            metrics.scan,
            metrics.query,
            metrics.get_item + metrics.batch_get_item,
            metrics.write_requests(),
            metrics.read_capacity,
            metrics.write_capacity
        );
        self.print_writes();
        if let Some(w) = &ran.written {
            println!("snapshot written: {}", w.describe());
        }
    }

    /// The writes: planned (a dry run), the tables' changes (scanned), or
    /// those made.
    fn print_writes(&self) {
        let ran = self.ran;
        if self.opened.dry_run {
            println!(
                "planned writes (dry run, nothing written): {}",
                write_count(&ran.planned)
            );
            for l in writes_block(&ran.planned, "  ", planned_line) {
                println!("{l}");
            }
        } else if let Some(diff) = &ran.diff {
            println!("table changes: {}", diff.summary());
            for l in tables_diff_block(diff, "  ") {
                println!("{l}");
            }
        } else {
            println!("writes made: {}", write_count(&ran.made));
            for l in writes_block(&ran.made, "  ", made_line) {
                println!("{l}");
            }
        }
    }
}
