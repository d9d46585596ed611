//! The generic replay machinery against a real DynamoDB Local: snapshots
//! through a table, `capture` of a table's stream (whole, after a sequence
//! number, redacted), and `capture` followed by `replay --apply-writes` on
//! an empty table rebuilding the captured table exactly.

use crate::support;

use std::path::{Path, PathBuf};

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use nishiki_cli::{KEYS, Nishiki};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::Item;
use nishiki_worker::keys::{GroupId, ItemKey, UserId};
use serde_json::Value;
use support::{Drain, TestTable};
use worker_engine::store::ItemWriter;
use worker_engine::stream::{ChangeKind, decode_event};
use worker_toolkit::cli::capture::{CaptureArgs, capture};
use worker_toolkit::cli::target::{AppTable, EndpointOpts, Target};
use worker_toolkit::replay::diff::diff_tables;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, scan_table, snapshot_text};

const NOW: &str = "2024-03-25T09:00:00Z";

fn events(rel: &str) -> PathBuf {
    crate::support::workspace().join("events").join(rel)
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nishiki-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn app(t: &TestTable) -> App {
    App::new(
        t.store.clone(),
        Config::for_table(&t.name),
        Arc::new(ManualClock::new(NOW.parse().unwrap())),
    )
}

fn capture_args(t: &TestTable, out: &Path) -> CaptureArgs {
    CaptureArgs {
        out: out.to_owned(),
        after_sequence: None,
        since: None,
        shard: None,
        from_sequence: None,
        to_sequence: None,
        redact: false,
        endpoint: EndpointOpts {
            endpoint_url: t.endpoint.clone(),
            table: vec![t.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn snapshot_round_trips_through_a_table() {
    let t = support::nishiki_table().await;
    let file = events("tables/household.json");
    let items = read_snapshot(&file, KEYS).unwrap();
    // Enough items for several pages and concurrent batches.
    let mut many = items.clone();
    for i in 0..600 {
        let key = ItemKey::Membership {
            user: UserId::random(),
            group: format!("9e000000-0000-4000-8000-{i:012}")
                .parse::<GroupId>()
                .unwrap(),
        };
        let mut item = key.to_attributes();
        item.insert("Padding".into(), AttributeValue::S("x".repeat(2000)));
        many.push(item);
    }
    let report = load_items(t.store.clone(), many.clone(), 4, None)
        .await
        .unwrap();
    assert_eq!(report.items, many.len());
    let scanned = scan_table(t.store.as_ref(), KEYS, None).await.unwrap();
    assert_eq!(scanned.len(), many.len());
    assert!(t.store.metrics().snapshot().scan > 1, "paged scan");
    assert_eq!(snapshot_text(&scanned, KEYS), snapshot_text(&many, KEYS));
    assert!(diff_tables(&many, &scanned, KEYS).is_empty());
    // The household file itself is in canonical snapshot form.
    assert_eq!(
        snapshot_text(&items, KEYS),
        std::fs::read_to_string(&file).unwrap()
    );
}

/// Production-like: the service writes (the household, then a user
/// deletion, a food change and a rename) while the worker follows the
/// stream; the whole stream (service and worker records) is captured, then
/// replayed with `--apply-writes` on an empty table, the worker reacting
/// again: the result is the captured table, item for item.
#[tokio::test]
async fn capture_then_replay_apply_writes_rebuilds_the_table() {
    let a = support::nishiki_table().await;
    let mut drain = Drain::new(&a).await;
    let household = read_snapshot(&events("tables/service-only.json"), KEYS).unwrap();
    for item in &household {
        a.store.put(item.clone(), None).await.unwrap();
    }
    drain.run(&app(&a)).await;
    let original = |key: &ItemKey| -> Item {
        household
            .iter()
            .find(|i| ItemKey::from_attributes(i).unwrap() == *key)
            .unwrap()
            .clone()
    };
    // Bob deletes his account (his membership is left behind: the cascade
    // removes it); the fridge is rewritten with the cheese expiring sooner;
    // the office is renamed.
    let bob: UserId = "b0b00000-0000-4000-8000-000000000002".parse().unwrap();
    a.store
        .delete(&ItemKey::User(bob).to_attributes(), None)
        .await
        .unwrap();
    let fridge_key = ItemKey::Container("c0000000-0000-4000-8000-0000000c0001".parse().unwrap());
    let mut fridge = original(&fridge_key);
    let Some(AttributeValue::L(foods)) = fridge.get_mut("Foods") else {
        panic!("fridge foods")
    };
    let AttributeValue::M(cheese) = &mut foods[3] else {
        panic!("cheese")
    };
    cheese.insert(
        "Expiry".into(),
        AttributeValue::S("2024-03-27T00:00:00.000Z".into()),
    );
    a.store.put(fridge, None).await.unwrap();
    let office = ItemKey::Group("9e000000-0000-4000-8000-00000000a003".parse().unwrap());
    let mut renamed = original(&office);
    renamed.insert(
        "GroupName".into(),
        AttributeValue::S("Office (3rd floor)".into()),
    );
    a.store.put(renamed, None).await.unwrap();
    drain.run(&app(&a)).await;
    let expected = snapshot_text(&a.snapshot().await, KEYS);
    assert!(
        !expected.contains("\"PK\":{\"S\":\"b0b00000-0000-4000-8000-000000000002\"}"),
        "the cascade removed Bob's membership"
    );

    // capture (the command), then replay --apply-writes (the command).
    let captured = tmp(&format!("{}-capture.json", a.name));
    let o = crate::support::nishiki_worker()
        .args([
            "capture",
            "--endpoint-url",
            &a.endpoint,
            "--table",
            &a.name,
            "--out",
        ])
        .arg(&captured)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = support::nishiki_table().await;
    let rebuilt = tmp(&format!("{}-rebuilt.json", b.name));
    let o = crate::support::nishiki_worker()
        .args([
            "replay",
            "--apply-writes",
            "--now",
            NOW,
            "--endpoint-url",
            &b.endpoint,
            "--table",
            &b.name,
            "--write-snapshot",
        ])
        .arg(&rebuilt)
        .arg(&captured)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&rebuilt).unwrap(), expected);
    assert_eq!(snapshot_text(&b.snapshot().await, KEYS), expected);

    // The capture is the event Lambda would get, with the stream's ARN.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&captured).unwrap()).unwrap();
    let arn = a.store.stream_arn().await.unwrap().unwrap();
    let records = v["Records"].as_array().unwrap();
    assert!(records.iter().all(|r| r["eventSourceARN"] == arn.as_str()));
    let decoded = decode_event(&v).unwrap();
    assert!(decoded.iter().all(Result::is_ok));
    assert!(
        decoded
            .iter()
            .any(|c| c.as_ref().unwrap().kind == ChangeKind::Remove)
    );
}

#[tokio::test]
async fn capture_after_a_sequence_number_and_redacted() {
    let t = support::nishiki_table().await;
    let items = read_snapshot(&events("tables/service-only.json"), KEYS).unwrap();
    load_items(t.store.clone(), items.clone(), 4, None)
        .await
        .unwrap();
    let target = Target::connect(&t.endpoint, &t.name, &AppTable::of::<Nishiki>()).await;

    let all = tmp(&format!("{}-all.json", t.name));
    let c = capture(&target, &capture_args(&t, &all)).await.unwrap();
    assert_eq!(c.records, items.len());
    assert!(c.shards >= 1);
    let text = std::fs::read_to_string(&all).unwrap();
    assert!(text.contains("alice@example.com"), "unredacted by default");
    let v: Value = serde_json::from_str(&text).unwrap();
    let last = v["Records"].as_array().unwrap().last().unwrap()["dynamodb"]["SequenceNumber"]
        .as_str()
        .unwrap()
        .to_owned();

    // A user renames herself: only that record after the sequence number.
    let alice = ItemKey::User("a11ce000-0000-4000-8000-000000000001".parse().unwrap());
    let mut item = alice.to_attributes();
    item.insert("UserName".into(), AttributeValue::S("Alice Liddell".into()));
    item.insert(
        "EMailAddress".into(),
        AttributeValue::S("alice@example.com".into()),
    );
    t.store.put(item, None).await.unwrap();
    let later = tmp(&format!("{}-later.json", t.name));
    let mut args = capture_args(&t, &later);
    args.after_sequence = Some(last.parse().unwrap());
    args.redact = true;
    let c = capture(&target, &args).await.unwrap();
    assert_eq!(c.records, 1);
    assert_eq!(c.redacted_values, 3, "old name, new name, e-mail");
    let text = std::fs::read_to_string(&later).unwrap();
    assert!(
        !text.contains("alice@example.com") && !text.contains("Alice"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let ddb = &v["Records"][0]["dynamodb"];
    assert_eq!(
        ddb["Keys"]["PK"]["S"], "a11ce000-0000-4000-8000-000000000001",
        "ids kept"
    );
    assert_eq!(
        ddb["NewImage"]["EMailAddress"]["S"],
        "user-1@example.invalid"
    );
    assert_eq!(
        ddb["OldImage"]["EMailAddress"]["S"], "user-1@example.invalid",
        "stable per value"
    );
    assert_ne!(
        ddb["NewImage"]["UserName"], ddb["OldImage"]["UserName"],
        "distinct values stay distinct"
    );
}

#[tokio::test]
async fn capture_of_a_table_without_stream_says_so() {
    let t = TestTable::with_schema(&nishiki_worker::schema::nishiki().without_stream()).await;
    let target = Target::connect(&t.endpoint, &t.name, &AppTable::of::<Nishiki>()).await;
    let e = capture(&target, &capture_args(&t, &tmp("none.json")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has no stream") && e.contains("NEW_AND_OLD_IMAGES"),
        "{e}"
    );
}
