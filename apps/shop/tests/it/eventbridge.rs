//! `OrderStuck` events through a real EventBridge (moto's server): orders
//! written by the service on DynamoDB Local without index attributes, the
//! stream handled by the shop's handlers (which derive the `GSI1` keys the
//! job reads), then `stuck-orders` publishes through
//! `EventBridgePublisher` to the bus; a rule matching the shop's source
//! and detail type routes them to an SQS queue, where each is read back
//! with its detail. Once in process (the publisher on moto's client), once
//! as Lambda runs it: the `shop-schedule` bootstrap on a local Runtime API,
//! EventBridge found through `AWS_ENDPOINT_URL_EVENTBRIDGE`.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use shop_worker::config::Settings;
use shop_worker::items::Order;
use shop_worker::schema::schema;
use shop_worker::stuck::rules::{EVENT_SOURCE, EVENT_TYPE};
use support::*;
use worker_engine::EventFunction;
use worker_engine::store::ItemWriter;
use worker_testkit::eventbridge::{RoutedBus, details_by, run_schedule_function};
use worker_testkit::workload::Seeded;
use worker_testkit::{Drain, TestTable};

fn tick() -> Value {
    json!({"job": "stuck-orders", "scheduledTime": NOW})
}

/// Orders by (status, hours since their last update), written as the
/// service writes them. Returns the expected details of the stuck ones
/// (PENDING or PAID for more than 48 hours, the defaults) by order id.
async fn orders(table: &TestTable) -> BTreeMap<String, Value> {
    let mut rng = Seeded::new(31);
    let now = now().timestamp();
    let mut stuck = BTreeMap::new();
    for (status, hours) in [
        ("PENDING", 72),
        ("PAID", 49),
        ("PAID", 47),
        ("SHIPPED", 100),
        ("PENDING", 200),
        ("DELIVERED", 300),
    ] {
        let updated = now - hours * 3600;
        let o = Order {
            user: id_at(&mut rng, updated - 50),
            id: id_at(&mut rng, updated - 10),
            status: Some(status.into()),
            total_price: Some(20.0),
            stamps: stamps(updated - 10, updated),
        };
        table.store.put(o.to_item(), None).await.unwrap();
        if ["PENDING", "PAID"].contains(&status) && hours > 48 {
            stuck.insert(
                o.id.to_string(),
                json!({
                    "order_id": o.id.to_string(),
                    "user_id": o.user.to_string(),
                    "status": status,
                    "updated_at": updated,
                    "stuck_seconds": now - updated,
                }),
            );
        }
    }
    assert_eq!(stuck.len(), 3);
    stuck
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_orders_reach_the_bus_and_the_queue_its_rule_feeds() {
    let (moto, routed) = RoutedBus::of_events("shop", EVENT_SOURCE, EVENT_TYPE).await;
    let table = TestTable::with_schema(&schema()).await;
    let stuck = orders(&table).await;

    let mut settings = Settings::for_table(&table.name);
    settings.event_bus = Some(routed.bus.clone());
    let publisher = RoutedBus::publisher(moto);
    let app = SHOP.worker_with(table.store.clone(), settings, publisher);

    // Before the stream is handled no order has its index keys: the job
    // finds nothing, nothing is published.
    let report = app.invoke_schedule(&tick()).await.unwrap();
    assert_eq!(report["details"]["published"], json!(0), "{report}");
    assert!(routed.received(0, Duration::from_secs(10)).await.is_empty());

    let mut drain = Drain::new(&table).await;
    drain.run(&app).await;
    let report = app.invoke_schedule(&tick()).await.unwrap();
    assert_eq!(report["details"]["stuck"], json!(3), "{report}");
    assert_eq!(report["details"]["published"], json!(3), "{report}");
    let events = routed.received(3, Duration::from_secs(30)).await;
    assert_eq!(
        details_by(events, EVENT_SOURCE, EVENT_TYPE, "order_id"),
        stuck
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_function_publishes_to_the_bus_the_environment_names() {
    let (moto, routed) = RoutedBus::of_events("shop-fn", EVENT_SOURCE, EVENT_TYPE).await;
    let table = TestTable::with_schema(&schema()).await;
    let stuck = orders(&table).await;
    let mut drain = Drain::new(&table).await;
    drain.run(&app(table.store.clone())).await;

    let answer = run_schedule_function(
        Path::new(env!("CARGO_BIN_EXE_shop-schedule")),
        "stuck-orders",
        NOW,
        &table,
        &routed,
        moto,
        &tick(),
    )
    .await;
    assert_eq!(answer["details"]["published"], json!(3), "{answer}");
    let events = routed.received(3, Duration::from_secs(30)).await;
    assert_eq!(
        details_by(events, EVENT_SOURCE, EVENT_TYPE, "order_id"),
        stuck
    );
}
