//! The minimal example app (`examples/minimal.rs`) on DynamoDB Local: the
//! stream keeps `TitleKey` right and a replayed batch changes nothing; the
//! scheduled job purges expired notes, never a renewed one; the app's
//! description gives the deployed functions; its command line (parsed, not
//! spawned) replays an event file and runs the job with the app's defaults.

#[allow(dead_code)] // the example's Lambda main is not run here
#[path = "../../examples/minimal.rs"]
mod minimal;

use std::sync::Arc;
use worker_testkit::deploy::Deployed;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use minimal::{APP, Job, Minimal, Note, keys, schema};
use worker_engine::RecordingPublisher;
use worker_engine::Sharing;
use worker_engine::settings::{Settings, TABLE_NAME, WORKER_JOB};
use worker_toolkit::cli::{AppCommand, CliApp, command};

const LOCAL_TABLE: &str = Minimal::DEFAULT_TABLE;
use serde_json::{Value, json};
use worker_engine::EventFunction;
use worker_engine::Worker;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::metrics::{CapturedLines, Emitter};
use worker_engine::store::{ItemReader, ItemWriter, Store};
use worker_engine::stream::RecordStatus;
use worker_engine::stream::encode_event;
use worker_testkit::layers::{RaceBeforeDelete, ServiceWrite};
use worker_testkit::{Drain, TestTable};
use worker_toolkit::cli::Command;
use worker_toolkit::cli::replay::{check_config, replay};
use worker_toolkit::cli::table::TableCommand;
use worker_toolkit::cli::target::{AppTable, Target};
use worker_toolkit::cli::{dev, run as run_job};

const NOW: &str = "2024-03-25T00:00:00Z";

fn now() -> DateTime<Utc> {
    NOW.parse().unwrap()
}

fn note(id: &str, title: &str, title_key: Option<&str>, expires_at: Option<i64>) -> Note {
    Note {
        id: id.into(),
        title: title.into(),
        title_key: title_key.map(str::to_owned),
        expires_at,
    }
}

fn app(store: Arc<dyn Store>) -> Worker<Job> {
    APP.table_worker(
        store,
        Settings::for_table("notes"),
        Arc::new(RecordingPublisher::default()),
        Arc::new(ManualClock::new(now())),
        Sharing::Separate,
    )
}

async fn put(table: &TestTable, notes: &[Note]) {
    for n in notes {
        table.store.put(n.to_item(), None).await.expect("put note");
    }
}

async fn read(table: &TestTable, id: &str) -> Option<Note> {
    let item = table.store.get(&keys::note(id), true).await.expect("get");
    item.map(|i| Note::from_item(&i).expect("decodes").expect("a note"))
}

async fn title_key(table: &TestTable, id: &str) -> Option<String> {
    read(table, id).await.expect("note exists").title_key
}

#[test]
fn keys_and_items_round_trip() {
    let n = note("n1", "Hello", Some("hello"), Some(42));
    let item = n.to_item();
    let names = |i: &Item| {
        let mut v: Vec<String> = i.keys().cloned().collect();
        v.sort();
        v
    };
    let mut expected = vec![
        keys::EXPIRES_AT,
        keys::PK,
        keys::SK,
        keys::TITLE,
        keys::TITLE_KEY,
    ];
    expected.sort();
    assert_eq!(names(&item), expected, "serde names are the key module's");
    assert_eq!(item[keys::PK], AttributeValue::S("NOTE#n1".into()));
    assert_eq!(keys::note_id(&item), Some("n1"));
    assert_eq!(Note::from_item(&item), Ok(Some(n.clone())));

    let mut other = keys::note("n1");
    other.insert(keys::SK.into(), AttributeValue::S("OTHER".into()));
    assert_eq!(Note::from_item(&other), Ok(None), "not a note");
    let mut bad = n.to_item();
    bad.insert(keys::EXPIRES_AT.into(), AttributeValue::S("secret".into()));
    let err = Note::from_item(&bad).unwrap_err();
    assert!(!err.contains("secret"), "values are redacted: {err}");
}

