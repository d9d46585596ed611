//! The derive handler on DynamoDB Local: every access pattern of the seed
//! answered through the indexes after a shuffled, redelivered history
//! written without index attributes; stale records never win; no write
//! when nothing derived changes.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use shop_worker::derive::rules::Derivation;
use shop_worker::items::{Order, Product};
use shop_worker::keys::{self, Id, ItemKey};
use shop_worker::schema::schema;
use support::*;
use worker_engine::EventFunction;
use worker_engine::store::{Expr, ItemReader, ItemWriter};
use worker_engine::stream::encode_event;
use worker_testkit::recorded::Log;
use worker_testkit::workload::{Seeded, apply_batched};
use worker_testkit::{Drain, TestTable};
use worker_toolkit::layers::RecordingStore;

type Keys = BTreeSet<(String, String)>;

fn keys_where(
    truth: &std::collections::BTreeMap<(String, String), worker_engine::item::Item>,
    f: impl Fn(&(String, String), &worker_engine::item::Item) -> bool,
) -> Keys {
    truth
        .iter()
        .filter(|(k, i)| f(k, i))
        .map(|(k, _)| k.clone())
        .collect()
}

#[tokio::test]
async fn every_access_pattern_after_a_shuffled_redelivered_history() {
    let table = TestTable::with_schema(&schema()).await;
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let mut rng = Seeded::new(2024);
    let h = history(&mut rng, 2000);
    assert_eq!(h.writes.len(), 2000);
    apply_batched(table.store.as_ref(), &h.writes).await;
    let records = drain.read().await;
    assert!(records.len() > 1900, "{} records", records.len());
    let delivered = rng.redelivered(records, 0.25);
    for batch in rng.batches(delivered, 100) {
        let report = app
            .invoke_stream(&encode_event(&batch, None))
            .await
            .expect("stream event");
        assert!(report.batch_item_failures.is_empty(), "{report:?}");
    }
    // The worker's own writes come back: they change nothing more.
    let settled = table.snapshot().await;
    drain.run(&app).await;
    assert_eq!(table.snapshot().await, settled);

    let truth = final_state(&h.writes);
    let store = table.store.as_ref();
    // The table: the service's items, each with exactly its derived keys.
    assert_eq!(
        settled.iter().map(worker_testkit::key_of).collect::<Keys>(),
        truth.keys().cloned().collect::<Keys>()
    );
    for item in &settled {
        let d = Derivation::of(item).unwrap().unwrap();
        assert!(d.satisfied_by(item), "{}", d.key);
        let written = &truth[&worker_testkit::key_of(item)];
        assert_eq!(&d.apply(written), item, "the service's fields, kept");
    }
    let is = |prefix: &'static str| move |k: &(String, String), _: &_| k.1.starts_with(prefix);

    // Users: by id, list, by e-mail (LSI).
    let users = query(store, None, (keys::PK, "USER"), None).await;
    assert_eq!(
        sorted_keys(&users, keys::SK),
        keys_where(&truth, is("USER#"))
    );
    let mut checked = 0;
    for (k, item) in truth.iter().filter(|(k, _)| k.0 == "USER") {
        let email = s(item, keys::EMAIL).unwrap();
        let found = query(
            store,
            Some(keys::LSI),
            (keys::PK, "USER"),
            Some((keys::SKU, "=", &format!("EMAIL#{email}"))),
        )
        .await;
        let want = keys_where(&truth, |k, i| {
            k.0 == "USER" && s(i, keys::EMAIL) == Some(email)
        });
        assert!(want.contains(k));
        assert_eq!(keys_of(&found).into_iter().collect::<Keys>(), want);
        checked += 1;
    }
    assert!(checked > 20, "{checked} users");

    // Categories and brands: list, by name prefix (LSI).
    for (pk, prefix) in [("CAT", "CAT#NAME#"), ("BRAND", "BRAND#NAME#")] {
        let all = query(store, None, (keys::PK, pk), None).await;
        assert_eq!(keys_of(&all).len(), 8);
        let names: BTreeSet<&str> = truth
            .iter()
            .filter(|(k, _)| k.0 == pk)
            .map(|(_, i)| s(i, keys::NAME).unwrap())
            .collect();
        for name in names {
            let short = &name[..name.len().min(4)];
            let found = query(
                store,
                Some(keys::LSI),
                (keys::PK, pk),
                Some((keys::SKU, "begins_with", &format!("{prefix}{short}"))),
            )
            .await;
            let want = keys_where(&truth, |k, i| {
                k.0 == pk && s(i, keys::NAME).unwrap().starts_with(short)
            });
            assert_eq!(sorted_keys(&found, keys::SKU), want, "{pk} {short}");
        }
    }

    // Products: by brand (GSI1), brand + category (GSI1), category (GSI2),
    // category + brand (GSI2).
    let product_of = |i: &worker_engine::item::Item, b: Option<&Id>, c: Option<&Id>| {
        s(i, keys::BRAND_ID).is_some()
            && b.is_none_or(|b| s(i, keys::BRAND_ID) == Some(b.as_str()))
            && c.is_none_or(|c| s(i, keys::CATEGORY_ID) == Some(c.as_str()))
    };
    let mut listed = 0;
    for b in &h.brands {
        let found = query(
            store,
            Some(keys::GSI1),
            (keys::GSI1PK, &format!("BRAND#{b}")),
            None,
        )
        .await;
        let want = keys_where(&truth, |k, i| k.0 == "PROD" && product_of(i, Some(b), None));
        listed += want.len();
        assert_eq!(sorted_keys(&found, keys::GSI1SK), want);
        for c in &h.categories {
            let found = query(
                store,
                Some(keys::GSI1),
                (keys::GSI1PK, &format!("BRAND#{b}")),
                Some((keys::GSI1SK, "begins_with", &format!("CAT#{c}#"))),
            )
            .await;
            let want = keys_where(&truth, |k, i| {
                k.0 == "PROD" && product_of(i, Some(b), Some(c))
            });
            assert_eq!(sorted_keys(&found, keys::GSI1SK), want);
            let found = query(
                store,
                Some(keys::GSI2),
                (keys::GSI2PK, &format!("CAT#{c}")),
                Some((keys::GSI2SK, "begins_with", &format!("BRAND#{b}#"))),
            )
            .await;
            assert_eq!(sorted_keys(&found, keys::GSI2SK), want);
        }
    }
    assert_eq!(
        listed,
        keys_where(&truth, is("PRO#")).len(),
        "every product listed once"
    );
    for c in &h.categories {
        let found = query(
            store,
            Some(keys::GSI2),
            (keys::GSI2PK, &format!("CAT#{c}")),
            None,
        )
        .await;
        let want = keys_where(&truth, |k, i| k.0 == "PROD" && product_of(i, None, Some(c)));
        assert_eq!(sorted_keys(&found, keys::GSI2SK), want);
        // The index carries what a listing shows.
        for item in &found {
            let k = worker_testkit::key_of(item);
            assert_eq!(item.get(keys::NAME), truth[&k].get(keys::NAME));
        }
    }

    // Orders: a user's (table), by status (GSI1), by status since a time.
    for user in &h.users {
        let pk = format!("USER#{user}");
        let found = query(
            store,
            None,
            (keys::PK, &pk),
            Some((keys::SK, "begins_with", "ORDER#")),
        )
        .await;
        let want = keys_where(&truth, |k, _| k.0 == pk);
        assert_eq!(sorted_keys(&found, keys::SK), want);
    }
    let since = T0 + 3 * 86_400;
    let mut orders = 0;
    for status in STATUSES {
        let pk = format!("ORDER#STATUS#{status}");
        let found = query(store, Some(keys::GSI1), (keys::GSI1PK, &pk), None).await;
        let want = keys_where(&truth, |k, i| {
            k.1.starts_with("ORDER#") && s(i, keys::STATUS) == Some(status)
        });
        orders += want.len();
        assert_eq!(sorted_keys(&found, keys::GSI1SK), want);
        let found = query(
            store,
            Some(keys::GSI1),
            (keys::GSI1PK, &pk),
            Some((keys::GSI1SK, ">=", &format!("AT#{since}"))),
        )
        .await;
        let want = keys_where(&truth, |k, i| {
            k.1.starts_with("ORDER#")
                && s(i, keys::STATUS) == Some(status)
                && num(i, keys::UPDATED_AT) >= since
        });
        assert_eq!(sorted_keys(&found, keys::GSI1SK), want);
    }
    assert!(orders > 100, "{orders} orders");
}

