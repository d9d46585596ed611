//! `<app> checkpoints list|reset JOB`: the resume checkpoints of the jobs
//! (the item each resumable job saves when it stops at the deadline, at
//! the key the app gives: [`CliApp::checkpoint_key`]). `reset` deletes one,
//! so the job's next run starts over.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::output::print_json;
use super::target::{AppTable, EndpointOpts, RemoteWriteOpts, Scope, Target, refuse_remote_writes};
use super::{CliApp, CliError};
use crate::replay::ddbjson::{item_to_json, key_text, readable_attributes};
use worker_engine::schedule::JobName;
use worker_engine::store::{ItemReader, ItemWriter, WriteOutcome};

/// Options of `checkpoints`.
#[derive(Debug, Clone, Args)]
pub struct CheckpointsArgs {
    /// `list` or `reset`.
    #[command(subcommand)]
    pub command: CheckpointsCommand,
}

/// The `checkpoints` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum CheckpointsCommand {
    /// Show each job's checkpoint (consistent reads of the checkpoint items
    /// only).
    List(ListArgs),
    /// Delete a job's checkpoint: its next run starts from the beginning.
    Reset(ResetArgs),
}

/// Options of `checkpoints list`.
#[derive(Debug, Clone, Default, Args)]
pub struct ListArgs {
    /// Print the checkpoints as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table and its endpoint.
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

/// Options of `checkpoints reset`.
#[derive(Debug, Clone, Default, Args)]
pub struct ResetArgs {
    /// The job whose checkpoint is deleted.
    #[arg(value_name = "JOB")]
    pub job: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table and its endpoint.
    #[command(flatten)]
    pub endpoint: EndpointOpts,
    /// Whether a table not on this machine may be written to.
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
}

/// `<app> checkpoints ...`.
pub async fn run<A: CliApp>(args: CheckpointsArgs) -> Result<ExitCode, CliError> {
    let app = AppTable::of::<A>();
    match args.command {
        CheckpointsCommand::List(a) => list::<A>(a, &app).await,
        CheckpointsCommand::Reset(a) => reset::<A>(a, &app).await,
    }
}

async fn list<A: CliApp>(args: ListArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let (app, table) = app.named(&args.endpoint.table, Scope::Every)?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    let keys = target.keys();
    let mut rows = Vec::new();
    for job in A::Job::ALL {
        let Some(key) = A::checkpoint_key(*job) else {
            rows.push((job.as_str(), None, None));
            continue;
        };
        let item = target.store.get(&key, true).await?;
        rows.push((job.as_str(), Some(key), item));
    }
    if args.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|(job, key, item)| {
                json!({
                    "job": job,
                    "key": key.as_ref().map(|k| key_text(k, keys)),
                    "checkpoint": item.as_ref().map(item_to_json),
                })
            })
            .collect();
        print_json(&json!({"table": target.table, "checkpoints": v}));
        return Ok(ExitCode::SUCCESS);
    }
    println!("checkpoints in {}", target.describe());
    for (job, key, item) in &rows {
        match (key, item) {
            (None, _) => println!("  {job:<20} (keeps no checkpoint)"),
            (Some(k), None) => println!("  {job:<20} none ({})", key_text(k, keys)),
            (Some(k), Some(i)) => println!(
                "  {job:<20} {} {}",
                key_text(k, keys),
                readable_attributes(i, keys)
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn reset<A: CliApp>(args: ResetArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let job = A::Job::parse(&args.job).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown job {:?}: expected one of {}",
            args.job,
            A::Job::known()
        ))
    })?;
    let key = A::checkpoint_key(job)
        .ok_or_else(|| CliError::Usage(format!("job {job} keeps no checkpoint")))?;
    refuse_remote_writes(
        Some(&args.endpoint.endpoint_url),
        args.remote,
        "checkpoints reset",
    )?;
    let (app, table) = app.named(&args.endpoint.table, Scope::Every)?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    target.announce_writes().await;
    let before = target.store.get(&key, true).await?;
    let deleted = match &before {
        Some(_) => target.store.delete(&key, None).await? == WriteOutcome::Applied,
        None => false,
    };
    let keys = target.keys();
    if args.json {
        print_json(&json!({
            "job": job.as_str(),
            "key": key_text(&key, keys),
            "deleted": deleted,
            "checkpoint": before.as_ref().map(item_to_json),
        }));
    } else if deleted {
        println!(
            "deleted the checkpoint of {job} ({}): its next run starts over",
            key_text(&key, keys)
        );
    } else {
        println!(
            "{job} has no checkpoint ({}); nothing to reset",
            key_text(&key, keys)
        );
    }
    Ok(ExitCode::SUCCESS)
}
