//! The chat worker's event fixtures (`events/chat/`): every entry of
//! `events/chat/manifest.json` is replayed twice (idempotency) through the
//! code of `chat-worker replay --apply-writes`, on the six tables of an
//! embedded DynamoDB Local named as in the seed (the events'
//! `eventSourceARN`s name them), and the six tables are compared with the
//! entry's golden snapshot.
//!
//! - `cargo test -p chat-worker --test it fixtures::`: compare;
//! - `UPDATE_GOLDEN=1 cargo test -p chat-worker --test it fixtures::`: rewrite
//!   the goldens (review the diff);
//! - `REGENERATE_FIXTURES=1 cargo test -p chat-worker --test it fixtures:: --
//!   --ignored regenerate`: re-capture the stream files from DynamoDB
//!   Local (the clients' writes, read back from each table's stream) and
//!   rewrite the ticks; then update the goldens.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chat_cli::Chat as ChatCli;
use chat_worker::items::Status;
use chat_worker::keys;
use chat_worker::schema::Table;
use serde_json::{Value, json};
use support::*;
use worker_engine::stream::encode_event;
use worker_toolkit::cli::replay::{ReplayArgs, replay};
use worker_toolkit::cli::target::{AppTable, TableOpts, Target};

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/chat")
}

/// The stream ARN of a table as Lambda delivers its records.
fn stream_arn(t: Table) -> String {
    format!(
        "arn:aws:dynamodb:eu-west-1:123456789012:table/{}/stream/2024-06-01T00:00:00.000",
        t.name()
    )
}

/// One entry of the manifest.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
struct Fixture {
    name: String,
    about: String,
    events: Vec<String>,
    now: String,
    golden: String,
}

fn manifest() -> Vec<Fixture> {
    let text = std::fs::read_to_string(events_dir().join("manifest.json"))
        .expect("events/chat/manifest.json");
    let v: Value = serde_json::from_str(&text).expect("the manifest is JSON");
    serde_json::from_value(v["fixtures"].clone()).expect("the manifest's shape")
}

fn args_for(f: &Fixture, target: &Target) -> ReplayArgs {
    let dir = events_dir();
    ReplayArgs {
        files: f.events.iter().map(|e| dir.join(e)).collect(),
        snapshot: None,
        apply_writes: true,
        now: Some(f.now.parse().expect("an RFC 3339 time")),
        write_snapshot: None,
        dry_run: false,
        json: false,
        env: Vec::new(),
        table: TableOpts {
            endpoint_url: Some(target.endpoint.clone()),
            table: vec![format!("ChatRequests={}", target.table)],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The six tables as one JSON object (the test kit's).
async fn tables_text(target: &Target) -> String {
    worker_testkit::fixtures::tables_text(target).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_replays_to_its_golden_twice() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let fixtures = manifest();
    assert!(fixtures.len() >= 5, "the manifest lists every fixture");
    let mut problems = Vec::new();
    for f in &fixtures {
        let target = Target::embedded(Table::ChatRequests.name(), &AppTable::of::<ChatCli>())
            .await
            .expect("the embedded DynamoDB Local with the six tables");
        assert_eq!(target.others.len(), 5);
        let first = replay::<ChatCli>(&target, &args_for(f, &target))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        for file in first.files.iter().filter(|file| file.failed()) {
            problems.push(format!(
                "{}: {} failed: {:?}",
                f.name, file.file, file.error
            ));
        }
        let once = tables_text(&target).await;
        let second = replay::<ChatCli>(&target, &args_for(f, &target))
            .await
            .unwrap_or_else(|e| panic!("{} (again): {e}", f.name));
        assert!(!second.failed(), "{}", f.name);
        let twice = tables_text(&target).await;
        if once != twice {
            problems.push(format!(
                "{}: a second replay changed the tables:\n{once}\n---\n{twice}",
                f.name
            ));
        }
        let golden = events_dir().join(&f.golden);
        if update {
            if std::fs::read_to_string(&golden).ok().as_deref() != Some(once.as_str()) {
                std::fs::write(&golden, &once).expect("write the golden");
            }
        } else {
            let expected = std::fs::read_to_string(&golden)
                .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", golden.display()));
            if expected != once {
                problems.push(format!(
                    "{}: the tables differ from {} (intended? UPDATE_GOLDEN=1)",
                    f.name, f.golden
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every event file is replayed by an entry; every file named exists.
#[test]
fn the_manifest_covers_every_fixture() {
    let dir = events_dir();
    let fixtures = manifest();
    let used: BTreeSet<String> = fixtures.iter().flat_map(|f| f.events.clone()).collect();
    for sub in ["stream", "schedule"] {
        for entry in std::fs::read_dir(dir.join(sub)).expect("a folder") {
            let name = format!(
                "{sub}/{}",
                entry.expect("an entry").file_name().to_string_lossy()
            );
            assert!(used.contains(&name), "{name} is not in the manifest");
        }
    }
    for f in &fixtures {
        for p in f.events.iter().chain([&f.golden]) {
            assert!(dir.join(p).is_file(), "{}: {p} does not exist", f.name);
        }
    }
}

/// The clients' writes of each event file, as done on the tables.
async fn capture(chat: &mut Chat, table: Table, file: &str) {
    let mut changes = chat.read().await;
    assert!(!changes.is_empty(), "{file}: no records");
    for c in &mut changes {
        c.event_source_arn = Some(stream_arn(table).into());
    }
    let event = encode_event(&changes, None);
    let text = serde_json::to_string_pretty(&event).expect("JSON") + "\n";
    std::fs::write(events_dir().join("stream").join(file), text).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites events/chat; run with REGENERATE_FIXTURES=1"]
async fn regenerate() {
    if std::env::var_os("REGENERATE_FIXTURES").is_none() {
        return;
    }
    let mut chat = Chat::new().await;
    for u in ["u1", "u2"] {
        let mut item = keys::user(u);
        item.insert("Id".into(), s(u));
        chat.put(Table::Users, item).await;
    }
    capture(&mut chat, Table::Users, "users-created.json").await;
    chat.put(Table::GroupChats, group_chat("g1", Some(2), Some(0)))
        .await;
    capture(&mut chat, Table::GroupChats, "chat-created.json").await;
    let r1 = Request::new("r1", "u1", "g1", "2024-05-30T12:00:00Z");
    let r2 = Request::new("r2", "u2", "g1", "2024-05-31T08:00:00Z");
    for c in r1
        .both(Status::Pending)
        .into_iter()
        .chain(r2.both(Status::Pending))
    {
        chat.put(Table::ChatRequests, c).await;
    }
    capture(&mut chat, Table::ChatRequests, "requests-created.json").await;
    chat.put(Table::ChatRequests, r1.copy(1, Status::Accepted))
        .await;
    capture(&mut chat, Table::ChatRequests, "request-accepted.json").await;
    chat.put(Table::ChatRequests, r2.copy(0, Status::Cancelled))
        .await;
    capture(&mut chat, Table::ChatRequests, "request-cancelled.json").await;
    chat.delete(Table::Users, keys::user("u2")).await;
    capture(&mut chat, Table::Users, "user-removed.json").await;
    for job in ["expire-requests", "audit-requests"] {
        let tick = json!({"job": job, "scheduledTime": "2024-08-01T00:00:00Z"});
        let text = serde_json::to_string_pretty(&tick).expect("JSON") + "\n";
        std::fs::write(
            events_dir().join("schedule").join(format!("{job}.json")),
            text,
        )
        .expect("write");
    }
}
