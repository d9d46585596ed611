//! `UnzippedFileExpired` events through a real EventBridge (moto's
//! server): the service's unzip writes on DynamoDB Local, the stream
//! handled by the archive's handlers (the files flagged unzipped), then
//! `expire-unzipped` publishes through `EventBridgePublisher` to the bus;
//! a rule matching the archive's source and detail type routes them to an
//! SQS queue, where each is read back with its detail. Once in process
//! (the publisher on moto's client), once as Lambda runs it: the
//! `archive-schedule` bootstrap on a local Runtime API, EventBridge found
//! through `AWS_ENDPOINT_URL_EVENTBRIDGE`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use archive_worker::config::Settings;
use archive_worker::items::Stage;
use archive_worker::keys::{self, ItemKey};
use archive_worker::schema::schema;
use archive_worker::unzip::expire::{EVENT_SOURCE, EVENT_TYPE};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use support::*;
use worker_testkit::eventbridge::{RoutedBus, details_by, run_schedule_function};
use worker_testkit::{Drain, TestTable};

const H: i64 = 3600;
/// Due unzipped files: more than one `PutEvents` call (ten entries each).
const DUE: usize = 12;

fn tick() -> Value {
    json!({"job": "expire-unzipped", "scheduledTime": NOW})
}

/// The service's writes: files, `DUE` of them unzipped more than the
/// retention (24 h) ago and two recently; the stream handled by the
/// archive's handlers (the files flagged). Returns the expected event
/// details by `keyName`.
async fn unzipped_files(table: &TestTable) -> BTreeMap<String, Value> {
    let store = table.store.as_ref();
    let now = now().timestamp();
    let mut due = BTreeMap::new();
    for d in 1..=DUE + 2 {
        let time = t(&format!("2024-01-{d:02}-00-00-00"));
        let k = key_name(time);
        let created = if d <= DUE {
            now - 24 * H - 1 - d as i64 * 600
        } else {
            // An unzip item's key is its time: one each.
            now - H - d as i64 * 60
        };
        put(
            store,
            &[file(time), unzip_item(Stage::Unzipped, created, &k)],
        )
        .await;
        if d <= DUE {
            let at = chrono::DateTime::from_timestamp(created, 0).unwrap();
            due.insert(
                k.clone(),
                json!({
                    "keyName": k,
                    "createdDate": created,
                    "createdAt": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    "expiredAt": NOW,
                }),
            );
        }
    }
    let mut drain = Drain::new(table).await;
    drain.run(&app(table.store.clone())).await;
    for d in 1..=DUE + 2 {
        assert_eq!(
            is_unzipped(table, d).await,
            Some(true),
            "file {d} flagged by the stream handler"
        );
    }
    due
}

async fn is_unzipped(table: &TestTable, day: usize) -> Option<bool> {
    let time = t(&format!("2024-01-{day:02}-00-00-00"));
    match get(table.store.as_ref(), ItemKey::File(time))
        .await?
        .get(keys::IS_UNZIPPED)
    {
        Some(AttributeValue::Bool(b)) => Some(*b),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_unzips_reach_the_bus_and_the_queue_its_rule_feeds() {
    let (moto, routed) = RoutedBus::of_events("archive", EVENT_SOURCE, EVENT_TYPE).await;
    let table = TestTable::with_schema(&schema()).await;
    let due = unzipped_files(&table).await;

    let mut settings = Settings::for_table(&table.name);
    settings.event_bus = Some(routed.bus.clone());
    let publisher = RoutedBus::publisher(moto);
    let app = ARCHIVE.worker_with(table.store.clone(), settings, publisher);
    let report = app
        .handle_schedule(&tick(), None)
        .await
        .expect("the tick runs");
    let d = &report.details;
    assert_eq!(
        (&d["due"], &d["expired"], &d["published"], &d["rejected"]),
        (&json!(DUE), &json!(DUE), &json!(DUE), &json!(0))
    );
    let events = routed.received(DUE, Duration::from_secs(30)).await;
    assert_eq!(details_by(events, EVENT_SOURCE, EVENT_TYPE, "keyName"), due);

    // The expiries come back through the stream: the flags cleared.
    let mut drain = Drain::new(&table).await;
    drain.run(&app).await;
    for day in 1..=DUE + 2 {
        assert_eq!(is_unzipped(&table, day).await, Some(day > DUE), "{day}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_function_publishes_to_the_bus_the_environment_names() {
    let (moto, routed) = RoutedBus::of_events("archive-fn", EVENT_SOURCE, EVENT_TYPE).await;
    let table = TestTable::with_schema(&schema()).await;
    let due = unzipped_files(&table).await;

    let answer = run_schedule_function(
        Path::new(env!("CARGO_BIN_EXE_archive-schedule")),
        "expire-unzipped",
        NOW,
        &table,
        &routed,
        moto,
        &tick(),
    )
    .await;
    assert_eq!(answer["details"]["published"], json!(DUE), "{answer}");
    let events = routed.received(DUE, Duration::from_secs(30)).await;
    assert_eq!(details_by(events, EVENT_SOURCE, EVENT_TYPE, "keyName"), due);
}
