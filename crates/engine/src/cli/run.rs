//! `<app> run JOB`: run one scheduled job now, on a snapshot or a
//! table, and show its report and what it changed.

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{Value, json};

use super::output::{diff_block, job_spinner, planned_json, planned_line, print_json};
use super::replay::{check_config, load_snapshot, worker};
use super::target::{AppTable, TableOpts, Target};
use super::{CliApp, CliError, EXIT_FAILURES, parse_now};
use crate::replay::diff::diff_tables;
use crate::replay::snapshot::{read_snapshot, scan_table, write_snapshot};
use crate::schedule::JobName;

/// Options of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The job to run (the app lists its jobs: [`super::job_names`]).
    #[arg(value_name = "JOB")]
    pub job: String,
    /// Load the table from this snapshot first (a JSON array of items in
    /// DynamoDB JSON).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// The time the job sees (RFC 3339). Default: real time.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// Write the table after the run to this file, sorted by PK then SK.
    #[arg(long, value_name = "FILE")]
    pub write_snapshot: Option<PathBuf>,
    /// Compute and print what the job would write; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Set a worker configuration variable, as in the Lambda environment
    /// (repeatable), e.g. --env LOG_FORMAT=text.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub table: TableOpts,
}

/// `<app> run`.
pub async fn run<A: CliApp>(args: RunArgs) -> Result<ExitCode, CliError> {
    let job = A::Job::parse(&args.job).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown job {:?}: expected one of {}",
            args.job,
            A::Job::known()
        ))
    })?;
    let app = AppTable::of::<A>();
    let available = check_config::<A>(&args.table.table, &args.env)?;
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
        read_snapshot(p, app.keys())?;
    }
    let target = Target::open(&args.table, &app).await?;
    if let Some(p) = &args.snapshot {
        load_snapshot(&target, p).await?;
    }
    let keys = target.keys();
    let (worker, dry) = worker::<A>(&target, args.now, args.dry_run, &args.env)?;
    let before = scan_table(target.store.as_ref(), keys, None).await?;
    let (spinner, ticker) = job_spinner(job.as_str(), target.store.clone());
    let started = std::time::Instant::now();
    let metrics_before = target.store.metrics().snapshot();
    let result = worker.run_job(job, None).await;
    ticker.abort();
    spinner.finish_and_clear();
    let elapsed = started.elapsed();
    let metrics = target.store.metrics().snapshot().since(&metrics_before);
    let planned = dry.map(|d| d.take_planned()).unwrap_or_default();
    let after = scan_table(target.store.as_ref(), keys, None).await?;
    let diff = diff_tables(&before, &after, keys);
    let written = match &args.write_snapshot {
        Some(path) => {
            write_snapshot(path, &after, keys)?;
            Some((path.display().to_string(), after.len()))
        }
        None => None,
    };
    let failed = result.is_err();
    if args.json {
        let (report, error) = match &result {
            Ok(r) => (serde_json::to_value(r).unwrap_or(Value::Null), Value::Null),
            Err(e) => (Value::Null, Value::from(e.to_string())),
        };
        print_json(&json!({
            "job": job.as_str(),
            "now": args.now.map(super::rfc3339),
            "dryRun": args.dry_run,
            "report": report,
            "error": error,
            "elapsedMs": elapsed.as_millis() as u64,
            "metrics": metrics,
            "plannedWrites": planned.iter().map(|w| planned_json(w, keys)).collect::<Vec<_>>(),
            "diff": diff.to_json(keys),
            "snapshotWritten": written.as_ref().map(|(f, n)| json!({"file": f, "items": n})),
        }));
    } else {
        println!(
            "ran {job} on {}{} in {:.1} s",
            target.describe(),
            args.now
                .map(|t| format!(", now = {}", super::rfc3339(t)))
                .unwrap_or_default(),
            elapsed.as_secs_f64()
        );
        match &result {
            Ok(r) => {
                println!(
                    "{}: {}{}",
                    r.job,
                    r.summary,
                    if r.complete { "" } else { " (stopped early)" }
                );
                println!(
                    "details: {}",
                    serde_json::to_string_pretty(&r.details).unwrap_or_default()
                );
            }
            Err(e) => println!("FAILED: {e}"),
        }
        println!(
            "requests: {} scan pages, {} queries, {} gets, {} writes; {:.1} RCU, {:.1} WCU",
            metrics.scan,
            metrics.query,
            metrics.get_item + metrics.batch_get_item,
            metrics.write_requests(),
            metrics.read_capacity,
            metrics.write_capacity
        );
        if args.dry_run {
            println!(
                "planned writes (dry run, nothing written): {}",
                planned.len()
            );
            for w in &planned {
                println!("  {}", planned_line(w, keys));
            }
        } else {
            println!("table changes: {}", diff.summary());
            for l in diff_block(&diff, keys, "  ") {
                println!("{l}");
            }
        }
        if let Some((file, n)) = &written {
            println!("snapshot written: {file} ({n} items)");
        }
    }
    Ok(if failed {
        ExitCode::from(EXIT_FAILURES)
    } else {
        ExitCode::SUCCESS
    })
}
