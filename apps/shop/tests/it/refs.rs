//! References on DynamoDB Local: `audit` flags and reports products whose
//! brand or category does not exist and clears the flag once fixed; a
//! deleted brand's or category's products are found through GSI1/GSI2,
//! without a scan.

use crate::support;

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use shop_worker::items::Product;
use shop_worker::keys::{self, Id, ItemKey};
use shop_worker::schema::schema;
use support::*;
use worker_engine::EventFunction;
use worker_engine::item::Item;
use worker_engine::store::{ItemReader, ItemWriter};
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

/// `worker_missing_refs` of every product, by product id.
async fn flags(table: &TestTable, products: &[&Product]) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for p in products {
        let item: Item = table.store.get(&p.key(), true).await.unwrap().unwrap();
        let mut v = match item.get(keys::MISSING_REFS) {
            Some(AttributeValue::Ss(s)) => s.clone(),
            None => Vec::new(),
            other => panic!("{other:?}"),
        };
        v.sort();
        out.insert(p.id.to_string(), v);
    }
    out
}

async fn audit(app: &dyn EventFunction) -> Value {
    app.invoke_schedule(&json!({"job": "audit", "scheduledTime": NOW}))
        .await
        .expect("audit runs")
}

#[tokio::test]
async fn audit_flags_reports_and_clears_missing_references() {
    let table = TestTable::with_schema(&schema()).await;
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let mut rng = Seeded::new(5);
    let [b1, b2, c1, gone_brand, gone_cat] = [0; 5].map(|_| id_at(&mut rng, T0));
    for item in [
        named(ItemKey::Brand(b1.clone()), "Br1", T0, T0),
        named(ItemKey::Brand(b2.clone()), "Br2", T0, T0),
        named(ItemKey::Category(c1.clone()), "Cat1", T0, T0),
    ] {
        table.store.put(item, None).await.unwrap();
    }
    let ok = product(&mut rng, &b1, &c1);
    let no_brand = product(&mut rng, &gone_brand, &c1);
    let no_cat = product(&mut rng, &b2, &gone_cat);
    let neither = product(&mut rng, &gone_brand, &gone_cat);
    let all = [&ok, &no_brand, &no_cat, &neither];
    for p in all {
        table.store.put(p.to_item(), None).await.unwrap();
    }
    drain.run(&app).await;

    let report = audit(&app).await;
    assert_eq!(report["complete"], json!(true));
    assert_eq!(report["details"]["products"], json!(4));
    assert_eq!(report["details"]["missing"], json!(3));
    assert_eq!(report["details"]["flags_changed"], json!(3));
    let mut listed: Vec<(String, Value)> = report["details"]["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["product_id"].as_str().unwrap().to_owned(),
                l["missing"].clone(),
            )
        })
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![
        (no_brand.id.to_string(), json!(["brand_id"])),
        (no_cat.id.to_string(), json!(["category_id"])),
        (neither.id.to_string(), json!(["brand_id", "category_id"])),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, want, "ids only");
    let flagged = flags(&table, &all).await;
    assert_eq!(flagged[&ok.id.to_string()], Vec::<String>::new());
    assert_eq!(
        flagged[&neither.id.to_string()],
        ["brand_id", "category_id"]
    );
    // The worker's flag writes come back through the stream: no more writes.
    let settled = table.snapshot().await;
    drain.run(&app).await;
    assert_eq!(table.snapshot().await, settled);
    // No index reads the flag.
    for index in [keys::GSI1, keys::GSI2] {
        let found = query(
            table.store.as_ref(),
            Some(index),
            (
                if index == keys::GSI1 {
                    keys::GSI1PK
                } else {
                    keys::GSI2PK
                },
                &format!("BRAND#{b2}"),
            ),
            None,
        )
        .await;
        assert!(found.iter().all(|i| !i.contains_key(keys::MISSING_REFS)));
    }

    // Idempotent: a second audit changes nothing.
    let report = audit(&app).await;
    assert_eq!(report["details"]["flags_changed"], json!(0));
    assert_eq!(table.snapshot().await, settled);

    // Fixed: the brand exists now; its products lose the flag (or part).
    table
        .store
        .put(
            named(ItemKey::Brand(gone_brand.clone()), "Back", T0, T0),
            None,
        )
        .await
        .unwrap();
    let report = audit(&app).await;
    assert_eq!(report["details"]["missing"], json!(2));
    let flagged = flags(&table, &all).await;
    assert_eq!(flagged[&no_brand.id.to_string()], Vec::<String>::new());
    assert_eq!(flagged[&neither.id.to_string()], ["category_id"]);
}

#[tokio::test]
async fn a_deleted_brand_or_category_reports_its_products_through_the_indexes() {
    let table = TestTable::with_schema(&schema()).await;
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let mut rng = Seeded::new(6);
    let [b1, b2, c1, c2] = [0; 4].map(|_| id_at(&mut rng, T0));
    for item in [
        named(ItemKey::Brand(b1.clone()), "Br1", T0, T0),
        named(ItemKey::Brand(b2.clone()), "Br2", T0, T0),
        named(ItemKey::Category(c1.clone()), "Cat1", T0, T0),
        named(ItemKey::Category(c2.clone()), "Cat2", T0, T0),
    ] {
        table.store.put(item, None).await.unwrap();
    }
    let p1 = product(&mut rng, &b1, &c1);
    let p2 = product(&mut rng, &b1, &c2);
    let p3 = product(&mut rng, &b2, &c2);
    let all = [&p1, &p2, &p3];
    for p in all {
        table.store.put(p.to_item(), None).await.unwrap();
    }
    drain.run(&app).await;

    let before = table.store.metrics().snapshot();
    table
        .store
        .delete(&ItemKey::Brand(b1.clone()).key(), None)
        .await
        .unwrap();
    drain.run(&app).await;
    let used = table.store.metrics().snapshot().since(&before);
    assert_eq!(used.scan, 0, "no scan");
    assert!(used.query >= 1);
    let flagged = flags(&table, &all).await;
    assert_eq!(flagged[&p1.id.to_string()], ["brand_id"]);
    assert_eq!(flagged[&p2.id.to_string()], ["brand_id"]);
    assert_eq!(flagged[&p3.id.to_string()], Vec::<String>::new());

    table
        .store
        .delete(&ItemKey::Category(c2.clone()).key(), None)
        .await
        .unwrap();
    drain.run(&app).await;
    let flagged = flags(&table, &all).await;
    assert_eq!(flagged[&p2.id.to_string()], ["brand_id", "category_id"]);
    assert_eq!(flagged[&p3.id.to_string()], ["category_id"]);
    assert_eq!(flagged[&p1.id.to_string()], ["brand_id"]);

    // The audit agrees with what the deletions flagged.
    let settled = table.snapshot().await;
    let report = audit(&app).await;
    assert_eq!(report["details"]["flags_changed"], json!(0));
    assert_eq!(report["details"]["missing"], json!(3));
    assert_eq!(table.snapshot().await, settled);
}
