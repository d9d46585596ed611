//! `<app> replay EVENT_FILE...`: run each file, in order, as one
//! invocation of the handler code the Lambda functions run (stream events
//! to the stream handler, schedule ticks to the scheduler; recognised from
//! the content), and show each record's outcome, the `batchItemFailures`
//! Lambda would get, and what changed in the table.
//!
//! Every input (event files, snapshot) is read and checked before the
//! table is touched. With `--apply-writes`, the writes a stream file's
//! records describe are performed first (as the service did), then the
//! file is handled, the way Lambda sees a batch after its writes happened;
//! the service's writes and the worker's are shown apart.
//!
//! For an app of several tables, the snapshots and the diffs cover every
//! table ([`super::tables`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{Value, json};

use super::deployment::{DeployOpts, deadline};
use super::events::{EventFile, EventKind, load_event_file};
use super::output::{
    made_json, made_line, planned_json, planned_line, print_json, tables_diff_block, write_count,
    writes_block, writes_json,
};
use super::tables::{
    SnapshotWritten, TableWrites, WriteLayer, diff_all, load_all, read_app_snapshot,
    recorded_worker_tables, scan_all, take_made, take_planned, write_all,
};
use super::target::{
    AppTable, RemoteWriteOpts, Scope, TableOpts, Target, is_loopback, refuse_remote_writes,
};
use super::{CliApp, CliError, parse_now};
use crate::layers::{DryRunStore, MadeWrite, PlannedWrite};
use crate::replay::apply::{self, NotApplied};
use crate::replay::diff::TablesDiff;
use crate::replay::report::{RecordLine, record_lines};
use worker_engine::FailureKind;
use worker_engine::clock::{Clock, ManualClock, SystemClock};
use worker_engine::schedule::{JobName, JobReport};
use worker_engine::store::Store;
use worker_engine::stream::BatchReport;
use worker_engine::stream::decode_event;
use worker_engine::{EventError, Worker};

/// Options of `replay`.
#[derive(Debug, Clone, Default, Args)]
pub struct ReplayArgs {
    /// Event files, run in the order given: DynamoDB Streams events (as
    /// Lambda delivers them) and schedule ticks (EventBridge Scheduler input
    /// or rule event), recognised from their content.
    #[arg(value_name = "EVENT_FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Load the table from this snapshot first (a JSON array of items in
    /// DynamoDB JSON, the same as a Scan's Items; for an app of several
    /// tables, also a JSON object of such arrays by table name, each loaded
    /// into its table).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Before a stream file is handled, perform the writes its records
    /// describe, in order (NewImage put for INSERT/MODIFY, delete of Keys for
    /// REMOVE), as the service did.
    #[arg(long)]
    pub apply_writes: bool,
    /// The time every handler and job sees (RFC 3339). Default: real time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// Write the table after the replay to this file, sorted by PK then SK
    /// (for an app of several tables, every table: a JSON object of arrays
    /// by table name).
    #[arg(long, value_name = "FILE")]
    pub write_snapshot: Option<PathBuf>,
    /// Compute and print what the handlers would write; write nothing.
    #[arg(long, conflicts_with = "apply_writes")]
    pub dry_run: bool,
    /// On a table the command did not start itself: scan the whole table
    /// around each file to show what changed (the cost, from the table's
    /// size, is printed first). Without it the writes made are shown and
    /// the command reads only what the handlers read.
    #[arg(long)]
    pub diff: bool,
    /// Print the report as JSON (for scripts).
    #[arg(long)]
    pub json: bool,
    /// Set a worker configuration variable, as in the Lambda environment
    /// (repeatable; overrides the process environment), e.g.
    /// --env LOG_FORMAT=text.
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

/// What `--apply-writes` did before a stream file was handled.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedWrites {
    /// Writes performed (one per record that stands for one).
    pub applied: usize,
    /// Records that stand for no write, and why (in record order).
    pub not_applied: Vec<NotApplied>,
    /// The tables before and after the service's writes.
    pub diff: TablesDiff,
}

