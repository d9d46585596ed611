//! The app's description against its code: the deployed functions it
//! derives, every DynamoDB request the handlers and jobs make being one
//! their function is granted, and the metrics each invocation writes.

use crate::support;
use worker_testkit::deploy::Deployed;

use std::collections::BTreeSet;

use serde_json::json;
use shop_worker::app::APP;
use shop_worker::config::Settings;
use shop_worker::items::{Order, Product};
use shop_worker::keys::{self, ItemKey, Job};
use shop_worker::schema::schema;
use support::*;
use worker_engine::store::ItemWriter;
use worker_testkit::infra::{actions_used, each_job_within_its_grants, emf, granted};
use worker_testkit::workload::Seeded;
use worker_testkit::{Drain, TestTable};

#[test]
fn the_description_gives_the_deployed_functions() {
    APP.check().expect("a consistent description");
    let functions = APP.functions();
    let [stream, audit, stuck, backfill] = functions.as_slice() else {
        panic!("four functions: {functions:?}");
    };
    assert!(stream.reads_stream && !stream.publishes_events);
    assert_eq!(
        stream.dynamodb_actions,
        [
            "dynamodb:ConditionCheckItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem"
        ]
    );
    assert_eq!(stream.indexes, [keys::GSI1, keys::GSI2]);
    assert_eq!(
        (audit.logical_id, audit.job),
        ("AuditFunction", Some(Job::Audit))
    );
    assert!(audit.indexes.is_empty() && !audit.dynamodb_actions.contains(&"dynamodb:Scan"));
    assert_eq!(
        (stuck.logical_id, stuck.job),
        ("StuckOrdersFunction", Some(Job::StuckOrders))
    );
    assert_eq!(stuck.dynamodb_actions, ["dynamodb:Query"]);
    assert_eq!(stuck.indexes, [keys::GSI1]);
    assert!(stuck.publishes_events);
    for v in ["STUCK_STATUSES", "STUCK_AFTER_HOURS", "NOTIFY_EVENT_BUS"] {
        assert!(stuck.env_vars.contains(&v), "{v}");
        assert!(!backfill.env_vars.contains(&v), "{v}");
    }
    assert!(backfill.dynamodb_actions.contains(&"dynamodb:Scan"));
    assert_eq!(
        schema().key_attributes(),
        ["PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK", "SKU"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_one_its_function_may_make_and_is_counted() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let mut settings = Settings::for_table("test");
    settings.event_bus = Some("bus".into());
    let (app, lines) = SHOP.worker_emitting(table.store.clone(), settings);
    let mut drain = Drain::new(&table).await;
    let mut rng = Seeded::new(3);
    let (brand, category, user) = (
        id_at(&mut rng, T0),
        id_at(&mut rng, T0),
        id_at(&mut rng, T0),
    );
    let now = now().timestamp();
    let product = Product {
        id: id_at(&mut rng, T0 + 5),
        name: Some("Tea".into()),
        price: Some(2.0),
        stock: Some(1),
        brand_id: Some(brand.clone()),
        category_id: Some(category.clone()),
        stamps: stamps(T0 + 5, T0 + 5),
    };
    let order = Order {
        user: user.clone(),
        id: id_at(&mut rng, now - 72 * 3600),
        status: Some("PENDING".into()),
        total_price: Some(2.0),
        stamps: stamps(now - 72 * 3600, now - 72 * 3600),
    };
    for item in [
        named(ItemKey::Brand(brand.clone()), "Br", T0, T0),
        named(ItemKey::Category(category.clone()), "Cat", T0, T0),
        product.to_item(),
        order.to_item(),
    ] {
        store.put(item, None).await.unwrap();
    }
    // The worker's requests only (not the service's writes in between).
    let mut used = BTreeSet::new();
    let before = store.metrics().snapshot();
    drain.run(&app).await;
    used.extend(actions_used(&store.metrics().snapshot().since(&before)));
    store
        .delete(&ItemKey::Brand(brand.clone()).key(), None)
        .await
        .unwrap();
    let before = store.metrics().snapshot();
    drain.run(&app).await;
    used.extend(actions_used(&store.metrics().snapshot().since(&before)));
    let stream = APP.stream_function();
    assert!(used.is_subset(&granted(&stream)), "{used:?}");
    assert_eq!(used, granted(&stream), "each granted action is used");
    let derived: u64 = emf(&lines)
        .iter()
        .map(|l| l["DerivedKeyWrites"].as_u64().expect("counted"))
        .sum();
    assert_eq!(derived, 4, "brand, category, product, order");
    let flags: u64 = emf(&lines)
        .iter()
        .map(|l| l["ReferenceFlagWrites"].as_u64().expect("counted"))
        .sum();
    assert_eq!(flags, 1, "the deleted brand's product");

    // Each job, against its own function.
    each_job_within_its_grants(&APP, &app, store, NOW).await;
    let ticks = emf(&lines);
    let line = |job: &str| {
        ticks
            .iter()
            .find(|l| l["Job"] == job)
            .cloned()
            .expect("a job line")
    };
    let stuck = line("stuck-orders");
    assert_eq!(
        (&stuck["OrdersStuck"], &stuck["OrderStuckEvents"]),
        (&json!(1), &json!(1))
    );
    let audit = line("audit");
    assert_eq!(
        (
            &audit["ProductsMissingRefs"],
            &audit["ReferenceFlagsChanged"]
        ),
        (&json!(1), &json!(0)),
        "already flagged by the deletion"
    );
    let backfill = line("backfill");
    assert_eq!(backfill["BackfillWrites"], json!(0));
}