/// A settled order and product, with their records.
async fn settled(table: &TestTable, drain: &mut Drain) -> (Order, Product) {
    let mut rng = Seeded::new(9);
    let (b1, c1) = (id_at(&mut rng, T0), id_at(&mut rng, T0));
    let order = Order {
        user: id_at(&mut rng, T0),
        id: id_at(&mut rng, T0 + 10),
        status: Some("PENDING".into()),
        total_price: Some(12.5),
        stamps: stamps(T0 + 10, T0 + 10),
    };
    let product = Product {
        id: id_at(&mut rng, T0 + 20),
        name: Some("Green tea".into()),
        price: Some(4.0),
        stock: Some(3),
        brand_id: Some(b1),
        category_id: Some(c1),
        stamps: stamps(T0 + 20, T0 + 20),
    };
    for item in [order.to_item(), product.to_item()] {
        table.store.put(item, None).await.unwrap();
    }
    let app = app(table.store.clone());
    drain.run(&app).await;
    (order, product)
}

#[tokio::test]
async fn a_stale_record_after_a_newer_write_leaves_the_newer_keys() {
    let table = TestTable::with_schema(&schema()).await;
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let (order, product) = settled(&table, &mut drain).await;
    let paid = Order {
        status: Some("PAID".into()),
        stamps: stamps(T0 + 10, T0 + 500),
        ..order.clone()
    };
    let moved = Product {
        brand_id: Some(Id::at(T0 + 1, [7; 16])),
        stamps: stamps(T0 + 20, T0 + 600),
        ..product.clone()
    };
    table.store.put(paid.to_item(), None).await.unwrap();
    table.store.put(moved.to_item(), None).await.unwrap();
    drain.run(&app).await;
    let newer = table.snapshot().await;

    // The old versions' records (no index attributes), delivered again.
    let stale: Vec<_> = [order.to_item(), product.to_item()]
        .into_iter()
        .map(|item| worker_engine::stream::StreamChange {
            event_id: "stale".into(),
            kind: worker_engine::stream::ChangeKind::Modify,
            sequence_number: Some("1".parse().unwrap()),
            approximate_creation: None,
            keys: ItemKey::from_item(&item).unwrap().key(),
            old_image: None,
            new_image: Some(item),
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        })
        .collect();
    for _ in 0..2 {
        let report = app
            .invoke_stream(&encode_event(&stale, None))
            .await
            .unwrap();
        assert!(report.batch_item_failures.is_empty());
        assert_eq!(table.snapshot().await, newer, "the newer keys stay");
    }
    let store = table.store.as_ref();
    // The status change moved the order in GSI1.
    let pending = query(
        store,
        Some(keys::GSI1),
        (keys::GSI1PK, "ORDER#STATUS#PENDING"),
        None,
    )
    .await;
    assert!(pending.is_empty());
    let paid_now = query(
        store,
        Some(keys::GSI1),
        (keys::GSI1PK, "ORDER#STATUS#PAID"),
        None,
    )
    .await;
    assert_eq!(keys_of(&paid_now), keys_of(&[paid.key()]));
    assert_eq!(
        s(&paid_now[0], keys::GSI1SK),
        Some(&*format!("AT#{}", T0 + 500))
    );
    let old_brand = format!("BRAND#{}", product.brand_id.as_ref().unwrap());
    assert!(
        query(store, Some(keys::GSI1), (keys::GSI1PK, &old_brand), None)
            .await
            .is_empty()
    );

    // A record of a deleted item writes nothing back.
    store.delete(&paid.key(), None).await.unwrap();
    app.invoke_stream(&encode_event(&stale[..1], None))
        .await
        .unwrap();
    assert_eq!(store.get(&paid.key(), true).await.unwrap(), None);
}