#[test]
fn the_description_gives_the_deployed_functions() {
    APP.check().expect("a consistent description");
    assert_eq!(
        schema().key_attributes(),
        [keys::PK, keys::SK, keys::EXPIRES_AT]
    );
    let functions = APP.functions();
    let [stream, purge] = functions.as_slice() else {
        panic!("two functions: {functions:?}");
    };
    assert!(stream.reads_stream);
    assert_eq!(stream.dynamodb_actions, ["dynamodb:UpdateItem"]);
    // The common variables, each where it is read; no local-only one.
    assert!(stream.env_vars.contains(&TABLE_NAME) && stream.env_vars.contains(&"PARKING_TABLE"));
    assert!(!stream.env_vars.contains(&WORKER_JOB));
    assert!(!stream.env_vars.contains(&"AWS_ENDPOINT_URL_DYNAMODB"));
    assert_eq!(
        (purge.logical_id, purge.job),
        ("PurgeExpiredFunction", Some(Job::PurgeExpired))
    );
    assert!(purge.env_vars.contains(&TABLE_NAME) && purge.env_vars.contains(&WORKER_JOB));
    assert!(!purge.env_vars.contains(&"PARKING_TABLE"));
    assert_eq!(
        purge.dynamodb_actions,
        ["dynamodb:DeleteItem", "dynamodb:Query"]
    );
    assert_eq!(purge.indexes, [keys::BY_EXPIRY_INDEX]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn title_keys_follow_titles_and_replays_change_nothing() {
    let table = TestTable::with_schema(&schema()).await;
    let lines = CapturedLines::default();
    let app = app(table.store.clone()).with_metrics(Emitter::new(
        APP.namespace,
        "stream",
        Arc::new(lines.clone()),
    ));
    let mut drain = Drain::new(&table).await;
    put(
        &table,
        &[
            note("a", "Hello World", None, None),
            note("b", "done", Some("done"), None),
            note("c", "MiXeD", Some("stale"), None),
        ],
    )
    .await;

    // The three inserts, then the records of the handler's own two writes.
    let inserts = drain.read().await;
    assert_eq!(inserts.len(), 3);
    let writes_before = table.store.metrics().snapshot();
    drain.run_batch(&app, &inserts).await;
    assert_eq!(drain.run(&app).await, 2, "one record per write");
    let writes = table.store.metrics().snapshot().since(&writes_before);
    assert_eq!(writes.update_item, 2, "note b was already right: no write");
    let handled: usize = drain.batches.iter().map(|b| b.handled).sum();
    let skipped: usize = drain.batches.iter().map(|b| b.skipped).sum();
    assert_eq!((handled, skipped), (2, 3));
    let counted: u64 = lines
        .lines()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("EMF line")["TitleKeyWrites"].as_u64())
        .map(|n| n.expect("every stream line counts the handler's writes"))
        .sum();
    assert_eq!(counted, 2);
    assert_eq!(title_key(&table, "a").await.as_deref(), Some("hello world"));
    assert_eq!(title_key(&table, "b").await.as_deref(), Some("done"));
    assert_eq!(title_key(&table, "c").await.as_deref(), Some("mixed"));

    // At least once: the same batch again, twice, changes nothing.
    let settled = table.snapshot().await;
    let event = encode_event(&inserts, None);
    for _ in 0..2 {
        let report = app.invoke_stream(&event).await.expect("stream event");
        assert!(report.batch_item_failures.is_empty(), "{report:?}");
        assert_eq!(report.rejected + report.malformed + report.failed, 0);
        assert_eq!(table.snapshot().await, settled);
    }
    drain.run(&app).await;
    assert_eq!(table.snapshot().await, settled);

    // Out of order: a new title lands, then the old insert is delivered
    // again. The condition keeps the old title's key from overwriting.
    put(
        &table,
        &[note("a", "Second Title", Some("hello world"), None)],
    )
    .await;
    drain.run(&app).await;
    assert_eq!(
        title_key(&table, "a").await.as_deref(),
        Some("second title")
    );
    let report = app.invoke_stream(&event).await.expect("stream event");
    let of_a = report
        .records
        .iter()
        .find(|r| r.keys.as_deref() == Some("PK=NOTE#a, SK=NOTE"))
        .expect("the record of note a");
    assert_eq!(
        of_a.status,
        RecordStatus::Skipped {
            reason: "title changed since".into()
        }
    );
    assert_eq!(
        title_key(&table, "a").await.as_deref(),
        Some("second title")
    );

    // A removal costs nothing.
    drain.run(&app).await;
    table
        .store
        .delete(&keys::note("b"), None)
        .await
        .expect("delete");
    let before = table.store.metrics().snapshot();
    drain.run(&app).await;
    let last = drain.batches.last().expect("a batch");
    assert_eq!((last.handled, last.skipped), (0, 1));
    assert_eq!(
        table.store.metrics().snapshot().since(&before).update_item,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_purges_expired_notes_but_not_a_renewed_one() {
    let table = TestTable::with_schema(&schema()).await;
    let t = now().timestamp();
    let renewed = note("renewed", "r", Some("r"), Some(t + 86_400));
    put(
        &table,
        &[
            note("old", "o", Some("o"), Some(t - 3_600)),
            note("renewed", "r", Some("r"), Some(t - 60)),
            note("later", "l", Some("l"), Some(t + 3_600)),
            note("kept", "k", Some("k"), None),
        ],
    )
    .await;
    // The owner renews a note between the job's query and its delete.
    let store = Arc::new(RaceBeforeDelete::new(
        table.store.clone(),
        keys::note("renewed"),
        ServiceWrite::Put(renewed.to_item()),
    ));
    let lines = CapturedLines::default();
    let app = app(store.clone()).with_metrics(Emitter::new(
        APP.namespace,
        "schedule",
        Arc::new(lines.clone()),
    ));

    let tick = json!({"job": "purge-expired", "scheduledTime": NOW});
    let report = app.invoke_schedule(&tick).await.expect("tick runs");
    assert!(store.fired(), "the renewal raced the delete");
    assert_eq!(report["job"], "purge-expired");
    assert_eq!(report["complete"], true);
    assert_eq!(
        report["details"],
        json!({"expired": 2, "purged": 1, "renewed": 1})
    );
    assert!(read(&table, "old").await.is_none());
    assert_eq!(read(&table, "renewed").await, Some(renewed));
    assert!(read(&table, "later").await.is_some());
    assert!(read(&table, "kept").await.is_some());

    let emf: Value = serde_json::from_str(&lines.lines()[0]).expect("one EMF line");
    assert_eq!(
        (&emf["Job"], &emf["JobRuns"], &emf["NotesPurged"]),
        (&json!("purge-expired"), &json!(1), &json!(1))
    );

    // Idempotent per tick: the same tick again finds nothing.
    let again = app.invoke_schedule(&tick).await.expect("tick runs");
    assert_eq!(again["details"]["purged"], 0);
    let unknown = app.invoke_schedule(&json!({"job": "vacuum"})).await;
    assert!(unknown.unwrap_err().to_string().contains("purge-expired"));
}

/// The example's command line, parsed as `main` parses it.
fn parse(args: &[&str]) -> Command {
    let cli = worker_toolkit::cli::parse_from::<Minimal, _, _>(args).expect("a valid command line");
    let AppCommand::Toolkit(command) = cli.command;
    command
}

/// A fresh directory for the event files of one test.
fn scratch_dir(table: &TestTable) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("minimal-cli-{}", table.name));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

#[test]
fn the_command_line_gives_the_app_defaults() {
    command::<Minimal>().debug_assert();

    let Command::Replay(replay) = parse(&["minimal", "replay", "events.json"]) else {
        panic!("replay");
    };
    assert_eq!(replay.table.table, [LOCAL_TABLE]);
    assert_eq!(
        replay.table.endpoint_url, None,
        "the embedded DynamoDB Local"
    );
    let Command::Dev(dev) = parse(&["minimal", "dev"]) else {
        panic!("dev");
    };
    assert_eq!(dev.table.table, [LOCAL_TABLE]);
    let Command::Table(t) = parse(&[
        "minimal",
        "table",
        "create",
        "--endpoint-url",
        "http://127.0.0.1:8000",
    ]) else {
        panic!("table");
    };
    let TableCommand::Create(create) = t.command else {
        panic!("table create");
    };
    assert_eq!(
        create.endpoint.table,
        [LOCAL_TABLE],
        "nested subcommands too"
    );
    let Command::Run(run) = parse(&["minimal", "run", "purge-expired", "--table", "other"]) else {
        panic!("run");
    };
    assert_eq!(
        (run.job.as_str(), run.table.table[0].as_str()),
        ("purge-expired", "other")
    );

    let e = command::<Minimal>()
        .try_get_matches_from(["minimal", "run", "vacuum"])
        .unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    assert!(
        e.to_string().contains("[possible values: purge-expired]"),
        "{e}"
    );

    // `dev` ticks each job on its local cron from the app's description.
    let schedules = dev::schedules::<Minimal>(&[]).expect("valid schedules");
    let [(job, cron, _)] = schedules.as_slice() else {
        panic!("one job: {schedules:?}");
    };
    assert_eq!(
        (job.as_str(), cron.as_str()),
        ("purge-expired", "0 * * * *")
    );
    // The worker is configured from the lookup, as on Lambda.
    assert_eq!(
        check_config::<Minimal>(&AppTable::of::<Minimal>(), LOCAL_TABLE, &[])
            .expect("no configuration needed"),
        [Job::PurgeExpired]
    );
    let e = check_config::<Minimal>(
        &AppTable::of::<Minimal>(),
        LOCAL_TABLE,
        &["WORKER_JOB=vacuum".into()],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("expected one of purge-expired"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reports_each_record_and_the_title_key_it_set() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    put(
        &table,
        &[
            note("a", "Hello World", None, None),
            note("b", "done", Some("done"), None),
        ],
    )
    .await;
    let inserts = drain.read().await;
    assert_eq!(inserts.len(), 2);
    let dir = scratch_dir(&table);
    let file = dir.join("inserts.json");
    let event = serde_json::to_string_pretty(&encode_event(&inserts, None)).expect("JSON");
    std::fs::write(&file, event).expect("write the event file");

    let Command::Replay(args) = parse(&[
        "minimal",
        "replay",
        // A table the command did not start: the diff needs the scans.
        "--diff",
        "--endpoint-url",
        &table.endpoint,
        "--table",
        &table.name,
        "--now",
        NOW,
        file.to_str().expect("a UTF-8 path"),
    ]) else {
        panic!("replay");
    };
    let target = Target::connect(&table.endpoint, &table.name, &AppTable::of::<Minimal>()).await;
    let report = replay::<Minimal>(&target, &args)
        .await
        .expect("the replay runs");
    std::fs::remove_dir_all(&dir).expect("remove the scratch directory");

    assert!(!report.failed());
    let [replayed] = report.files.as_slice() else {
        panic!("one file: {:?}", report.files);
    };
    assert_eq!(replayed.kind.name(), "stream");
    let mut outcomes: Vec<(Option<&str>, &str, &str)> = replayed
        .records
        .iter()
        .map(|r| (r.key.as_deref(), r.outcome, r.detail.as_str()))
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            (Some("NOTE#a/NOTE"), "handled", "title key set"),
            (Some("NOTE#b/NOTE"), "skipped", "title key up to date"),
        ]
    );
    let batch = replayed.batch.as_ref().expect("a stream file's batch");
    assert!(batch.batch_item_failures.is_empty(), "{batch:?}");
    assert!(replayed.applied.is_none(), "no --apply-writes");

    // The diff is the worker's one write: note a's derived attribute.
    let diff = replayed.diff.target();
    assert!(diff.added.is_empty() && diff.removed.is_empty(), "{diff:?}");
    let [changed] = diff.changed.as_slice() else {
        panic!("one item changed: {diff:?}");
    };
    assert_eq!(keys::note_id(&changed.after), Some("a"));
    let [change] = changed.changes.as_slice() else {
        panic!("one attribute changed: {changed:?}");
    };
    assert_eq!(change.path, keys::TITLE_KEY);
    assert_eq!(change.old, None);
    assert_eq!(change.new, Some(AttributeValue::S("hello world".into())));
    let [notes] = replayed.writes.as_slice() else {
        panic!("one table: {:?}", replayed.writes);
    };
    let [write] = notes.writes.as_slice() else {
        panic!("one write made: {:?}", notes.writes);
    };
    assert_eq!(write.result, worker_toolkit::layers::WriteResult::Applied);
    let text = replayed.text(false);
    let line = format!(
        "    ~ NOTE#a/NOTE: {}: (absent) → \"hello world\"",
        keys::TITLE_KEY
    );
    assert!(text.contains(&line), "{text:#?}");
    assert_eq!(title_key(&table, "a").await.as_deref(), Some("hello world"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_purges_on_the_table_given() {
    let table = TestTable::with_schema(&schema()).await;
    let t = now().timestamp();
    put(
        &table,
        &[
            note("old", "o", Some("o"), Some(t - 60)),
            note("later", "l", Some("l"), Some(t + 60)),
        ],
    )
    .await;
    let Command::Run(args) = parse(&[
        "minimal",
        "run",
        "purge-expired",
        "--endpoint-url",
        &table.endpoint,
        "--table",
        &table.name,
        "--now",
        NOW,
    ]) else {
        panic!("run");
    };
    let code = run_job::run::<Minimal>(args).await.expect("the job runs");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert!(read(&table, "old").await.is_none(), "expired: purged");
    assert!(read(&table, "later").await.is_some(), "not yet expired");
}
