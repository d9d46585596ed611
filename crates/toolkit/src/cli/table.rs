//! `<app> table create|snapshot|load`: manage a table on any endpoint
//! (DynamoDB Local or AWS). For an app of several tables, each command
//! covers every table ([`super::tables`]): `create` makes them all,
//! `snapshot` writes them all to one file, `load` loads each table the
//! file holds.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use serde_json::json;

use super::output::{bar, counter, print_json};
use super::tables::{counts_json, load_all, read_app_snapshot, scan_all, table_counts, write_all};
use super::target::{AppTable, EndpointOpts, RemoteWriteOpts, Scope, Target, refuse_remote_writes};
use super::{CliApp, CliError};
use worker_engine::store::{BatchWriteReport, StoreError};

/// Options of `table`.
#[derive(Debug, Clone, Args)]
pub struct TableArgs {
    /// `create`, `snapshot` or `load`.
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
    /// DynamoDB JSON, sorted by PK then SK; for an app of several tables,
    /// every table: a JSON object of such arrays by table name).
    Snapshot(SnapshotArgs),
    /// Put every item of a snapshot FILE into the table (BatchWriteItem,
    /// several batches in flight; for an app of several tables, each table
    /// the file names into that table).
    Load(LoadArgs),
}

/// Options of `table create`.
#[derive(Debug, Clone, Default, Args)]
pub struct CreateArgs {
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table (every table of the app) and its endpoint.
    #[command(flatten)]
    pub endpoint: EndpointOpts,
    /// Whether a table not on this machine may be created.
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
}

/// Options of `table snapshot`.
#[derive(Debug, Clone, Default, Args)]
pub struct SnapshotArgs {
    /// Where to write the snapshot.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table and its endpoint.
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

/// Options of `table load`.
#[derive(Debug, Clone, Default, Args)]
pub struct LoadArgs {
    /// The snapshot to load.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// BatchWriteItem calls in flight at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
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
    let e = &args.endpoint;
    refuse_remote_writes(Some(&e.endpoint_url), args.remote, "table create")?;
    let (app, table) = app.named(&e.table, Scope::Every)?;
    let target = Target::connect_with(&e.endpoint_url, &table, &app, &e.aws).await;
    target.announce_writes().await;
    let (created, arn) = match target.store.create_table(&app.schema).await {
        Ok(()) => (true, target.stream_arn().await?),
        Err(StoreError::Permanent { code, .. }) if code == "ResourceInUseException" => {
            (false, target.stream_arn().await.unwrap_or_default())
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        print_json(&json!({
            "table": target.table, "endpoint": target.endpoint,
            "created": created, "streamArn": arn,
        }));
    } else if created {
        println!("created {} (stream {arn})", target.describe());
    } else {
        println!("{} already exists; left unchanged", target.describe());
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
    let (app, table) = app.named(&args.endpoint.table, Scope::OneOrEvery)?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    target.require_others(|_| true).await?;
    let pb = counter("scanning");
    let scans = scan_all(&target, Some(&pb)).await?;
    pb.finish_and_clear();
    let written = write_all(&args.file, &target, &scans)?;
    // The other tables share the target's counters.
    let m = target.store.metrics().snapshot();
    let several = written.tables.len() > 1;
    if args.json {
        let mut v = json!({
            "table": target.table, "endpoint": target.endpoint,
            "file": written.file, "items": written.items(),
            "scanPages": m.scan, "readCapacity": m.read_capacity,
        });
        if several {
            v["tables"] = counts_json(&written.tables);
        }
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    let of = if several {
        format!(
            "{} tables at {} ({})",
            written.tables.len(),
            target.endpoint,
            table_counts(&written.tables)
        )
    } else {
        target.describe()
    };
    println!(
        "wrote {} items of {of} to {} ({} scan pages, {:.1} RCU)",
        written.items(),
        args.file.display(),
        m.scan,
        m.read_capacity
    );
    Ok(ExitCode::SUCCESS)
}

async fn load(args: LoadArgs, app: &AppTable) -> Result<ExitCode, CliError> {
    let (app, table) = app.named(&args.endpoint.table, Scope::Every)?;
    let snapshot = read_app_snapshot(&args.file, &app, &table)?;
    refuse_remote_writes(Some(&args.endpoint.endpoint_url), args.remote, "table load")?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    target
        .require_others(|name| snapshot.iter().any(|(n, _)| n == name))
        .await?;
    target.announce_writes().await;
    let n: usize = snapshot.iter().map(|(_, items)| items.len()).sum();
    let pb = bar(n as u64, "loading");
    let started = std::time::Instant::now();
    let loaded = load_all(&target, snapshot, usize::from(args.concurrency), Some(&pb)).await?;
    pb.finish_and_clear();
    let report = loaded
        .iter()
        .fold(BatchWriteReport::default(), |mut acc, (_, r)| {
            acc.items += r.items;
            acc.requests += r.requests;
            acc.retried_items += r.retried_items;
            acc.consumed_capacity += r.consumed_capacity;
            acc
        });
    // A snapshot of several tables names each; a plain array is the target.
    let several = app.several && loaded.iter().any(|(name, _)| *name != target.table);
    let counts: Vec<(String, usize)> = loaded
        .iter()
        .map(|(name, r)| (name.clone(), r.items))
        .collect();
    if args.json {
        let mut v = json!({
            "table": target.table, "endpoint": target.endpoint,
            "file": args.file.display().to_string(), "items": report.items,
            "requests": report.requests, "retriedItems": report.retried_items,
            "writeCapacity": report.consumed_capacity,
            "elapsedMs": started.elapsed().as_millis() as u64,
        });
        if several {
            v["tables"] = counts_json(&counts);
        }
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    let into = if several {
        format!(
            "{} table{} at {} ({})",
            counts.len(),
            if counts.len() == 1 { "" } else { "s" },
            target.endpoint,
            table_counts(&counts)
        )
    } else {
        target.describe()
    };
    println!(
        "loaded {} items from {} into {into} in {:.1} s ({} BatchWriteItem requests, {} items retried, {:.1} WCU)",
        report.items,
        args.file.display(),
        started.elapsed().as_secs_f64(),
        report.requests,
        report.retried_items,
        report.consumed_capacity
    );
    Ok(ExitCode::SUCCESS)
}