/// What one event file did.
#[derive(Debug, Clone)]
pub struct FileReport<J: JobName> {
    /// The event file's path, as given.
    pub file: String,
    /// The table's key attribute names (for rendering keys).
    pub keys: (&'static str, &'static str),
    /// What the file holds: a stream batch or a schedule tick.
    pub kind: EventKind,
    /// Stream files with `--apply-writes`: the writes the batch describes,
    /// made before the handlers ran; `None` otherwise.
    pub applied: Option<AppliedWrites>,
    /// Stream files: the batch engine's report and one line per record.
    pub batch: Option<BatchReport>,
    /// Stream files: one line per record, in batch order (empty for a
    /// schedule tick).
    pub records: Vec<RecordLine>,
    /// Schedule files: the job's report.
    pub job: Option<JobReport<J>>,
    /// The invocation failed (e.g. the job is not available, or a store
    /// failure in a job).
    pub error: Option<String>,
    /// An environment fault (a missing table or index, access denied):
    /// the command stops with it after the report, exit status 1.
    pub environment_fault: Option<String>,
    /// `--dry-run`: the writes the handlers would have made, by table.
    pub planned: Vec<TableWrites<PlannedWrite>>,
    /// The writes the handlers made, with their outcome, by table.
    pub writes: Vec<TableWrites<MadeWrite>>,
    /// Whether the table was scanned around the file (`diff` and the
    /// applied writes' diff are set only then).
    pub scanned: bool,
    /// What the worker changed in the tables.
    pub diff: TablesDiff,
}

impl<J: JobName> FileReport<J> {
    /// Whether Lambda would see a failure: the invocation failed, or it
    /// would be asked to deliver records again (`batchItemFailures`, the
    /// whole batch). A rejected or malformed record, parked and skipped, is
    /// not one.
    pub fn lambda_failed(&self) -> bool {
        self.error.is_some()
            || self.environment_fault.is_some()
            || self
                .batch
                .as_ref()
                .is_some_and(|b| !b.batch_item_failures.is_empty() || b.retry_whole_batch)
    }

    /// Whether a record was not handled: failed, rejected, malformed, not
    /// the app's or not attempted (exit status 3), or the file could not
    /// be run.
    pub fn failed(&self) -> bool {
        self.error.is_some()
            || self.batch.as_ref().is_some_and(|b| {
                !b.batch_item_failures.is_empty()
                    || b.retry_whole_batch
                    || b.failed + b.rejected + b.malformed + b.foreign + b.not_attempted > 0
            })
    }

