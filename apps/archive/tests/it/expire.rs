//! `expire-unzipped` on DynamoDB Local: exactly the due items are
//! announced and deleted, with key-range queries only; a pass cut by the
//! deadline resumes to the same result; a failed publish deletes nothing.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use archive_worker::config::Settings;
use archive_worker::items::Stage;
use archive_worker::keys::{self, Job};
use archive_worker::schema::schema;
use archive_worker::unzip::expire::{EVENT_SOURCE, EVENT_TYPE};
use serde_json::{Value, json};
use support::*;
use worker_engine::RecordingPublisher;
use worker_engine::Worker;
use worker_engine::item::Item;
use worker_testkit::TestTable;
use worker_testkit::layers::{RaceBeforeDelete, ServiceWrite};

const H: i64 = 3600;
const BUS: &str = "archive-bus";

fn settings() -> Settings {
    let mut s = Settings::for_table("test");
    s.event_bus = Some(BUS.into());
    s
}

/// 23 due unzipped items (three pages), some not due, one stuck and one
/// recent unzipping item. Returns the items and the due `KeyName`s.
fn history() -> (Vec<Item>, BTreeSet<String>) {
    let now = now().timestamp();
    let cutoff = now - 24 * H;
    let mut items = Vec::new();
    let mut due = BTreeSet::new();
    for i in 0..23 {
        let k = format!("due/{i}.zip");
        items.push(unzip_item(Stage::Unzipped, cutoff - 1 - i * 600, &k));
        due.insert(k);
    }
    items.push(unzip_item(Stage::Unzipped, cutoff, "at-the-cutoff.zip"));
    items.push(unzip_item(Stage::Unzipped, now - H, "recent.zip"));
    items.push(unzip_item(Stage::Unzipping, now - 49 * H, "stuck.zip"));
    items.push(unzip_item(Stage::Unzipping, now - 47 * H, "waiting.zip"));
    // Files (a table is more than its unzip partitions).
    for d in 1..=9 {
        items.push(file(t(&format!("2024-01-0{d}-00-00-00"))));
    }
    (items, due)
}

fn tick() -> Value {
    json!({"job": "expire-unzipped", "scheduledTime": NOW})
}