#[tokio::test]
async fn no_write_for_a_record_that_changes_nothing_derived() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let (_, product) = settled(&table, &mut drain).await;
    let recorded = Arc::new(RecordingStore::new(table.store.clone()));
    let app = app(recorded.clone());
    // The service changes the price and the stock only.
    let set = Expr::new("SET #p = :p, #s = :s")
        .name("#p", keys::PRICE)
        .name("#s", keys::STOCK)
        .value(":p", AttributeValue::N("5".into()))
        .value(":s", AttributeValue::N("2".into()));
    table.store.update(&product.key(), set, None).await.unwrap();
    let records = drain.read().await;
    assert_eq!(records.len(), 1);
    let before = table.snapshot().await;
    for _ in 0..2 {
        let report = app
            .invoke_stream(&encode_event(&records, None))
            .await
            .unwrap();
        assert!(report.batch_item_failures.is_empty());
    }
    let log = Log::of(recorded.take());
    assert!(
        log.singles.is_empty() && log.batch_ops.is_empty(),
        "no write"
    );
    assert_eq!(table.snapshot().await, before);

    // A malformed product is skipped with an error, the batch goes on.
    let mut bad = Product {
        id: Id::at(T0 + 99, [9; 16]),
        ..product.clone()
    }
    .to_item();
    bad.insert(keys::BRAND_ID.into(), AttributeValue::S("not-an-id".into()));
    let fine = Product {
        id: Id::at(T0 + 98, [8; 16]),
        ..product
    };
    table.store.put(bad, None).await.unwrap();
    table.store.put(fine.to_item(), None).await.unwrap();
    let records = drain.read().await;
    let report = app
        .invoke_stream(&encode_event(&records, None))
        .await
        .unwrap();
    assert!(report.batch_item_failures.is_empty());
    let log = Log::of(recorded.take());
    assert_eq!(
        log.singles.len(),
        1,
        "only the well-formed product is written"
    );
    let item = table.store.get(&fine.key(), true).await.unwrap().unwrap();
    assert!(item.contains_key(keys::GSI2PK));
}
