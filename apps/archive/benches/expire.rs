//! Load driver for `expire-unzipped` (`cargo bench -p archive-worker
//! --bench expire`).
//!
//! For tables of 10,000 and 100,000 archived files (`-- --sizes a,b`
//! overrides), each also holding the same unzip items: 200 `Unzipped`
//! items past the retention (due), 200 recent ones, 50 `Unzipping` items
//! past the stuck threshold and 50 recent ones, it seeds a table with the
//! archive schema (no stream) on a DynamoDB Local of its own and runs the
//! job once through the worker (fixed clock, events to a recording
//! publisher). It checks that exactly the due items are gone and every
//! other item stays, and prints the read capacity and the requests of the
//! run (`DynamoStore::metrics()`). The bound: the read capacity must not
//! grow with the table (largest/smallest <= 1.1) and no Scan may happen;
//! otherwise the bench exits non-zero.

use std::collections::BTreeSet;
use std::sync::Arc;

use archive_worker::config::Settings;
use archive_worker::items::{ArchivedFile, Stage, UnzipItem};
use archive_worker::keys::{self, FileTime, ItemKey, Job};
use archive_worker::schema::schema;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use serde_json::json;
use worker_engine::RecordingPublisher;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::store::MetricsSnapshot;
use worker_testkit::bench::{self, Growth};

const H: i64 = 3600;
/// `Unzipped` items past the retention (due), and recent ones.
const DUE: usize = 200;
const RECENT: usize = 200;
/// `Unzipping` items past the stuck threshold, and recent ones.
const STUCK: usize = 50;
const WAITING: usize = 50;
/// Concurrent BatchWriteItem tasks while seeding.
const SEED_TASKS: usize = 4;
const BOUND: f64 = 1.1;
const BUS: &str = "bench-bus";

fn now() -> DateTime<Utc> {
    "2024-03-25T00:00:00Z".parse().expect("a time")
}

/// Archived file `i`: one a minute from 2020-01-01 (distinct partitions).
fn file_time(i: usize) -> FileTime {
    let start = "2020-01-01T00:00:00Z"
        .parse::<DateTime<Utc>>()
        .expect("a time")
        .timestamp();
    FileTime::from_epoch(start + 60 * i as i64).expect("a file time")
}

fn key_name(time: FileTime) -> String {
    format!("archive/{}.zip", time.pk())
}

/// `(PK, SK)` as text (`SK` is a number here).
fn key_of(item: &Item) -> (String, String) {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        Some(AttributeValue::N(n)) => n.clone(),
        _ => String::new(),
    };
    (text(keys::PK), text(keys::SK))
}

fn unzip(stage: Stage, created: i64, key_name: String) -> Item {
    UnzipItem {
        stage,
        created,
        key_name: Some(key_name),
    }
    .to_item()
}

/// The table: `files` archived files and the same unzip items at every
/// size (their `KeyName`s those of the first files). Returns the items and
/// the keys of the due ones.
fn items(files: usize) -> (Vec<Item>, BTreeSet<(String, String)>) {
    let now = now().timestamp();
    let cutoff = now - 24 * H;
    let stuck_cutoff = now - 48 * H;
    let mut out = Vec::with_capacity(files + DUE + RECENT + STUCK + WAITING);
    let mut due = BTreeSet::new();
    let name = |i: usize| key_name(file_time(i));
    for i in 0..DUE {
        let item = unzip(Stage::Unzipped, cutoff - 1 - 60 * i as i64, name(i));
        due.insert(key_of(&item));
        out.push(item);
    }
    for i in 0..RECENT {
        out.push(unzip(
            Stage::Unzipped,
            now - 1 - 60 * i as i64,
            name(DUE + i),
        ));
    }
    for i in 0..STUCK {
        out.push(unzip(
            Stage::Unzipping,
            stuck_cutoff - 1 - 60 * i as i64,
            name(DUE + RECENT + i),
        ));
    }
    for i in 0..WAITING {
        out.push(unzip(
            Stage::Unzipping,
            now - 1 - 60 * i as i64,
            name(DUE + RECENT + STUCK + i),
        ));
    }
    for i in 0..files {
        let time = file_time(i);
        out.push(
            ArchivedFile {
                time,
                key_name: Some(key_name(time)),
                is_unzipped: Some(i < DUE + RECENT),
                vault: Some("vault-1".into()),
            }
            .to_item(),
        );
    }
    (out, due)
}