    /// Readable lines.
    pub fn text(&self, dry_run: bool) -> Vec<String> {
        let mut out = vec![format!("▶ {} — {}", self.file, self.kind.describe())];
        if let Some(a) = &self.applied {
            out.push(format!(
                "  service writes applied (--apply-writes): {}{}",
                a.applied,
                if a.not_applied.is_empty() {
                    String::new()
                } else {
                    format!(", {} records not applicable", a.not_applied.len())
                }
            ));
            for n in &a.not_applied {
                out.push(format!("    #{} not applied: {}", n.index, n.reason));
            }
            if self.scanned {
                out.extend(tables_diff_block(&a.diff, "    "));
            }
        }
        if let Some(b) = &self.batch {
            if self.records.is_empty() {
                out.push("  (no records)".to_owned());
            }
            for r in &self.records {
                out.push(format!("  {}", r.line()));
            }
            out.push(format!(
                "  batchItemFailures: [{}]{}",
                b.batch_item_failures
                    .iter()
                    .map(|s| format!("{{\"itemIdentifier\": \"{s}\"}}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if b.environment_fault.is_some() {
                    " — environment fault: the invocation fails, Lambda retries the whole batch"
                } else if b.retry_whole_batch {
                    " — the invocation fails: Lambda retries the whole batch"
                } else {
                    ""
                }
            ));
        }
        if let Some(j) = &self.job {
            out.push(format!(
                "  {}: {}{}",
                j.job,
                j.summary,
                if j.complete {
                    ""
                } else {
                    " (stopped early; the next tick continues)"
                }
            ));
            out.push(format!("  details: {}", j.details));
        }
        if let Some(e) = &self.error {
            out.push(format!("  FAILED: {e}"));
        }
        if dry_run {
            out.push(format!(
                "  planned writes (dry run, nothing written): {}",
                write_count(&self.planned)
            ));
            out.extend(writes_block(&self.planned, "    ", planned_line));
        } else if self.scanned {
            out.push(format!(
                "  table changes by the worker: {}",
                self.diff.summary()
            ));
            out.extend(tables_diff_block(&self.diff, "    "));
        } else {
            out.push(format!(
                "  writes made by the worker: {}",
                write_count(&self.writes)
            ));
            out.extend(writes_block(&self.writes, "    ", made_line));
        }
        out
    }

    /// The same as JSON.
    pub fn to_json(&self) -> Value {
        let (job, source) = match &self.kind {
            EventKind::Schedule { job, source } => (Some(job.clone()), Some(*source)),
            EventKind::Stream { .. } => (None, None),
        };
        json!({
            "file": self.file,
            "kind": self.kind.name(),
            "tick": job.map(|j| json!({"job": j, "source": source})),
            "applied": self.applied.as_ref().map(|a| json!({
                "writes": a.applied,
                "notApplied": a.not_applied.iter().map(|n| json!({"index": n.index, "reason": n.reason})).collect::<Vec<_>>(),
                "diff": self.scanned.then(|| a.diff.to_json()),
            })),
            "records": self.records,
            "batchItemFailures": self.batch.as_ref().map(|b| b.response()),
            "retryWholeBatch": self.batch.as_ref().map(|b| b.retry_whole_batch),
            "environmentFault": self.environment_fault,
            "job": self.job,
            "error": self.error,
            "plannedWrites": writes_json(&self.planned, planned_json),
            "writes": writes_json(&self.writes, made_json),
            "diff": self.scanned.then(|| self.diff.to_json()),
        })
    }
}

/// What a replay did.
#[derive(Debug, Clone)]
pub struct ReplayReport<J: JobName> {
    /// One report per event file, in the order given.
    pub files: Vec<FileReport<J>>,
    /// `--write-snapshot`: the file and how many items of each table it
    /// holds.
    pub snapshot_written: Option<SnapshotWritten>,
}

impl<J: JobName> ReplayReport<J> {
    /// Whether any file failed ([`FileReport::failed`]): exit status
    /// [`EXIT_FAILURES`](super::EXIT_FAILURES).
    pub fn failed(&self) -> bool {
        self.files.iter().any(FileReport::failed)
    }

