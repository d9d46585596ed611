//! The shop worker's event fixtures (`events/shop/`): every entry of
//! `events/shop/manifest.json` is replayed twice (idempotency) on a
//! fresh table through the code of `shop-worker replay`, and the table
//! is compared with its golden snapshot.
//!
//! - `cargo test -p shop-worker --test it fixtures::`: compare;
//! - `UPDATE_GOLDEN=1 cargo test -p shop-worker --test it fixtures::`:
//!   rewrite the goldens (review the diff);
//! - `REGENERATE_FIXTURES=1 cargo test -p shop-worker --test it fixtures::
//!   -- --ignored regenerate`: rebuild the tables and re-capture the stream
//!   files from DynamoDB Local (the service's writes, read back from the
//!   stream), rewrite the ticks and the manifest; then update the goldens.

use crate::support;

use std::path::PathBuf;

use shop_cli::Shop;
use shop_worker::items::{Order, Product, User};
use shop_worker::keys::{self, Id, ItemKey};
use shop_worker::schema::schema;
use support::*;
use worker_engine::item::Item;
use worker_testkit::fixtures::{self, Fixture};
use worker_testkit::workload::Write;
use worker_toolkit::replay::snapshot::{read_snapshot, write_snapshot};

const KEYS: (&str, &str) = (keys::PK, keys::SK);
/// The stream ARN the captures carry (as Lambda delivers them).
const STREAM_ARN: &str =
    "arn:aws:dynamodb:eu-west-1:123456789012:table/shop/stream/2024-06-01T00:00:00.000";

