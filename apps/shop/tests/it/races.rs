//! The service writes between the worker's read and its write (issue 29):
//! a reference flag decided from a brand's or category's existence must
//! not land once that existence changed. Each test makes the race
//! deterministic ([`support::race`]: the service's writes happen right
//! before the worker's first write) and checks the product the service
//! still shows as right is left as it is.

use crate::support;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use shop_worker::items::Product;
use shop_worker::keys::{self, Id, ItemKey};
use shop_worker::schema::schema;
use support::race::raced;
use support::*;
use worker_engine::EventFunction;
use worker_engine::item::Item;
use worker_engine::store::{ItemReader, ItemWriter};
use worker_testkit::race::ServiceOp;
use worker_testkit::workload::Seeded;
use worker_testkit::{Drain, TestTable};

fn product(rng: &mut Seeded, brand: &Id, category: &Id) -> Product {
    Product {
        id: id_at(rng, T0 + 100),
        name: Some("P".into()),
        price: Some(1.0),
        stock: Some(1),
        brand_id: Some(brand.clone()),
        category_id: Some(category.clone()),
        stamps: stamps(T0 + 100, T0 + 100),
    }
}

async fn flag(table: &TestTable, p: &Product) -> Vec<String> {
    let item: Item = table.store.get(&p.key(), true).await.unwrap().unwrap();
    match item.get(keys::MISSING_REFS) {
        Some(AttributeValue::Ss(s)) => s.clone(),
        None => Vec::new(),
        other => panic!("{other:?}"),
    }
}

/// A brand, a category and a product of both, keys derived.
async fn shop(table: &TestTable, drain: &mut Drain, seed: u64) -> (Id, Id, Product) {
    let mut rng = Seeded::new(seed);
    let (brand, category) = (id_at(&mut rng, T0), id_at(&mut rng, T0));
    let p = product(&mut rng, &brand, &category);
    for item in [
        named(ItemKey::Brand(brand.clone()), "Br", T0, T0),
        named(ItemKey::Category(category.clone()), "Cat", T0, T0),
        p.to_item(),
    ] {
        table.store.put(item, None).await.unwrap();
    }
    drain.run(&app(table.store.clone())).await;
    (brand, category, p)
}

#[tokio::test]
async fn a_brand_written_again_before_the_flag_lands_leaves_its_products_unflagged() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let (brand, _, p) = shop(&table, &mut drain, 1).await;
    table
        .store
        .delete(&ItemKey::Brand(brand.clone()).key(), None)
        .await
        .unwrap();
    // The worker reads the brand gone and finds its product; the service
    // writes the brand again before the flag lands.
    let again = named(ItemKey::Brand(brand.clone()), "Br again", T0, T0 + 5);
    let (worker, race) = raced(&table.store, vec![ServiceOp::Put(again)]);
    drain.run(&worker).await;
    assert!(race.fired(), "the worker wrote after its read");
    assert!(
        table
            .store
            .get(&ItemKey::Brand(brand).key(), true)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        flag(&table, &p).await,
        Vec::<String>::new(),
        "a product of a live brand is flagged missing it"
    );
}

#[tokio::test]
async fn a_brand_created_during_the_audit_withholds_its_products_flag() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let mut rng = Seeded::new(2);
    let (brand, category) = (id_at(&mut rng, T0), id_at(&mut rng, T0));
    let p = product(&mut rng, &brand, &category);
    // The product comes first; its brand is on its way.
    for item in [
        named(ItemKey::Category(category.clone()), "Cat", T0, T0),
        p.to_item(),
    ] {
        table.store.put(item, None).await.unwrap();
    }
    drain.run(&app(table.store.clone())).await;
    let created = named(ItemKey::Brand(brand.clone()), "Br", T0, T0 + 5);
    let (worker, race) = raced(&table.store, vec![ServiceOp::Put(created)]);
    let report = worker
        .invoke_schedule(&json!({"job": "audit", "scheduledTime": NOW}))
        .await
        .expect("audit runs");
    assert!(race.fired());
    assert_eq!(
        flag(&table, &p).await,
        Vec::<String>::new(),
        "a product of a live brand is flagged missing it: {report}"
    );
}

#[tokio::test]
async fn a_brand_deleted_during_the_audit_keeps_its_products_flag() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let (brand, _, p) = shop(&table, &mut drain, 3).await;
    // Flagged while the brand was briefly gone; the brand is back now.
    table
        .store
        .update(
            &p.key(),
            shop_worker::refs::rules::set_flag(&[keys::BRAND_ID.to_owned()]),
            None,
        )
        .await
        .unwrap();
    drain.run(&app(table.store.clone())).await;
    // The audit reads the brand present and clears the flag; the service
    // deletes the brand before the write.
    let (worker, race) = raced(
        &table.store,
        vec![ServiceOp::Delete(ItemKey::Brand(brand).key())],
    );
    worker
        .invoke_schedule(&json!({"job": "audit", "scheduledTime": NOW}))
        .await
        .expect("audit runs");
    assert!(race.fired());
    assert_eq!(
        flag(&table, &p).await,
        vec![keys::BRAND_ID.to_owned()],
        "the flag of a product whose brand is gone was cleared"
    );
}

/// DynamoDB emits a second REMOVE, without an old image, when two deletes
/// of one item race: a brand's is handled from its keys (its products are
/// flagged), any other is skipped; none is failed or parked.
#[tokio::test]
async fn a_removal_without_an_old_image_is_handled_from_its_keys() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let (brand, _, p) = shop(&table, &mut drain, 4).await;
    table
        .store
        .delete(&ItemKey::Brand(brand).key(), None)
        .await
        .unwrap();
    let mut records = drain.read().await;
    assert_eq!(records.len(), 1);
    records[0].old_image = None;
    let worker = app(table.store.clone());
    let report = worker_testkit::handle_records(&worker, &records).await;
    worker_testkit::assert_handled(&report);
    drain.run(&worker).await;
    assert_eq!(flag(&table, &p).await, vec![keys::BRAND_ID.to_owned()]);
}
