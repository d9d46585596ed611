//! The stream as it is: `capture` and `dev` read the table's stream view
//! type from DescribeStream (`StreamDescription.StreamViewType`), refuse
//! one the app's schema does not accept (`TableSchema::stream_needs`:
//! Nishiki's handlers read old and new images) with one line that says
//! what to do, exit 1, and touch nothing; `capture` labels every record
//! with the stream's own view. Tables on the shared DynamoDB Local, the
//! real binary run as `apps/nishiki-cli/tests/it/cli.rs` runs it.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aws_sdk_dynamodb::types::{AttributeValue, StreamSpecification, StreamViewType};
use nishiki_worker::schema::nishiki;
use serde_json::Value;
use support::TestTable;
use worker_engine::schema::StreamView;
use worker_toolkit::cli::capture::{CaptureArgs, capture};
use worker_toolkit::cli::target::{AppTable, Target};

fn bin() -> Command {
    let mut c = crate::support::nishiki_worker();
    c.env_remove("RUST_LOG").env("NO_COLOR", "1");
    for var in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
        "DYNAMODB_ENDPOINT_URL",
    ] {
        c.env_remove(var);
    }
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nishiki-stream-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A Nishiki table whose stream has this view.
async fn table_with(view: StreamView) -> TestTable {
    let mut schema = nishiki();
    schema.stream = Some(view);
    TestTable::with_schema(&schema).await
}

/// The one line `capture` and `dev` print for a `view` stream on `t`.
fn refusal(t: &TestTable, view: &str) -> String {
    let (e, n) = (&t.endpoint, &t.name);
    format!(
        "error: table \"{n}\" at {e} has a {view} stream, but nishiki-worker needs NEW_AND_OLD_IMAGES \
         (its handlers read images a {view} record lacks): replace the stream with \
         `aws dynamodb update-table --endpoint-url {e} --table-name {n} --stream-specification StreamEnabled=false` \
         then `aws dynamodb update-table --endpoint-url {e} --table-name {n} --stream-specification \
         StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES`, or create a table with \
         `nishiki-worker table create --endpoint-url {e} --table NEW-NAME`\n"
    )
}

/// An item written, changed and deleted: an INSERT, a MODIFY and a REMOVE.
async fn three_changes(t: &TestTable) {
    let client = t.store.client();
    let s = |v: &str| AttributeValue::S(v.to_owned());
    for name in ["first", "second"] {
        client
            .put_item()
            .table_name(&t.name)
            .item("PK", s("Probe#1"))
            .item("SK", s("Probe"))
            .item("Name", s(name))
            .send()
            .await
            .unwrap();
    }
    client
        .delete_item()
        .table_name(&t.name)
        .key("PK", s("Probe#1"))
        .key("SK", s("Probe"))
        .send()
        .await
        .unwrap();
}

fn capture_args<'a>(t: &'a TestTable, out: &'a Path) -> Vec<&'a str> {
    vec![
        "capture",
        "--json",
        "--out",
        out.to_str().unwrap(),
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
    ]
}

fn records(out: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    v["Records"].as_array().unwrap().clone()
}

/// KEYS_ONLY and NEW_IMAGE streams lack the old image Nishiki's handlers
/// read: `capture` refuses before reading a record, with the line that
/// says how to replace the stream, exit status 1, no file written.
#[tokio::test]
async fn capture_refuses_a_stream_without_both_images() {
    for (view, name) in [
        (StreamView::KeysOnly, "KEYS_ONLY"),
        (StreamView::NewImage, "NEW_IMAGE"),
    ] {
        let t = table_with(view).await;
        three_changes(&t).await;
        let out = tmp(&format!("refused-{name}.json"));
        let o = run(&capture_args(&t, &out));
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        assert_eq!(stderr(&o), refusal(&t, name), "{name}");
        assert!(o.stdout.is_empty(), "{name}");
        assert!(!out.exists(), "{name}: nothing written");
    }
}

