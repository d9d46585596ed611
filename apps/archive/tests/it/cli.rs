//! The `archive-worker` command line, parsed as `main` parses it and run
//! through the engine's command functions on DynamoDB Local: `replay
//! --apply-writes` of a captured batch, and `run` of both jobs.

use crate::support;

use std::process::ExitCode;

use archive_cli::{Archive, LOCAL_TABLE};
use archive_worker::items::Stage;
use archive_worker::keys::{self, ItemKey, LookupKey};
use archive_worker::schema::schema;
use aws_sdk_dynamodb::types::AttributeValue;
use support::*;
use worker_engine::stream::encode_event;
use worker_testkit::{Drain, TestTable};
use worker_toolkit::cli::Command;
use worker_toolkit::cli::replay::replay;
use worker_toolkit::cli::run as run_job;
use worker_toolkit::cli::target::{AppTable, Target};

fn command(args: &[&str]) -> Command {
    let cli = worker_toolkit::cli::parse_from::<Archive, _, _>(args).expect("a valid command line");
    let worker_toolkit::cli::AppCommand::Toolkit(command) = cli.command;
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_apply_writes_lists_the_files_and_flags_the_unzipped_one() {
    // Capture a batch: three files and the unzip of one of them.
    let source = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&source).await;
    let files = [
        "2024-03-01-10-00-00",
        "2024-03-01-11-00-00",
        "2024-03-02-00-00-00",
    ]
    .map(t);
    put(source.store.as_ref(), &files.map(file)).await;
    let unzipped = now().timestamp() - 3600;
    put(
        source.store.as_ref(),
        &[unzip_item(Stage::Unzipped, unzipped, &key_name(files[0]))],
    )
    .await;
    let records = drain.read().await;
    assert_eq!(records.len(), 4);
    let dir = std::env::temp_dir().join(format!("archive-cli-{}", source.name));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join("captured.json");
    let event = serde_json::to_string_pretty(&encode_event(&records, None)).expect("JSON");
    std::fs::write(&path, event).expect("write the event file");

    // Replay it on an empty table, performing the service's writes first.
    let table = TestTable::with_schema(&schema()).await;
    let Command::Replay(args) = command(&[
        "archive-worker",
        "replay",
        "--apply-writes",
        // A table the command did not start: the diff needs the scans.
        "--diff",
        "--endpoint-url",
        &table.endpoint,
        "--table",
        &table.name,
        "--now",
        NOW,
        path.to_str().expect("UTF-8"),
    ]) else {
        panic!("replay");
    };
    let target = Target::connect(&table.endpoint, &table.name, &AppTable::of::<Archive>()).await;
    let report = replay::<Archive>(&target, &args)
        .await
        .expect("the replay runs");
    std::fs::remove_dir_all(&dir).expect("remove the scratch directory");

    assert!(!report.failed());
    let [replayed] = report.files.as_slice() else {
        panic!("one file");
    };
    let applied = replayed.applied.as_ref().expect("--apply-writes");
    assert_eq!((applied.applied, applied.diff.target().added.len()), (4, 4));
    let handled = replayed
        .records
        .iter()
        .filter(|r| r.outcome == "handled")
        .count();
    assert_eq!(handled, 4, "{:?}", replayed.records);
    // The worker's writes: five lookup items, and the flag.
    let added: Vec<String> = replayed
        .diff
        .target()
        .added
        .iter()
        .map(|i| i[keys::PK].as_s().expect("PK").clone())
        .collect();
    assert_eq!(added.len(), 5, "{added:?}");
    for pk in ["root", "2024", "2024-03", "2024-03-01", "2024-03-02"] {
        assert!(added.contains(&pk.to_owned()), "{pk}");
    }
    let [flagged] = replayed.diff.target().changed.as_slice() else {
        panic!("one item changed: {:?}", replayed.diff);
    };
    assert_eq!(
        flagged.after.get(keys::IS_UNZIPPED),
        Some(&AttributeValue::Bool(true))
    );
    assert_eq!(
        walk(table.store.as_ref()).await,
        files.into_iter().collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_rebuilds_the_lookup_and_expires_unzipped_files_on_the_table_given() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let files = ["2024-03-01-10-00-00", "2024-04-02-00-00-00"].map(t);
    let expired = now().timestamp() - 25 * 3600;
    put(store, &files.map(file)).await;
    put(store, &[unzip_item(Stage::Unzipped, expired, "old.zip")]).await;

    for job in ["rebuild-lookup", "expire-unzipped"] {
        let Command::Run(args) = command(&[
            "archive-worker",
            "run",
            job,
            "--endpoint-url",
            &table.endpoint,
            "--table",
            &table.name,
            "--now",
            NOW,
            // A local run never publishes, bus or not.
            "--env",
            "NOTIFY_EVENT_BUS=archive-bus",
        ]) else {
            panic!("run");
        };
        assert_eq!(
            run_job::run::<Archive>(args).await.expect("the job runs"),
            ExitCode::SUCCESS
        );
    }
    assert_eq!(walk(store).await, files.into_iter().collect());
    assert!(get(store, ItemKey::Lookup(LookupKey::Root)).await.is_some());
    assert!(
        get(store, unzip_key(Stage::Unzipped, expired))
            .await
            .is_none()
    );

    let Command::Table(t) = command(&[
        "archive-worker",
        "table",
        "create",
        "--endpoint-url",
        &table.endpoint,
    ]) else {
        panic!("table");
    };
    let worker_toolkit::cli::table::TableCommand::Create(create) = t.command else {
        panic!("table create");
    };
    assert_eq!(
        create.endpoint.table,
        [LOCAL_TABLE],
        "nested subcommands too"
    );
    let Command::Dev(dev) = command(&["archive-worker", "dev"]) else {
        panic!("dev");
    };
    assert_eq!(dev.table.table, [LOCAL_TABLE]);
}
