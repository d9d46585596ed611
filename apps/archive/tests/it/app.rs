//! The app's description against its code: the deployed functions it
//! derives, every DynamoDB request the handlers and jobs make being one
//! their function is granted, and the metrics each invocation writes.

use crate::support;
use worker_testkit::deploy::Deployed;

use std::collections::BTreeSet;

use archive_worker::app::APP;
use archive_worker::config::Settings;
use archive_worker::items::Stage;
use archive_worker::keys::{self, Job};
use archive_worker::schema::schema;
use serde_json::json;
use support::*;
use worker_engine::store::ItemWriter;
use worker_testkit::infra::{actions_used, each_job_within_its_grants, emf, granted};
use worker_testkit::{Drain, TestTable};

#[test]
fn the_description_gives_the_deployed_functions() {
    APP.check().expect("a consistent description");
    let functions = APP.functions();
    let [stream, expire, rebuild] = functions.as_slice() else {
        panic!("three functions: {functions:?}");
    };
    assert!(stream.reads_stream && !stream.publishes_events);
    assert_eq!(
        stream.dynamodb_actions,
        [
            "dynamodb:BatchGetItem",
            "dynamodb:ConditionCheckItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem"
        ]
    );
    assert_eq!(stream.indexes, [keys::BY_KEY_NAME_INDEX]);
    assert_eq!(
        stream.env_vars,
        [
            "TABLE_NAME",
            "DEADLINE_MARGIN_MS",
            "STREAM_CONCURRENCY",
            "PARKING_TABLE",
            "PARKING_RETENTION_DAYS"
        ]
    );
    assert_eq!(
        (expire.logical_id, expire.job),
        ("ExpireUnzippedFunction", Some(Job::ExpireUnzipped))
    );
    assert!(expire.publishes_events && expire.indexes.is_empty());
    assert!(expire.env_vars.contains(&"UNZIPPED_RETENTION_HOURS"));
    assert!(expire.env_vars.contains(&"NOTIFY_EVENT_BUS"));
    assert_eq!(
        (rebuild.logical_id, rebuild.job),
        ("RebuildLookupFunction", Some(Job::RebuildLookup))
    );
    assert!(!rebuild.env_vars.contains(&"NOTIFY_EVENT_BUS"));
    assert!(rebuild.dynamodb_actions.contains(&"dynamodb:Scan"));
    assert_eq!(
        schema().key_attributes(),
        [keys::PK, keys::SK, keys::KEY_NAME]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_one_its_function_may_make_and_is_counted() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let mut settings = Settings::for_table("test");
    settings.event_bus = Some("bus".into());
    let (app, lines) = ARCHIVE.worker_emitting(table.store.clone(), settings);
    let mut drain = Drain::new(&table).await;
    let now = now().timestamp();
    let files = [
        "2024-01-01-00-00-00",
        "2024-01-01-01-00-00",
        "2024-02-01-00-00-00",
    ]
    .map(t);
    let k = key_name(files[0]);

    // The stream: inserts, an unzip, removals.
    put(store, &files.map(file)).await;
    put(store, &[unzip_item(Stage::Unzipping, now - 30 * 3600, &k)]).await;
    // The worker's requests only (not the service's writes in between).
    let mut used = BTreeSet::new();
    let mut worker_runs = async |drain: &mut Drain| {
        let before = store.metrics().snapshot();
        drain.run(&app).await;
        used.extend(actions_used(&store.metrics().snapshot().since(&before)));
    };
    worker_runs(&mut drain).await;
    put(store, &[unzip_item(Stage::Unzipped, now - 26 * 3600, &k)]).await;
    worker_runs(&mut drain).await;
    for f in &files[1..] {
        store.delete(&f.key(), None).await.expect("delete");
    }
    worker_runs(&mut drain).await;
    let stream = APP.stream_function();
    assert!(used.is_subset(&granted(&stream)), "{used:?}");
    assert!(used.contains("dynamodb:Query") && used.contains("dynamodb:UpdateItem"));
    let lines_so_far = emf(&lines);
    let lookup_writes: u64 = lines_so_far
        .iter()
        .map(|l| l["LookupWrites"].as_u64().expect("counted"))
        .sum();
    let unzip_writes: u64 = lines_so_far
        .iter()
        .map(|l| l["UnzipWrites"].as_u64().expect("counted"))
        .sum();
    // Six lookup items made (a few twice when records were not grouped),
    // four changed by the removals; the flag and the unzipping item.
    assert!((10..=14).contains(&lookup_writes), "{lookup_writes}");
    assert_eq!(unzip_writes, 2);

    // Each job, against its own function.
    each_job_within_its_grants(&APP, &app, store, NOW).await;
    let ticks = emf(&lines);
    let expire = ticks
        .iter()
        .find(|l| l["Job"] == "expire-unzipped")
        .expect("a job line");
    assert_eq!(
        (&expire["JobRuns"], &expire["UnzippedExpired"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(expire["UnzippedExpiryEvents"], 1);
    let rebuild = ticks
        .iter()
        .find(|l| l["Job"] == "rebuild-lookup")
        .expect("a job line");
    assert_eq!(
        (&rebuild["FilesScanned"], &rebuild["LookupItemsRebuilt"]),
        (&json!(1), &json!(0))
    );
    // The expired unzip clears the flag through the stream.
    drain.run(&app).await;
    let file = get(store, keys::ItemKey::File(files[0]))
        .await
        .expect("the file");
    assert_eq!(
        file.get(keys::IS_UNZIPPED),
        Some(&aws_sdk_dynamodb::types::AttributeValue::Bool(false))
    );
}
