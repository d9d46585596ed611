//! `<app> table create|snapshot|load`: manage a table on any endpoint
//! (DynamoDB Local or AWS).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::output::{bar, counter};
use super::target::{AppTable, EndpointOpts, Target};
use super::{CliApp, CliError};
use crate::replay::snapshot::{load_items, read_snapshot, scan_table, write_snapshot};
use crate::store::StoreError;

/// Options of `table`.
#[derive(Debug, Clone, Args)]
pub struct TableArgs {
    #[command(subcommand)]
    pub command: TableCommand,
}

/// The `table` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum TableCommand {
    /// Create the table from the app's schema in code (keys, indexes, a
    /// NEW_AND_OLD_IMAGES stream) and wait until it is active.
    Create(CreateArgs),
    /// Write every item of the table to FILE (a JSON array of items in
    /// DynamoDB JSON, sorted by PK then SK).
    Snapshot(SnapshotArgs),
    /// Put every item of a snapshot FILE into the table (BatchWriteItem,
    /// several batches in flight).
    Load(LoadArgs),
}

/// Options of `table create`.
#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

/// Options of `table snapshot`.
#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    /// Where to write the snapshot.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

/// Options of `table load`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// The snapshot to load.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// BatchWriteItem calls in flight at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

/// `<app> table ...`.
pub async fn run<A: CliApp>(args: TableArgs) -> Result<ExitCode, CliError> {
    let app = AppTable::of::<A>();
    match args.command {
        TableCommand::Create(a) => create(a, &app).await,
        TableCommand::Snapshot(a) => snapshot(a, &app).await,
        TableCommand::Load(a) => load(a, &app).await,
    }
}

async fn create(args: CreateArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let target = Target::connect(&args.endpoint.endpoint_url, &args.endpoint.table, app).await;
    match target.store.create_table(&app.schema).await {
        Ok(()) => {
            let arn = target.stream_arn().await?;
            println!("created {} (stream {arn})", target.describe());
        }
        Err(StoreError::Permanent { code, .. }) if code == "ResourceInUseException" => {
            println!("{} already exists; left unchanged", target.describe());
        }
        Err(e) => return Err(e.into()),
    }
    // The app's other tables (their variables name them).
    for o in &target.others {
        match o.store.create_table(&o.table.schema).await {
            Ok(()) => println!("created table {} ({})", o.name, o.table.var),
            Err(StoreError::Permanent { code, .. }) if code == "ResourceInUseException" => {
                println!(
                    "table {} ({}) already exists; left unchanged",
                    o.name, o.table.var
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn snapshot(args: SnapshotArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let target = Target::open_endpoint(&args.endpoint, app).await?;
    let pb = counter("scanning");
    let items = scan_table(target.store.as_ref(), target.keys(), Some(&pb)).await?;
    pb.finish_and_clear();
    write_snapshot(&args.file, &items, target.keys())?;
    let m = target.store.metrics().snapshot();
    println!(
        "wrote {} items of {} to {} ({} scan pages, {:.1} RCU)",
        items.len(),
        target.describe(),
        args.file.display(),
        m.scan,
        m.read_capacity
    );
    Ok(ExitCode::SUCCESS)
}

async fn load(args: LoadArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let items = read_snapshot(&args.file, app.keys())?;
    let target = Target::open_endpoint(&args.endpoint, app).await?;
    let pb = bar(items.len() as u64, "loading");
    let started = std::time::Instant::now();
    let report = load_items(
        target.store.clone(),
        items,
        usize::from(args.concurrency),
        Some(&pb),
    )
    .await?;
    pb.finish_and_clear();
    println!(
        "loaded {} items from {} into {} in {:.1} s ({} BatchWriteItem requests, {} items retried, {:.1} WCU)",
        report.items,
        args.file.display(),
        target.describe(),
        started.elapsed().as_secs_f64(),
        report.requests,
        report.retried_items,
        report.consumed_capacity
    );
    Ok(ExitCode::SUCCESS)
}
