//! The EventBridge publisher against a real EventBridge (moto's server):
//! entries go out in calls of at most 10 (moto refuses more, as AWS does),
//! an entry the service rejects comes back by its index with the service's
//! code while the others are delivered, a call refused as a whole is a
//! `NotifyError` with the API's code. Delivered means routed by a rule on
//! the bus to an SQS queue and read back from it.

use std::time::Duration;

use serde_json::json;
use worker_engine::{EventBridgePublisher, EventEntry, EventPublisher};
use worker_testkit::eventbridge::RoutedBus;
use worker_testkit::moto;

const SOURCE: &str = "engine.test";
const DETAIL_TYPE: &str = "Counted";

fn entry(bus: &str, n: usize) -> EventEntry {
    EventEntry {
        source: SOURCE.into(),
        detail_type: DETAIL_TYPE.into(),
        event_bus_name: bus.into(),
        detail: json!({"n": n, "text": format!("entry {n}")}).to_string(),
    }
}

#[tokio::test]
async fn entries_reach_the_bus_in_calls_of_ten_and_rejections_come_back_by_index() {
    let moto = moto::moto().await;
    let routed = RoutedBus::new(
        moto,
        "engine-publisher",
        &json!({"source": [SOURCE], "detail-type": [DETAIL_TYPE]}),
    )
    .await;
    let mut entries: Vec<EventEntry> = (0..23).map(|n| entry(&routed.bus, n)).collect();
    // Not JSON: EventBridge rejects this entry alone.
    entries[12].detail = "{not json".into();
    // Another source: accepted, but the rule does not route it.
    entries[20].source = "someone.else".into();
    let publisher = EventBridgePublisher::with_client(moto.eventbridge());
    let report = publisher.publish(&entries).await.expect("PutEvents");
    assert_eq!(report.sent, 22);
    assert_eq!(report.rejected, [(12, "MalformedDetail".to_owned())]);

    let events = routed.received(21, Duration::from_secs(30)).await;
    let mut got: Vec<u64> = events
        .iter()
        .map(|e| {
            assert_eq!(e["source"], SOURCE);
            assert_eq!(e["detail-type"], DETAIL_TYPE);
            assert_eq!(e["region"], moto::REGION);
            let n = e["detail"]["n"].as_u64().expect("detail.n");
            assert_eq!(e["detail"]["text"], format!("entry {n}"));
            n
        })
        .collect();
    got.sort_unstable();
    let want: Vec<u64> = (0..23).filter(|n| ![12, 20].contains(n)).collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_bus_that_does_not_exist_fails_the_call() {
    let moto = moto::moto().await;
    let publisher = EventBridgePublisher::with_client(moto.eventbridge());
    let e = publisher
        .publish(&[entry("no-such-bus-anywhere", 0)])
        .await
        .expect_err("no such bus");
    assert_eq!(e.code, "ResourceNotFoundException", "{e}");
    let text = e.to_string();
    assert!(text.contains("NOTIFY_EVENT_BUS"), "{text}");
}