fn key_names(publisher: &RecordingPublisher) -> Vec<String> {
    publisher
        .sent()
        .iter()
        .map(|e| {
            assert_eq!(
                (e.source.as_str(), e.detail_type.as_str()),
                (EVENT_SOURCE, EVENT_TYPE)
            );
            assert_eq!(e.event_bus_name, BUS);
            let detail: Value = serde_json::from_str(&e.detail).expect("JSON detail");
            detail["keyName"].as_str().expect("keyName").to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_unzipped_deletes_exactly_the_due_items_and_announces_each() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let (items, due) = history();
    put(store, &items).await;
    // The first due item is replaced (another KeyName) between the query
    // and its delete: it is kept.
    let raced = now().timestamp() - 24 * H - 1;
    let mut replaced = unzip_item(Stage::Unzipped, raced, "replaced.zip");
    replaced.insert(
        "Note".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("again".into()),
    );
    let racing = Arc::new(RaceBeforeDelete::new(
        table.store.clone(),
        unzip_key(Stage::Unzipped, raced).key(),
        ServiceWrite::Put(replaced.clone()),
    ));
    let publisher = Arc::new(RecordingPublisher::default());
    let app = ARCHIVE.worker_with(racing.clone(), settings(), publisher.clone());

    let before = table.store.metrics().snapshot();
    let report = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    let cost = table.store.metrics().snapshot().since(&before);
    assert!(racing.fired());
    assert!(report.complete);
    let d = &report.details;
    assert_eq!(
        (&d["due"], &d["expired"], &d["changed"]),
        (&json!(23), &json!(22), &json!(1))
    );
    assert_eq!((&d["published"], &d["rejected"]), (&json!(23), &json!(0)));
    assert_eq!(
        (&d["stuck"], &d["stuck_created"]),
        (&json!(1), &json!([now().timestamp() - 49 * H]))
    );

    let announced: BTreeSet<String> = key_names(&publisher).into_iter().collect();
    assert_eq!(announced, due);
    let left: Vec<Item> = table_state(&table).await.into_values().collect();
    let unzipped_left: BTreeSet<String> = left
        .iter()
        .filter(|i| i[keys::PK].as_s().is_ok_and(|p| p == "Unzipped"))
        .map(|i| i[keys::KEY_NAME].as_s().expect("KeyName").clone())
        .collect();
    assert_eq!(
        unzipped_left,
        BTreeSet::from(["at-the-cutoff.zip", "recent.zip", "replaced.zip"].map(String::from))
    );
    assert!(
        get(store, keys::ItemKey::Checkpoint(Job::ExpireUnzipped))
            .await
            .is_none(),
        "one tick: no checkpoint"
    );
    // Reads follow the due items: three pages of due items, one page of
    // stuck items; no scan.
    assert_eq!((cost.scan, cost.query), (0, 4));

    // The same tick again: only the replacement is due (its CreatedDate
    // is the old one), announced under its own KeyName.
    let again = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert_eq!(
        (&again.details["due"], &again.details["expired"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(
        key_names(&publisher).last().map(String::as_str),
        Some("replaced.zip")
    );
    let third = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert_eq!(third.details["due"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_cut_by_the_deadline_resumes_to_the_same_result() {
    let (items, due) = history();
    // Uncut.
    let whole = TestTable::with_schema(&schema()).await;
    put(whole.store.as_ref(), &items).await;
    let whole_events = Arc::new(RecordingPublisher::default());
    let app = ARCHIVE.worker_with(whole.store.clone(), settings(), whole_events.clone());
    let report = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert!(report.complete);

    // Cut: every tick starts already past its deadline (margin 2 s), so it
    // does one page and saves where it stopped.
    let cut = TestTable::with_schema(&schema()).await;
    put(cut.store.as_ref(), &items).await;
    let cut_events = Arc::new(RecordingPublisher::default());
    let app: Worker<Job> = ARCHIVE.worker_with(cut.store.clone(), settings(), cut_events.clone());
    let mut ticks = 0;
    let last = loop {
        ticks += 1;
        assert!(ticks < 20, "the pass ends");
        let deadline = Some(Instant::now() + Duration::from_secs(2));
        let report = app
            .handle_schedule(&tick(), deadline)
            .await
            .expect("the tick runs");
        if report.complete {
            break report;
        }
        assert_eq!(report.details["pass_ticks"], ticks);
        assert!(
            get(
                cut.store.as_ref(),
                keys::ItemKey::Checkpoint(Job::ExpireUnzipped)
            )
            .await
            .is_some()
        );
    };
    assert_eq!(ticks, 4, "three pages of due items, one of stuck ones");
    assert_eq!(last.details["pass_expired"], 23);
    assert_eq!(last.details["pass_stuck"], 1);
    assert_eq!(
        table_state(&cut).await,
        table_state(&whole).await,
        "no checkpoint left either"
    );
    let mut a = key_names(&cut_events);
    let mut b = key_names(&whole_events);
    assert_eq!(a.len(), 23, "each announced once");
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(a.into_iter().collect::<BTreeSet<_>>(), due);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_publish_deletes_nothing_and_the_next_tick_continues() {
    let table = TestTable::with_schema(&schema()).await;
    let (items, due) = history();
    put(table.store.as_ref(), &items).await;
    let publisher = Arc::new(RecordingPublisher::default());
    publisher.fail_next(1);
    publisher.reject_containing("due/7.zip");
    let app = ARCHIVE.worker_with(table.store.clone(), settings(), publisher.clone());

    let first = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert!(!first.complete);
    assert!(first.details["publish_error"].is_string());
    assert_eq!(first.details["expired"], 0);
    let second = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert!(second.complete);
    assert_eq!(
        (&second.details["expired"], &second.details["rejected"]),
        (&json!(22), &json!(1))
    );
    // The rejected one is kept for the next pass.
    let third = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert_eq!(third.details["due"], 1);
    assert_eq!(third.details["rejected"], 1);
    assert_eq!(key_names(&publisher).len(), 22);
    assert_eq!(due.len(), 23);
    // Without a bus nothing is published, and the item goes.
    let quiet = ARCHIVE.worker_with(
        table.store.clone(),
        Settings::for_table("test"),
        publisher.clone(),
    );
    let fourth = quiet
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    assert_eq!(fourth.details["expired"], 1);
    assert_eq!(key_names(&publisher).len(), 22);
}