    /// Whether a job stopped at its deadline with work left.
    pub fn incomplete(&self) -> bool {
        self.files
            .iter()
            .any(|f| f.job.as_ref().is_some_and(|j| !j.complete))
    }
}

/// `--env NAME=VALUE`, checked when the command line is parsed (a usage
/// error: exit 2, with clap's hint).
pub fn env_pair(pair: &str) -> Result<String, String> {
    match pair.split_once('=') {
        Some((name, _)) if !name.trim().is_empty() => Ok(pair.to_owned()),
        _ => Err("expected NAME=VALUE, e.g. LOG_FORMAT=text".into()),
    }
}

/// The worker's variables for a command: `--env NAME=VALUE`, else the
/// process environment, with `TABLE_NAME` the table given.
pub fn worker_env(
    table: &str,
    env: &[String],
) -> Result<impl Fn(&str) -> Option<String> + use<>, CliError> {
    let mut overrides = std::collections::HashMap::new();
    for pair in env {
        let (name, value) = pair.split_once('=').ok_or_else(|| {
            CliError::Usage(format!(
                "--env {pair:?}: expected NAME=VALUE, e.g. LOG_FORMAT=text"
            ))
        })?;
        overrides.insert(name.trim().to_owned(), value.to_owned());
    }
    let table = table.to_owned();
    Ok(move |name: &str| {
        if name == "TABLE_NAME" {
            Some(table.clone())
        } else if let Some(v) = overrides.get(name) {
            Some(v.clone())
        } else {
            std::env::var(name).ok()
        }
    })
}

/// Check the worker's configuration before anything starts (assembling a
/// worker touches no table); the jobs it runs.
pub fn check_config<A: CliApp>(
    app: &AppTable,
    table: &str,
    env: &[String],
) -> Result<Vec<A::Job>, CliError> {
    let lookup = worker_env(table, env)?;
    let store: Arc<dyn Store> = Arc::new(worker_engine::store::DynamoStore::new(
        worker_engine::store::local_client("http://127.0.0.1:9"),
        table,
    ));
    let others = app
        .others
        .iter()
        .map(|o| (o.var, o.name.clone(), store.clone()))
        .collect();
    let parts = super::tables::WorkerParts {
        store,
        others,
        tx: Arc::new(super::tables::NoTransactions),
        lookup: &lookup,
        clock: Arc::new(SystemClock),
    };
    A::worker(parts)
        .map(|w| w.jobs())
        .map_err(|e| CliError::Usage(format!("worker configuration: {e}")))
}

/// A worker for a command, and the dry-run layer its writes go to (when
/// they are recorded instead of sent).
pub type CommandWorker<J> = (Worker<J>, Option<Arc<DryRunStore>>);

/// A worker for a command with the layers that know its writes, one per
/// table (the target first, [`Target::tables`]): dry-run layers (writes
/// planned, not sent) or recording layers (writes sent and written down
/// with their outcome).
pub type RecordedWorker<J> = (Worker<J>, Vec<WriteLayer>);

/// The worker over the target's table: a fixed clock with `now`, writes
/// recorded instead of sent with `dry_run`.
pub fn worker<A: CliApp>(
    target: &Target,
    now: Option<DateTime<Utc>>,
    dry_run: bool,
    env: &[String],
) -> Result<CommandWorker<A::Job>, CliError> {
    let base: Arc<dyn Store> = target.store.clone();
    let dry = dry_run.then(|| Arc::new(DryRunStore::new(base.clone())));
    let store: Arc<dyn Store> = match &dry {
        Some(d) => d.clone(),
        None => base,
    };
    let others = super::tables::worker_tables(&target.others, dry_run);
    Ok((
        app_worker::<A>(target, store, others, dry_run, now, env)?,
        dry,
    ))
}

/// [`worker`], whose writes, when sent, are also recorded (what the
/// command reports instead of reading the table back).
pub fn recording_worker<A: CliApp>(
    target: &Target,
    now: Option<DateTime<Utc>>,
    dry_run: bool,
    env: &[String],
) -> Result<RecordedWorker<A::Job>, CliError> {
    let (store, layer) =
        WriteLayer::over(&target.table, target.keys(), target.store.clone(), dry_run);
    let (others, other_layers) = recorded_worker_tables(&target.others, dry_run);
    let w = app_worker::<A>(target, store, others, dry_run, now, env)?;
    Ok((w, std::iter::once(layer).chain(other_layers).collect()))
}

fn app_worker<A: CliApp>(
    target: &Target,
    store: Arc<dyn Store>,
    others: super::tables::WorkerTables,
    dry_run: bool,
    now: Option<DateTime<Utc>>,
    env: &[String],
) -> Result<Worker<A::Job>, CliError> {
    let clock: Arc<dyn Clock> = match now {
        Some(t) => Arc::new(ManualClock::new(t)),
        None => Arc::new(SystemClock),
    };
    let lookup = worker_env(&target.table, env)?;
    let tx: Arc<dyn worker_engine::store::Transactions> = if dry_run {
        Arc::new(super::tables::NoTransactions)
    } else {
        Arc::new(target.store.as_ref().clone())
    };
    let parts = super::tables::WorkerParts {
        store,
        others,
        tx,
        lookup: &lookup,
        clock,
    };
    A::worker(parts).map_err(|e| CliError::Usage(format!("worker configuration: {e}")))
}

/// Load a snapshot file into the target's tables, each table the file
/// holds into its own (batched writes); the items loaded.
pub async fn load_snapshot(target: &Target, path: &std::path::Path) -> Result<usize, CliError> {
    let snapshot = read_app_snapshot(path, &target.app, &target.table)?;
    load_tables(target, snapshot).await
}

/// Load the tables of a snapshot read ([`read_app_snapshot`]), with a
/// progress bar; the items loaded.
async fn load_tables(
    target: &Target,
    snapshot: crate::replay::snapshot::TableItems,
) -> Result<usize, CliError> {
    let n: usize = snapshot.iter().map(|(_, items)| items.len()).sum();
    let pb = super::output::bar(n as u64, "loading snapshot");
    load_all(target, snapshot, 4, Some(&pb)).await?;
    pb.finish_and_clear();
    Ok(n)
}

/// Run the replay on an open table (the command without its printing).
pub async fn replay<A: CliApp>(
    target: &Target,
    args: &ReplayArgs,
) -> Result<ReplayReport<A::Job>, CliError> {
    let events: Vec<EventFile> = args
        .files
        .iter()
        .map(|p| load_event_file::<A::Job>(p))
        .collect::<Result<_, _>>()?;
    let snapshot = args
        .snapshot
        .as_ref()
        .map(|p| read_app_snapshot(p, &target.app, &target.table))
        .transpose()?;
    let dry_run = args.dry_run || remote_dry_run(target, args);
    let (app, layers) = recording_worker::<A>(target, args.now, dry_run, &args.env)?;
    let scan = target.is_embedded() || args.diff;
    let deployment = args.deploy.deployment::<A>()?;
    let stream_timeout = args.deploy.timeout(
        deployment
            .as_ref()
            .and_then(crate::template::Deployment::stream_timeout),
    );
    if let Some(snapshot) = snapshot {
        load_tables(target, snapshot).await?;
    }
    let mut files = Vec::with_capacity(events.len());
    for ev in &events {
        let timeout = match &ev.kind {
            EventKind::Stream { .. } => stream_timeout,
            EventKind::Schedule { job, .. } => args
                .deploy
                .timeout(deployment.as_ref().and_then(|d| d.job_timeout(job))),
        };
        files.push(
            replay_file(
                target,
                &app,
                &layers,
                ev,
                (args.apply_writes, scan),
                timeout,
            )
            .await?,
        );
    }
    let snapshot_written = match &args.write_snapshot {
        Some(path) => Some(write_all(path, target, &scan_all(target, None).await?)?),
        None => None,
    };
    Ok(ReplayReport {
        files,
        snapshot_written,
    })
}

/// Run one file; `layers`: the dry-run or recording layers of the
/// worker's tables; `(apply_writes, scan)`: perform the service's writes
/// first, scan the tables around the file for a diff.
async fn replay_file<J: JobName>(
    target: &Target,
    app: &Worker<J>,
    layers: &[WriteLayer],
    ev: &EventFile,
    (apply_writes, scan): (bool, bool),
    timeout: Option<std::time::Duration>,
) -> Result<FileReport<J>, CliError> {
    let store = target.store.as_ref();
    let keys = target.keys();
    let mut before = if scan {
        scan_all(target, None).await?
    } else {
        Vec::new()
    };
    let mut report = FileReport {
        file: ev.path.clone(),
        keys,
        kind: ev.kind.clone(),
        applied: None,
        batch: None,
        records: Vec::new(),
        job: None,
        error: None,
        environment_fault: None,
        planned: Vec::new(),
        writes: Vec::new(),
        scanned: scan,
        diff: TablesDiff::default(),
    };
    match &ev.kind {
        EventKind::Stream { .. } => {
            let decoded =
                decode_event(&ev.value).map_err(|e| CliError::input(&ev.path, e.to_string()))?;
            if apply_writes {
                let plan = apply::plan(&decoded);
                let applied =
                    super::tables::apply_by_table(store, &target.others, &decoded, &plan).await?;
                let diff = if scan {
                    let after = scan_all(target, None).await?;
                    let diff = diff_all(target, &before, &after);
                    before = after;
                    diff
                } else {
                    TablesDiff::default()
                };
                report.applied = Some(AppliedWrites {
                    applied,
                    not_applied: plan.not_applied,
                    diff,
                });
            }
            match app.handle_stream(&ev.value, deadline(timeout)).await {
                Ok(batch) => {
                    report.records = record_lines(&batch, &decoded, keys);
                    report.environment_fault = batch.environment_fault.clone();
                    report.batch = Some(batch);
                }
                Err(e) => report.error = Some(e.to_string()),
            }
        }
        EventKind::Schedule { .. } => match app.handle_schedule(&ev.value, deadline(timeout)).await
        {
            Ok(job) => report.job = Some(job),
            Err(e) => {
                if let EventError::Job(job) = &e
                    && job.kind() == FailureKind::Environment
                {
                    report.environment_fault = Some(job.to_string());
                }
                report.error = Some(e.to_string());
            }
        },
    }
    report.planned = take_planned(layers);
    report.writes = take_made(layers);
    if scan {
        let after = scan_all(target, None).await?;
        report.diff = diff_all(target, &before, &after);
    }
    Ok(report)
}

/// Whether the handlers' writes are planned instead of sent because the
/// table is not on this machine and remote writes are not allowed.
fn remote_dry_run(target: &Target, args: &ReplayArgs) -> bool {
    !target.is_embedded() && !is_loopback(&target.endpoint) && !args.remote.allow_remote_writes
}

/// `<app> replay`.
pub async fn run<A: CliApp>(args: ReplayArgs) -> Result<ExitCode, CliError> {
    let (app, table) = AppTable::of::<A>().named(&args.table.table, Scope::Every)?;
    // Check the input before starting anything.
    check_config::<A>(&app, &table, &args.env)?;
    for p in &args.files {
        load_event_file::<A::Job>(p)?;
    }
    if let Some(p) = &args.snapshot {
        read_app_snapshot(p, &app, &table)?;
    }
    if args.apply_writes || args.snapshot.is_some() {
        refuse_remote_writes(
            args.table.endpoint_url.as_deref(),
            args.remote,
            if args.apply_writes {
                "replay --apply-writes"
            } else {
                "replay --snapshot"
            },
        )?;
    }
    let target = Target::open(&args.table, &app, &table).await?;
    if args.diff && !target.is_embedded() {
        let (items, bytes, units) = super::run::scan_cost(&target).await?;
        eprintln!(
            "--diff scans {} twice per file: {items} items, {bytes} bytes by DescribeTable (refreshed about every 6 h), about {units:.0} read units per scan",
            target.describe()
        );
    }
    if remote_dry_run(&target, &args) && !args.dry_run {
        eprintln!(
            "{} is not on this machine: dry run, nothing is written (add --allow-remote-writes to write)",
            target.describe()
        );
    } else if !args.dry_run {
        target.announce_writes().await;
    }
    let report = replay::<A>(&target, &args).await?;
    if args.json {
        print_json(&json!({
            "table": target.table,
            "endpoint": if target.is_embedded() { Value::Null } else { Value::from(target.endpoint.clone()) },
            "now": args.now.map(super::rfc3339),
            "dryRun": args.dry_run || remote_dry_run(&target, &args),
            "files": report.files.iter().map(FileReport::to_json).collect::<Vec<_>>(),
            "snapshotWritten": report.snapshot_written.as_ref().map(SnapshotWritten::to_json),
            "failed": report.failed(),
        }));
    } else {
        println!(
            "replaying {} file(s) on {}{}",
            report.files.len(),
            target.describe(),
            args.now
                .map(|t| format!(", now = {}", super::rfc3339(t)))
                .unwrap_or_default()
        );
        for f in &report.files {
            for line in f.text(args.dry_run || remote_dry_run(&target, &args)) {
                println!("{line}");
            }
        }
        if let Some(w) = &report.snapshot_written {
            println!("snapshot written: {}", w.describe());
        }
    }
    if let Some(fault) = report
        .files
        .iter()
        .find_map(|f| f.environment_fault.clone())
    {
        return Err(CliError::Environment(fault));
    }
    Ok(super::exit_status(report.failed(), report.incomplete()))
}
