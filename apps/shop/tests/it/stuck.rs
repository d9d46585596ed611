//! `stuck-orders` on DynamoDB Local: one GSI1 range query per status
//! finds the orders that stayed too long in PENDING or PAID; reported
//! without a bus, published as `OrderStuck` events with one.

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use shop_worker::config::Settings;
use shop_worker::items::Order;
use shop_worker::schema::schema;
use shop_worker::stuck::rules::EVENT_TYPE;
use support::*;
use worker_engine::EventFunction;
use worker_engine::RecordingPublisher;
use worker_engine::metrics::{CapturedLines, Emitter};
use worker_engine::store::ItemWriter;
use worker_testkit::workload::Seeded;
use worker_testkit::{Drain, TestTable};

/// Orders by (status, hours since their last update), with their ids.
async fn seeded(table: &TestTable) -> Vec<Order> {
    let mut rng = Seeded::new(11);
    let now = now().timestamp();
    let mut orders = Vec::new();
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
        orders.push(o);
    }
    let mut drain = Drain::new(table).await;
    drain.run(&app(table.store.clone())).await;
    orders
}

fn ids(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["order_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn tick() -> Value {
    json!({"job": "stuck-orders", "scheduledTime": NOW})
}

#[tokio::test]
async fn stuck_orders_are_found_by_status_and_age_and_reported() {
    let table = TestTable::with_schema(&schema()).await;
    let orders = seeded(&table).await;
    let mut want: Vec<String> = [0, 1, 4]
        .iter()
        .map(|&i| orders[i].id.to_string())
        .collect();
    want.sort();

    // No bus: reported (details, metrics), nothing published.
    let publisher = Arc::new(RecordingPublisher::default());
    let lines = CapturedLines::default();
    let app = SHOP
        .worker_with(
            table.store.clone(),
            Settings::for_table("t"),
            publisher.clone(),
        )
        .with_metrics(Emitter::new(
            "ShopWorker",
            "schedule",
            Arc::new(lines.clone()),
        ));
    let before = table.store.metrics().snapshot();
    let report = app.invoke_schedule(&tick()).await.unwrap();
    let used = table.store.metrics().snapshot().since(&before);
    assert_eq!(report["complete"], json!(true));
    assert_eq!(report["details"]["stuck"], json!(3));
    assert_eq!(
        report["details"]["by_status"],
        json!({"PENDING": 2, "PAID": 1})
    );
    assert_eq!(report["details"]["published"], json!(0));
    assert_eq!(ids(&report["details"]["listed"]), want);
    assert_eq!((used.query, used.scan), (2, 0), "one query per status");
    assert!(publisher.sent().is_empty());
    let emf = lines.lines().join("\n");
    assert!(emf.contains("\"OrdersStuck\":3"), "{emf}");

    // With a bus: one OrderStuck event per stuck order.
    let mut settings = Settings::for_table("t");
    settings.event_bus = Some("shop-bus".into());
    settings.statuses = vec!["PENDING".into()];
    let app = SHOP.worker_with(table.store.clone(), settings, publisher.clone());
    let report = app.invoke_schedule(&tick()).await.unwrap();
    assert_eq!(report["details"]["published"], json!(2));
    let sent = publisher.sent();
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter()
            .all(|e| e.detail_type == EVENT_TYPE && e.event_bus_name == "shop-bus")
    );
    let details: Vec<Value> = sent
        .iter()
        .map(|e| serde_json::from_str(&e.detail).unwrap())
        .collect();
    let mut sent_ids = ids(&json!(details));
    let mut pending: Vec<String> = [0, 4].iter().map(|&i| orders[i].id.to_string()).collect();
    pending.sort();
    sent_ids.sort();
    assert_eq!(sent_ids, pending);

    // Moved on: a stuck order paid now is no longer stuck.
    let paid = Order {
        status: Some("SHIPPED".into()),
        stamps: stamps(orders[0].stamps.created_at, now().timestamp()),
        ..orders[0].clone()
    };
    let mut drain = Drain::new(&table).await;
    drain.skip_existing().await;
    table.store.put(paid.to_item(), None).await.unwrap();
    drain.run(&app).await;
    let report = app.invoke_schedule(&tick()).await.unwrap();
    assert_eq!(report["details"]["stuck"], json!(1));
}
