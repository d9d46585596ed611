//! `nishiki-worker table create|snapshot|load`: manage a table on any
//! endpoint (DynamoDB Local or AWS).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::CliError;
use super::output::{bar, counter};
use super::target::{EndpointOpts, KEYS, Target};
use worker_engine::replay::snapshot::{load_items, read_snapshot, scan_table, write_snapshot};
use worker_engine::store::StoreError;

/// Options of `table`.
#[derive(Debug, Clone, Args)]
pub struct TableArgs {
    #[command(subcommand)]
    pub command: TableCommand,
}

/// The `table` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum TableCommand {
    /// Create the table from the schema in code (keys, the service's four
    /// indexes, the worker's invitation-expiry index, a NEW_AND_OLD_IMAGES
    /// stream) and wait until it is active.
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

/// `nishiki-worker table ...`.
pub async fn run(args: TableArgs) -> Result<ExitCode, CliError> {
    match args.command {
        TableCommand::Create(a) => create(a).await,
        TableCommand::Snapshot(a) => snapshot(a).await,
        TableCommand::Load(a) => load(a).await,
    }
}

async fn create(args: CreateArgs) -> Result<ExitCode, CliError> {
    let target = Target::connect(&args.endpoint.endpoint_url, &args.endpoint.table).await;
    match target.store.create_table(&crate::schema::nishiki()).await {
        Ok(()) => {
            let arn = target.stream_arn().await?;
            println!("created {} (stream {arn})", target.describe());
        }
        Err(StoreError::Permanent { code, .. }) if code == "ResourceInUseException" => {
            println!("{} already exists; left unchanged", target.describe());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(ExitCode::SUCCESS)
}

async fn snapshot(args: SnapshotArgs) -> Result<ExitCode, CliError> {
    let target = Target::open_endpoint(&args.endpoint).await?;
    let pb = counter("scanning");
    let items = scan_table(target.store.as_ref(), KEYS, Some(&pb)).await?;
    pb.finish_and_clear();
    write_snapshot(&args.file, &items, KEYS)?;
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

async fn load(args: LoadArgs) -> Result<ExitCode, CliError> {
    let items = read_snapshot(&args.file, KEYS)?;
    let target = Target::open_endpoint(&args.endpoint).await?;
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
