//! `rebuild-lookup` on DynamoDB Local: from the files alone, or from a
//! damaged lookup, it ends with exactly what the stream builds; a pass cut
//! by the deadline resumes to the same result; a second pass writes
//! nothing.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use archive_worker::keys::{self, FileTime, Job};
use archive_worker::schema::schema;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::NaiveDate;
use rand::Rng;
use serde_json::{Value, json};
use support::*;
use worker_engine::item::Item;
use worker_engine::store::Store;
use worker_testkit::workload::Seeded;
use worker_testkit::{Drain, TestTable};

fn files() -> Vec<FileTime> {
    let mut seed = Seeded::new(4004);
    let first = NaiveDate::from_ymd_opt(2023, 12, 20).unwrap();
    let mut files = BTreeSet::new();
    while files.len() < 150 {
        let r = seed.rng();
        let day = first + chrono::Duration::days(r.random_range(0..60) / 5 * 5);
        let (h, m, s) = (
            r.random_range(0..24),
            r.random_range(0..60),
            r.random_range(0..60),
        );
        files.insert(FileTime::new(day, h, m, s).unwrap());
    }
    files.into_iter().collect()
}

fn lookup_item(pk: &str, entries: &[&str]) -> Item {
    let mut item = keys::ItemKey::Lookup(keys::LookupKey::parse(pk).unwrap()).key();
    item.insert(keys::PK.into(), AttributeValue::S(pk.into()));
    item.insert(
        keys::SAVED_DATE.into(),
        AttributeValue::L(
            entries
                .iter()
                .map(|e| AttributeValue::S((*e).into()))
                .collect(),
        ),
    );
    item
}

/// A lookup gone wrong: stale entries at every level, an unpadded and
/// unsorted list, a duplicate, an empty item, an orphan chain, and an
/// item under a non-canonical key (not the worker's: left alone).
async fn damage(store: &dyn Store, files: &[FileTime]) {
    let day = files[0].date().format("%Y-%m-%d").to_string();
    let real = files[0].entry();
    let damaged = [
        lookup_item("root", &["1999", "2024", "2023"]),
        lookup_item("1999", &["01"]),
        lookup_item("1999-01", &["01"]),
        lookup_item("1999-01-01", &["00-00-00"]),
        lookup_item("2024", &["1", "02", "1"]),
        lookup_item("2024-01", &["31"]),
        lookup_item(&day, &[&real, "23-59-58", &real]),
        lookup_item("2024-02-29", &[]),
        lookup_item("2024-1", &["01"]),
    ];
    put(store, &damaged).await;
}

fn tick() -> Value {
    json!({"job": "rebuild-lookup"})
}

/// The lookup items, without the one under a non-canonical key (checked
/// apart).
async fn rebuilt(store: &dyn Store) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut items = lookup_items(store).await;
    if let Some(foreign) = items.remove("2024-1") {
        assert_eq!(foreign, ["01"], "not the worker's: left as it was");
    }
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebuilt_lookup_is_the_one_the_stream_builds() {
    let files = files();
    let items: Vec<Item> = files.iter().map(|f| file(*f)).collect();

    // What the stream builds.
    let streamed = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&streamed).await;
    put(streamed.store.as_ref(), &items).await;
    drain.run(&app(streamed.store.clone())).await;
    let by_stream = lookup_items(streamed.store.as_ref()).await;
    assert_eq!(by_stream, expected_lookup(files.clone()));

    // The files alone, and a damaged lookup; no stream handled.
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    put(store, &items).await;
    damage(store, &files).await;
    let app = app(table.store.clone());
    let report = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert!(report.complete, "{report:?}");
    let d = &report.details;
    assert_eq!(d["files"], 150);
    assert_eq!(d["noncanonical_lookup_items"], 1);
    assert!(d["stale_entries"].as_u64().unwrap() >= 5, "{d}");
    assert_eq!(rebuilt(store).await, by_stream);
    assert_eq!(walk(store).await, files.iter().copied().collect());
    assert!(
        get(store, keys::ItemKey::Checkpoint(Job::RebuildLookup))
            .await
            .is_none()
    );

    // A second pass finds nothing to do.
    let again = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert_eq!(
        (again.complete, &again.details["lookup_writes"]),
        (true, &json!(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_cut_by_the_deadline_resumes_to_the_same_result() {
    let files = files();
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    put(store, &files.iter().map(|f| file(*f)).collect::<Vec<_>>()).await;
    damage(store, &files).await;
    let app = app(table.store.clone());
    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks < 20, "the pass ends");
        // Already within the margin: one page per tick.
        let deadline = Some(Instant::now() + Duration::from_secs(2));
        let report = app
            .handle_schedule(&tick(), deadline)
            .await
            .expect("the tick runs");
        if report.complete {
            assert_eq!(report.details["pass_files"], 150);
            break;
        }
        assert_eq!(report.details["pages"], 1);
        assert!(
            get(store, keys::ItemKey::Checkpoint(Job::RebuildLookup))
                .await
                .is_some()
        );
    }
    assert!(ticks >= 4, "two scans of two pages at least: {ticks}");
    assert_eq!(rebuilt(store).await, expected_lookup(files.clone()));
    assert!(
        get(store, keys::ItemKey::Checkpoint(Job::RebuildLookup))
            .await
            .is_none()
    );
}