fn events_dir() -> PathBuf {
    fixtures::events_dir(env!("CARGO_MANIFEST_DIR"), "shop")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_replays_to_its_golden_twice() {
    fixtures::replay_every_fixture_twice::<Shop>(&events_dir(), 10).await;
}

/// Every event file is replayed by an entry; every file named exists; the
/// backfill of the table written without index attributes gives back the
/// table the stream built.
#[test]
fn the_manifest_covers_every_fixture() {
    let dir = events_dir();
    fixtures::the_manifest_covers_every_fixture(&dir);
    let backfilled = std::fs::read_to_string(dir.join("golden/backfill.json")).expect("golden");
    let streamed = std::fs::read_to_string(dir.join("tables/shop.json")).expect("table");
    assert_eq!(
        backfilled, streamed,
        "backfill derives what the stream derived"
    );
    for table in ["tables/shop.json", "tables/underived.json"] {
        read_snapshot(&dir.join(table), KEYS).expect("a snapshot");
    }
}

/// Epoch seconds `hours` before the fixtures' now.
fn ago(hours: i64) -> i64 {
    now().timestamp() - hours * 3600
}

/// A fixed id made `hours` ago (`n` tells ids of one time apart).
fn id(hours: i64, n: u8) -> Id {
    Id::at(ago(hours), [n; 16])
}

struct Ids {
    drinks: Id,
    snacks: Id,
    tea_co: Id,
    crunch: Id,
    ann: Id,
    ben: Id,
    green_tea: Id,
    chips: Id,
    orphan: Id,
    gone_brand: Id,
    stuck: Id,
    recent: Id,
    shipped: Id,
}

fn ids() -> Ids {
    Ids {
        drinks: id(900, 1),
        snacks: id(900, 2),
        tea_co: id(800, 3),
        crunch: id(800, 4),
        ann: id(700, 5),
        ben: id(700, 6),
        green_tea: id(600, 7),
        chips: id(600, 8),
        orphan: id(600, 9),
        gone_brand: id(950, 10),
        stuck: id(80, 11),
        recent: id(20, 12),
        shipped: id(100, 13),
    }
}

fn product(id: &Id, name: &str, brand: &Id, category: &Id, hours: i64) -> Product {
    Product {
        id: id.clone(),
        name: Some(name.into()),
        price: Some(3.5),
        stock: Some(10),
        brand_id: Some(brand.clone()),
        category_id: Some(category.clone()),
        stamps: stamps(ago(hours), ago(hours)),
    }
}

fn order(user: &Id, id: &Id, status: &str, created: i64, updated: i64) -> Order {
    Order {
        user: user.clone(),
        id: id.clone(),
        status: Some(status.into()),
        total_price: Some(21.0),
        stamps: stamps(ago(created), ago(updated)),
    }
}

fn user(id: &Id, n: u8) -> User {
    User {
        id: id.clone(),
        name: Some(format!("user-{n}")),
        email: Some(format!("user-{n}@example.invalid")),
        stamps: stamps(ago(700), ago(700)),
    }
}

/// The table of the fixtures as the service wrote it (no index attribute).
fn service_items() -> Vec<Item> {
    let i = ids();
    vec![
        named(
            ItemKey::Category(i.drinks.clone()),
            "Drinks",
            ago(900),
            ago(900),
        ),
        named(
            ItemKey::Category(i.snacks.clone()),
            "Snacks",
            ago(900),
            ago(900),
        ),
        named(
            ItemKey::Brand(i.tea_co.clone()),
            "TeaCo",
            ago(800),
            ago(800),
        ),
        named(
            ItemKey::Brand(i.crunch.clone()),
            "Crunch",
            ago(800),
            ago(800),
        ),
        user(&i.ann, 1).to_item(),
        user(&i.ben, 2).to_item(),
        product(&i.green_tea, "Green tea", &i.tea_co, &i.drinks, 600).to_item(),
        product(&i.chips, "Chips", &i.crunch, &i.snacks, 600).to_item(),
        // Names a brand that does not exist: the audit flags it.
        product(&i.orphan, "Lost", &i.gone_brand, &i.snacks, 600).to_item(),
        // PENDING for 80 h: stuck. PAID 20 h ago: not yet.
        order(&i.ann, &i.stuck, "PENDING", 80, 80).to_item(),
        order(&i.ann, &i.recent, "PAID", 20, 20).to_item(),
        order(&i.ben, &i.shipped, "SHIPPED", 100, 90).to_item(),
    ]
}

/// The service's writes of each stream fixture, with what it shows.
fn stream_fixtures() -> Vec<(&'static str, &'static str, Vec<Write>)> {
    let i = ids();
    let mut malformed = product(&id(1, 20), "Bad", &i.tea_co, &i.drinks, 1).to_item();
    malformed.insert(
        keys::BRAND_ID.into(),
        aws_sdk_dynamodb::types::AttributeValue::S("not-a-ksuid".into()),
    );
    vec![
        (
            "products-written",
            "A new product, a product moved to another brand and category, and one whose brand_id is not a KSUID: the first two get their GSI1/GSI2 keys, the malformed one is skipped with an error (no value in it) and keeps none.",
            vec![
                Write::Put(product(&id(2, 21), "Oolong", &i.tea_co, &i.drinks, 2).to_item()),
                Write::Put(product(&i.chips, "Chips", &i.tea_co, &i.drinks, 600).to_item()),
                Write::Put(malformed),
            ],
        ),
        (
            "order-paid",
            "The stuck PENDING order is paid now: it moves in GSI1 from ORDER#STATUS#PENDING to ORDER#STATUS#PAID with GSI1SK AT#<now>.",
            vec![Write::Put(order(&i.ann, &i.stuck, "PAID", 80, 0).to_item())],
        ),
        (
            "user-email-changed",
            "A user's e-mail address changes: the SKU follows (EMAIL#<new address>).",
            vec![Write::Put(
                User {
                    email: Some("user-1-new@example.invalid".into()),
                    ..user(&i.ann, 1)
                }
                .to_item(),
            )],
        ),
        (
            "brand-deleted",
            "The brand Crunch is deleted: its product (Chips) is found through GSI1 and flagged worker_missing_refs = {brand_id}.",
            vec![Write::Delete(ItemKey::Brand(i.crunch.clone()).key())],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites events/shop: REGENERATE_FIXTURES=1 ... -- --ignored regenerate"]
async fn regenerate() {
    if !fixtures::regenerating("shop") {
        return;
    }
    let dir = events_dir();
    // The table: the service's items, and what the stream derived.
    let items = fixtures::streamed_items(&schema(), &service_items(), app, KEYS).await;
    write_snapshot(&dir.join("tables/shop.json"), &items, KEYS).expect("write");
    write_snapshot(&dir.join("tables/underived.json"), &service_items(), KEYS).expect("write");

    // Stream captures, each from the table above.
    let mut entries = fixtures::capture_stream_fixtures(
        &dir,
        &schema(),
        &items,
        "tables/shop.json",
        STREAM_ARN,
        NOW,
        stream_fixtures(),
    )
    .await;

    // Ticks, in both EventBridge shapes.
    let jobs = [
        (
            "audit",
            "audit: the product naming a brand that does not exist is flagged worker_missing_refs = {brand_id} and reported by id.",
            "tables/shop.json",
        ),
        (
            "stuck-orders",
            "stuck-orders: the order PENDING for 80 h is reported (published when NOTIFY_EVENT_BUS is set; a local run never publishes); the table is unchanged.",
            "tables/shop.json",
        ),
        (
            "backfill",
            "backfill on the table written without index attributes: every item gets the attributes the stream derived (the golden equals tables/shop.json).",
            "tables/underived.json",
        ),
    ];
    for (job, about, table) in jobs {
        fixtures::write_ticks(&dir, "shop-worker", job, NOW);
        for shape in ["scheduler", "rule"] {
            entries.push(Fixture::new(
                &format!("{job}-{shape}"),
                about,
                vec![format!("schedule/{job}.{shape}.json")],
                table,
                NOW,
                false,
                job,
            ));
        }
    }
    fixtures::write_manifest(&dir, "apps/shop/tests/it/fixtures.rs", &entries);
}
