//! `shop-worker backfill`: the backfill pass run to its end on a table
//! (no deadline), with a progress bar over the table's item count.

use std::process::ExitCode;

use clap::Args;
use worker_engine::schedule::{JobRun, Tick, TickSource};
use worker_toolkit::cli::target::{AppTable, Scope, TableOpts, Target};
use worker_toolkit::cli::{CliError, output};

use crate::Shop;
use shop_worker::derive::backfill::{Backfill, Figures};
use shop_worker::keys::Job;

/// Options of `backfill`.
#[derive(Debug, Clone, Args)]
pub struct BackfillArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table and its endpoint (by default an embedded DynamoDB Local,
    /// empty).
    #[command(flatten)]
    pub table: TableOpts,
}

/// `shop-worker backfill`.
pub async fn run(args: BackfillArgs) -> Result<ExitCode, CliError> {
    let (app, table) = AppTable::of::<Shop>().named(&args.table.table, Scope::Every)?;
    let target = Target::open(&args.table, &app, &table).await?;
    target.require_table().await?;
    let items = target
        .store
        .client()
        .describe_table()
        .table_name(&target.table)
        .send()
        .await
        .ok()
        .and_then(|d| d.table?.item_count)
        .and_then(|n| u64::try_from(n).ok());
    // A bar when the table tells its item count, a spinner otherwise.
    let pb = match items.filter(|n| *n > 0) {
        Some(n) => output::bar(n, "read"),
        None => output::counter("read"),
    };
    let backfill = Backfill::new(target.store.clone());
    let run = JobRun {
        now: chrono::Utc::now(),
        tick: Tick {
            job: Job::Backfill,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline: None,
        margin: std::time::Duration::ZERO,
    };
    let progress = |f: &Figures| {
        pb.set_position(f.scanned);
        pb.set_message(format!("read, {} written", f.written));
    };
    let report = backfill
        .tick(&run, &progress)
        .await
        .map_err(|e| match e.store_error() {
            Some(store) => store.clone().into(),
            None => CliError::Usage(e.to_string()),
        })?;
    pb.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        println!("backfill on {}: {}", target.describe(), report.summary);
    }
    Ok(ExitCode::SUCCESS)
}