/// `dev` refuses the same streams the same way, before loading
/// `--snapshot` or handling anything: the table stays empty.
#[tokio::test]
async fn dev_refuses_a_stream_without_both_images() {
    let snapshot = crate::support::workspace().join("events/tables/household.json");
    for (view, name) in [
        (StreamView::KeysOnly, "KEYS_ONLY"),
        (StreamView::NewImage, "NEW_IMAGE"),
    ] {
        let t = table_with(view).await;
        let o = run(&[
            "dev",
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--until-idle",
        ]);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        assert_eq!(stderr(&o), refusal(&t, name), "{name}");
        assert!(o.stdout.is_empty(), "{name}: {:?}", o.stdout);
        assert!(t.keys().await.is_empty(), "{name}: the snapshot was loaded");
    }
}

/// A NEW_AND_OLD_IMAGES stream is captured with every record labelled so,
/// each with the images its change has.
#[tokio::test]
async fn capture_labels_records_with_the_streams_view_type() {
    let t = table_with(StreamView::NewAndOldImages).await;
    three_changes(&t).await;
    let out = tmp("new-and-old.json");
    let o = run(&capture_args(&t, &out));
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["streamViewType"], "NEW_AND_OLD_IMAGES");
    assert_eq!(summary["records"], 3);
    let records = records(&out);
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["eventName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["INSERT", "MODIFY", "REMOVE"]);
    for r in &records {
        assert_eq!(r["dynamodb"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
    }
    let modify = &records[1]["dynamodb"];
    assert_eq!(modify["OldImage"]["Name"]["S"], "first");
    assert_eq!(modify["NewImage"]["Name"]["S"], "second");
    assert_eq!(records[2]["dynamodb"]["OldImage"]["Name"]["S"], "second");
}

/// What the refusal says to do works: the KEYS_ONLY stream disabled,
/// then enabled as NEW_AND_OLD_IMAGES (the two `update-table` calls of the
/// message), and the same `capture` succeeds on the new stream.
#[tokio::test]
async fn the_refusals_advice_gives_a_stream_capture_accepts() {
    let t = table_with(StreamView::KeysOnly).await;
    let out = tmp("after-advice.json");
    assert_eq!(run(&capture_args(&t, &out)).status.code(), Some(1));
    let client = t.store.client();
    for spec in [
        StreamSpecification::builder().stream_enabled(false).build(),
        StreamSpecification::builder()
            .stream_enabled(true)
            .stream_view_type(StreamViewType::NewAndOldImages)
            .build(),
    ] {
        client
            .update_table()
            .table_name(&t.name)
            .stream_specification(spec.unwrap())
            .send()
            .await
            .unwrap();
    }
    three_changes(&t).await;
    let o = run(&capture_args(&t, &out));
    assert!(o.status.success(), "{}", stderr(&o));
    let records = records(&out);
    assert_eq!(records.len(), 3);
    assert!(
        records
            .iter()
            .all(|r| r["dynamodb"]["StreamViewType"] == "NEW_AND_OLD_IMAGES")
    );
}

/// The bug this fixes: a KEYS_ONLY stream's records were written as
/// NEW_AND_OLD_IMAGES ones without images. For an app whose handlers read
/// keys only (a schema stating so), `capture` takes the stream and labels
/// its image-less records KEYS_ONLY.
#[tokio::test]
async fn a_keys_only_stream_is_captured_as_keys_only() {
    let t = table_with(StreamView::KeysOnly).await;
    three_changes(&t).await;
    let mut app = AppTable::of::<nishiki_cli::Nishiki>();
    app.schema = app.schema.needing_stream(StreamView::KeysOnly);
    let target = Target::connect(&t.endpoint, &t.name, &app).await;
    let out = tmp("keys-only.json");
    let args = CaptureArgs {
        out: out.clone(),
        ..Default::default()
    };
    let c = capture(&target, &args).await.unwrap();
    assert_eq!((c.records, c.view), (3, StreamView::KeysOnly));
    let records = records(&out);
    assert_eq!(records.len(), 3);
    for r in &records {
        let ddb = r["dynamodb"].as_object().unwrap();
        assert_eq!(ddb["StreamViewType"], "KEYS_ONLY");
        assert_eq!(ddb["Keys"]["PK"]["S"], "Probe#1");
        assert!(!ddb.contains_key("NewImage") && !ddb.contains_key("OldImage"));
    }
}