struct Measured {
    files: usize,
    items: usize,
    due: u64,
    deleted: u64,
    stuck: u64,
    published: usize,
    cost: MetricsSnapshot,
    seed_s: f64,
    run_ms: f64,
}

async fn measure(files: usize) -> Measured {
    let (seeded, due) = items(files);
    let total = seeded.len();
    let own = bench::seeded(
        format!("expire-bench-{files}"),
        &schema().without_stream(),
        seeded.clone(),
        SEED_TASKS,
    )
    .await;
    let (table, seed_s) = (&own.table, own.seed_s);
    eprintln!("seeded {total} items ({files} files) in {seed_s:.1} s");

    let mut settings = Settings::for_table(&table.name);
    settings.event_bus = Some(BUS.into());
    let publisher = Arc::new(RecordingPublisher::default());
    let worker = archive_worker::app::APP.table_worker(
        table.store.clone(),
        settings,
        publisher.clone(),
        Arc::new(ManualClock::new(now())),
        archive_worker::app::SHARING,
    );
    let run = bench::metered(&table.store, worker.run_job(Job::ExpireUnzipped, None)).await;
    let report = run.value.expect("expire-unzipped runs");
    assert!(report.complete, "one run completes the pass: {report:?}");
    let figure = |name: &str| report.details[name].as_u64().expect("a count");

    // Exactly the due items are gone; everything else stays.
    let left: BTreeSet<(String, String)> = table.snapshot().await.iter().map(key_of).collect();
    let expected: BTreeSet<(String, String)> = seeded
        .iter()
        .map(key_of)
        .filter(|k| !due.contains(k))
        .collect();
    assert_eq!(left.len(), total - DUE, "items left");
    assert!(left == expected, "exactly the due items are gone");
    assert!(
        !left.contains(&key_of(&ItemKey::Checkpoint(Job::ExpireUnzipped).key())),
        "no checkpoint left"
    );
    Measured {
        files,
        items: total,
        due: figure("due"),
        deleted: figure("expired"),
        stuck: figure("stuck"),
        published: publisher.sent().len(),
        cost: run.cost,
        seed_s,
        run_ms: run.run_ms,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = bench::sizes_at_least(&[10_000, 100_000], DUE + RECENT + STUCK + WAITING, "files");
    println!(
        "expire-unzipped: {DUE} due + {RECENT} recent unzipped, {STUCK} stuck + {WAITING} waiting unzipping, per table (DynamoDB Local)"
    );
    let mut results = Vec::new();
    for &files in &sizes {
        let m = measure(files).await;
        assert_eq!(
            (m.due, m.deleted, m.stuck, m.published),
            (DUE as u64, DUE as u64, STUCK as u64, DUE),
            "at {files} files"
        );
        results.push(m);
    }

    println!();
    println!(
        "{:>8} {:>8} {:>5} {:>7} {:>7} {:>8} {:>6} {:>8} {:>6} {:>9} {:>8}",
        "size",
        "items",
        "due",
        "deleted",
        "RCU",
        "queries",
        "scans",
        "getitems",
        "stuck",
        "WCU",
        "run ms"
    );
    for m in &results {
        println!(
            "{:>8} {:>8} {:>5} {:>7} {:>7.1} {:>8} {:>6} {:>8} {:>6} {:>9.1} {:>8.1}",
            m.files,
            m.items,
            m.due,
            m.deleted,
            m.cost.read_capacity,
            m.cost.query,
            m.cost.scan,
            m.cost.get_item,
            m.stuck,
            m.cost.write_capacity,
            m.run_ms
        );
    }
    println!("RCU, WCU and requests: DynamoStore::metrics() over the run");

    let growth = Growth::of(&results, |m| m.files, |m| &m.cost);
    let scans: u64 = results.iter().map(|m| m.cost.scan).sum();
    let ok = growth.verdict(BOUND, "scans", scans);
    let line = json!({
        "bench": "archive-expire-unzipped",
        "due": DUE,
        "not_due": RECENT + STUCK + WAITING,
        "sizes": results.iter().map(|m| json!({
            "files": m.files,
            "items": m.items,
            "due": m.due,
            "deleted": m.deleted,
            "stuck": m.stuck,
            "published": m.published,
            "rcu": m.cost.read_capacity,
            "wcu": m.cost.write_capacity,
            "query": m.cost.query,
            "scan": m.cost.scan,
            "get_item": m.cost.get_item,
            "seed_s": m.seed_s,
            "run_ms": m.run_ms,
        })).collect::<Vec<_>>(),
    });
    bench::finish(line, &growth, BOUND, ok);
}
