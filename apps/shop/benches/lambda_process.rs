//! Peak memory of the shop's Lambda `bootstrap`s, built as they ship (the
//! `bootstrap` profile: `worker_testkit::lambda_process`) and driven
//! through a local Lambda Runtime API against DynamoDB Local, on their
//! worst legal inputs, to size each function's `MemorySize` in
//! `infra/shop.yaml`. Each case: a fresh process, its peak RSS (`VmHWM`)
//! after init and after each delivery, then a check of the table (and the
//! response) that the run did the work.
//!
//! **`StreamFunction`** (`shop-stream`): batches of its mapping's
//! `BatchSize` (500) within Lambda's 6 MiB payload, each delivered twice
//! to one warm process (the redelivery is idempotent). What a batch costs
//! is its decoded records, and those cost most per byte of JSON when the
//! images are full of tiny values (attributes the worker ignores, which
//! any writer may add):
//!
//! - (0) 500 product MODIFYs as the service writes them: the reference;
//! - (a) 500 product MODIFYs, old and new images padded with one-digit
//!   attributes to fill 6 MiB, every record one derived-key UpdateItem;
//! - (b) the same with one binary attribute per new image: the decoder
//!   then reads the batch through a `serde_json::Value` of the whole event
//!   (its fallback path, which alone reads `B`);
//! - (c), (d): (a) and (b) padded with maps of one entry nested 30 deep
//!   (DynamoDB allows 32): an allocation per level, the costliest shape;
//! - (e) products of 400 KB (DynamoDB's item limit), old and new images,
//!   as many as 6 MiB holds: the largest images;
//! - (f) 500 REMOVEs of brands and categories (images padded as (c)), each
//!   deleted reference with its products in `GSI1`/`GSI2` (`--products`,
//!   default 10,000 products, each in one deleted brand and one deleted
//!   category): every lane holds its whole `query_all` while it writes a
//!   flag per product, 500 lanes at once (`STREAM_CONCURRENCY` 1000). The
//!   cascade is bounded by the catalogue, not by the batch: (f0), the same
//!   batch without products, gives its cost per product.
//!
//! **The schedule functions** (`shop-schedule`, one fresh process per job,
//! one tick of its template `Input`):
//!
//! - `AuditFunction`: `--references` (default 20,000) brands and as many
//!   categories, read whole by the tick (its one unbounded read), then
//!   4,000 products in pages of 200, every one needing a flag written;
//! - `StuckOrdersFunction`: 1,000 `PENDING` and 1,000 `PAID` orders stuck
//!   (pages of 100), beside orders that are not, each stuck order
//!   published as an `OrderStuck` event to a bus on moto: (a) as the
//!   service writes them, (b) each with a `name` (`GSI1` projects it) of
//!   nested maps, so that a page is the 1 MB a Query returns at most;
//! - `BackfillFunction`: 2,000 items of every entity without their index
//!   attributes, each about 5 KB padded as (a) and as (c) of the stream, so
//!   that a Scan page holds about its 200 items and the 1 MB a page
//!   returns at most.
//!
//! What a tick holds does not grow with its pages (counters, and at most
//! 50 listed ids), so a tick over tens of pages meets its peak.
//!
//! The processes run with the template's variables (`DEADLINE_MARGIN_MS`,
//! `STREAM_CONCURRENCY`, `STUCK_*`) and its log level (`INFO`).
//!
//! Run: `cargo bench -p shop-worker --bench lambda_process` (`-- --only
//! stream,audit,stuck,backfill`: some of them; `-- --products N`,
//! `-- --references N`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shop_worker::derive::rules::Derivation;
use shop_worker::items::{Named, Order, Product, Stamps, User};
use shop_worker::keys::{self, Id, ItemKey};
use shop_worker::schema::schema;
use shop_worker::stuck::rules::{EVENT_SOURCE, EVENT_TYPE};
use worker_engine::item::Item;
use worker_engine::stream::{ChangeKind, StreamChange, encode_event};
use worker_testkit::TestTable;
use worker_testkit::eventbridge::RoutedBus;
use worker_testkit::lambda_process::{self as process, MIB, PAYLOAD_LIMIT, Peak};
use worker_toolkit::local::DynamoDbLocal;

/// The stream mapping's `BatchSize` in `infra/shop.yaml`.
const BATCH_SIZE: usize = 500;
/// The schedule functions' clock (`WORKER_NOW`) and tick.
const NOW: &str = "2024-07-01T00:00:00Z";
/// DynamoDB's item size limit.
const ITEM_LIMIT: usize = 400 * 1024;
/// Items a Scan page of `backfill` holds, and the bytes it returns at most.
const SCAN_PAGE: usize = 200;
const SCAN_PAGE_BYTES: usize = 1024 * 1024;
const STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/shop-table-prod/stream/2024-07-01T00:00:00.000";

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// A reproducible id of `kind`, number `n`.
fn id(kind: u8, n: usize) -> Id {
    let mut payload = [kind; 16];
    payload[..8].copy_from_slice(&(n as u64).to_be_bytes());
    Id::at(now().timestamp() - 90 * 86_400 + n as i64, payload)
}

fn stamps(created_at: i64, updated_at: i64) -> Stamps {
    Stamps {
        created_at,
        updated_at,
    }
}

/// Product `n` of `brand` and `category`, as the service writes it (no
/// index attribute).
fn product(n: usize, brand: Id, category: Id) -> Item {
    let t = now().timestamp() - 30 * 86_400;
    Product {
        id: id(3, n),
        name: Some(format!(
            "Product {n:06}, a name as long as a shop's listing shows it, with its size and colour"
        )),
        price: Some(19.99),
        stock: Some(12),
        brand_id: Some(brand),
        category_id: Some(category),
        stamps: stamps(t, t + 60),
    }
    .to_item()
}

/// `item` with its derived index attributes (as the worker leaves it).
fn derived(item: Item) -> Item {
    Derivation::of(&item)
        .expect("a well-formed entity")
        .expect("an entity")
        .apply(&item)
}

/// Whether `item` carries the index attributes its fields call for.
fn is_derived(item: &Item) -> bool {
    Derivation::of(item)
        .expect("a well-formed entity")
        .is_some_and(|d| d.satisfied_by(item))
}

/// How many items of the table have their index keys derived.
async fn derived_count(table: &TestTable) -> usize {
    table
        .snapshot()
        .await
        .iter()
        .filter(|i| is_derived(i))
        .count()
}

/// How an image is padded with attributes the worker ignores: the most
/// decoded values per byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Attributes of one digit (`"a7": {"N": "1"}`): a map entry each.
    Flat,
    /// Maps of one entry nested [`DEPTH`] deep under each attribute
    /// (`"a7": {"M": {"a": {"M": …}}}`): a map (an allocation) each level.
    Nested,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Flat => "one-digit attributes",
            Shape::Nested => "maps of one entry nested 30 deep",
        }
    }
}

/// Levels of maps in a padding attribute (DynamoDB allows 32).
const DEPTH: usize = 30;

/// `levels` maps of one entry around a one-digit number.
fn nest(levels: usize) -> AttributeValue {
    (0..levels).fold(AttributeValue::N("1".into()), |v, _| {
        AttributeValue::M(HashMap::from([("a".to_owned(), v)]))
    })
}

/// Attribute names of one or two characters (then more) that `item` does
/// not have.
fn free_names(item: &Item) -> impl Iterator<Item = String> + '_ {
    const DIGITS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..)
        .map(|mut i: usize| {
            let mut name = vec![DIGITS[i % 52]];
            i /= 52;
            while i > 0 {
                name.push(DIGITS[i % 62]);
                i /= 62;
            }
            String::from_utf8(name).expect("ASCII")
        })
        .filter(|name| !item.contains_key(name))
}

/// Padding attributes for `item` in `shape`, without end.
fn padding(item: &Item, shape: Shape) -> impl Iterator<Item = (String, AttributeValue)> + '_ {
    free_names(item).map(move |name| match shape {
        Shape::Flat => (name, AttributeValue::N("1".into())),
        Shape::Nested => (name, nest(DEPTH)),
    })
}

/// `item` with `n` units of padding in `shape` (attributes, or levels of
/// maps).
fn pad(item: Item, n: usize, shape: Shape) -> Item {
    let (whole, rest) = match shape {
        Shape::Flat => (n, 0),
        Shape::Nested => (n / DEPTH, n % DEPTH),
    };
    let mut extra: Vec<(String, AttributeValue)> = padding(&item, shape).take(whole + 1).collect();
    let last = extra.pop().expect("a name");
    if rest > 0 {
        extra.push((last.0, nest(rest)));
    }
    let mut item = item;
    item.extend(extra);
    item
}

/// `item` padded in `shape` to about `target` bytes (DynamoDB's size).
fn pad_to(item: Item, target: usize, shape: Shape) -> Item {
    let mut size = item_size(&item);
    let extra: Vec<(String, AttributeValue)> = padding(&item, shape)
        .take_while(|(name, v)| {
            size += name.len() + value_size(v);
            size <= target
        })
        .collect();
    let mut item = item;
    item.extend(extra);
    item
}

/// DynamoDB's size of a value, roughly: a number a byte per two digits and
/// one more, a map 3 bytes and one an entry.
fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.len().div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(ss) => ss.iter().map(String::len).sum(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() + value_size(v) + 1)
                .sum::<usize>()
        }
        _ => 1,
    }
}

/// DynamoDB's size of an item, roughly.
fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_size(v))
        .sum()
}

/// The values (map entries, and maps) an item decodes into.
fn values(item: &Item) -> usize {
    fn count(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::M(m) => 1 + m.values().map(count).sum::<usize>(),
            _ => 1,
        }
    }
    item.values().map(count).sum()
}

/// Stream record `n` (its sequence number orders the batch).
fn change(n: usize, kind: ChangeKind, old: Option<Item>, new: Option<Item>) -> StreamChange {
    let image = old.as_ref().or(new.as_ref()).expect("an image");
    let keys = [keys::PK, keys::SK]
        .into_iter()
        .map(|k| (k.to_owned(), image[k].clone()))
        .collect();
    StreamChange {
        event_id: format!("{n:032x}"),
        kind,
        sequence_number: Some(format!("{:021}", 1_000_000 + n).parse().expect("a number")),
        approximate_creation: Some(Utc::now()),
        keys,
        old_image: old,
        new_image: new,
        event_source_arn: Some(STREAM_ARN.into()),
        size_bytes: None,
        typed: None,
    }
}

fn event_bytes(changes: &[StreamChange]) -> Vec<u8> {
    serde_json::to_vec(&encode_event(changes, None)).expect("JSON")
}

/// The event of `make(pad)` with the largest `pad` (units of padding of
/// each image) that keeps it within Lambda's payload limit, and `pad`.
fn fill(make: impl Fn(usize) -> Vec<StreamChange>) -> (Vec<u8>, usize) {
    let size = |pad| event_bytes(&make(pad)).len();
    let bare = size(0);
    assert!(bare < PAYLOAD_LIMIT, "the bare batch is over 6 MiB");
    let mut pad = 64;
    for _ in 0..4 {
        let per_attribute = (size(pad) - bare) as f64 / pad as f64;
        pad = ((PAYLOAD_LIMIT - bare) as f64 / per_attribute) as usize;
    }
    loop {
        let bytes = event_bytes(&make(pad));
        if bytes.len() <= PAYLOAD_LIMIT {
            return (bytes, pad);
        }
        pad -= 1;
    }
}

/// A table of the shop's schema on a DynamoDB Local of its own, `items`
/// put (keep the instance alive with the table).
async fn seeded(items: Vec<Item>) -> (DynamoDbLocal, TestTable) {
    let (local, table) = TestTable::on_own_local("shop-table-lambda", &schema()).await;
    worker_testkit::seed_concurrently(&table.store, items, 4).await;
    (local, table)
}

/// The template's variables of a function on `table` (the log level its
/// `LoggingConfig` sets), and `more`.
fn env(table: &TestTable, more: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("TABLE_NAME", table.name.clone()),
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
        ("DEADLINE_MARGIN_MS", "2000".to_owned()),
        ("AWS_LAMBDA_LOG_LEVEL", "INFO".to_owned()),
        ("RUST_LOG", "info".to_owned()),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

/// The stream function's variables (`STREAM_CONCURRENCY` the template's
/// default; no parking table: a parked record fails the case anyway).
fn stream_env(table: &TestTable) -> Vec<(&'static str, String)> {
    env(table, &[("STREAM_CONCURRENCY", "1000")])
}

/// A schedule function's variables, pinned to `job` at [`NOW`].
fn job_env(table: &TestTable, job: &str) -> Vec<(&'static str, String)> {
    env(table, &[("WORKER_JOB", job), ("WORKER_NOW", NOW)])
}

/// The tick the template's schedule of `job` sends.
fn tick(job: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"job": job, "scheduledTime": NOW})).expect("JSON")
}

/// Two deliveries of `payload` to one stream process; each must leave no
/// batch item failure.
async fn deliver_twice(stream: &Path, env: &[(&str, String)], payload: &[u8]) -> Peak {
    let peak = process::peak(stream, env, payload, 2).await;
    for (n, d) in peak.deliveries.iter().enumerate() {
        assert_eq!(
            d.response["batchItemFailures"],
            json!([]),
            "delivery {}: {}",
            n + 1,
            d.response
        );
    }
    peak
}

/// One tick of a fresh schedule process: its report, which must say the
/// pass is complete.
async fn one_tick(schedule: &Path, env: &[(&str, String)], job: &str) -> (Peak, Value) {
    let peak = process::peak(schedule, env, &tick(job), 1).await;
    let report = peak.deliveries[0].response.clone();
    assert_eq!(report["complete"], json!(true), "{report}");
    (peak, report)
}

fn print_case(function: &str, input: &str, peak: &Peak) {
    println!("memory {function}: {input}; {}", peak.describe());
}

/// (0)-(d): 500 product MODIFYs padded in `shape` to 6 MiB (or not), each new image
/// without its index attributes (one UpdateItem each); with `binary`, a
/// binary attribute in each new image.
async fn stream_padded_products(
    stream: &Path,
    case: &str,
    shape: Option<Shape>,
    binary: bool,
) -> f64 {
    let brand = id(1, 0);
    let category = id(2, 0);
    let padded = |item, pad_by| match shape {
        Some(shape) => pad(item, pad_by, shape),
        None => item,
    };
    let new = |n: usize, pad_by: usize| {
        let mut item = padded(product(n, brand.clone(), category.clone()), pad_by);
        if binary {
            item.insert(
                "thumbnail".into(),
                AttributeValue::B(Blob::new(vec![7; 32])),
            );
        }
        item
    };
    let batch = |pad_by| {
        (0..BATCH_SIZE)
            .map(|n| {
                let mut old = padded(product(n, brand.clone(), category.clone()), pad_by);
                old.insert(keys::PRICE.into(), AttributeValue::N("24.99".into()));
                change(n, ChangeKind::Modify, Some(old), Some(new(n, pad_by)))
            })
            .collect()
    };
    let (payload, pad_by) = match shape {
        Some(_) => fill(batch),
        None => (event_bytes(&batch(0)), 0),
    };
    let items: Vec<Item> = (0..BATCH_SIZE).map(|n| new(n, pad_by)).collect();
    let decoded = values(&items[0]);
    let (_local, table) = seeded(items).await;
    let peak = deliver_twice(stream, &stream_env(&table), &payload).await;
    let derived_count = derived_count(&table).await;
    assert_eq!(derived_count, BATCH_SIZE, "every product's keys derived");
    let path = if binary {
        ", a binary attribute in each new image (the decoder's Value path)"
    } else {
        ""
    };
    print_case(
        "StreamFunction",
        &format!(
            "{case} {BATCH_SIZE} product MODIFYs padded with {}, {decoded} values an image{path}, \
             {:.2} MiB payload, {BATCH_SIZE} derived-key writes a delivery",
            shape.map_or("nothing (as the service writes them)", Shape::name),
            payload.len() as f64 / MIB
        ),
        &peak,
    );
    peak.mib()
}

/// (e): product MODIFYs of 400 KB images, as many as 6 MiB holds.
async fn stream_largest_images(stream: &Path) -> f64 {
    let (brand, category) = (id(1, 0), id(2, 0));
    let sized = |n: usize, fill_with: char| {
        let mut item = product(n, brand.clone(), category.clone());
        let used = item_size(&item) + "description".len();
        let text: String = std::iter::repeat_n(fill_with, ITEM_LIMIT - 1024 - used).collect();
        item.insert("description".into(), AttributeValue::S(text));
        item
    };
    let make = |records: usize| -> Vec<StreamChange> {
        (0..records)
            .map(|n| {
                change(
                    n,
                    ChangeKind::Modify,
                    Some(sized(n, 'o')),
                    Some(sized(n, 'n')),
                )
            })
            .collect()
    };
    let mut records = 1;
    while event_bytes(&make(records + 1)).len() <= PAYLOAD_LIMIT {
        records += 1;
    }
    let payload = event_bytes(&make(records));
    let (_local, table) = seeded((0..records).map(|n| sized(n, 'n')).collect()).await;
    let peak = deliver_twice(stream, &stream_env(&table), &payload).await;
    let derived_count = derived_count(&table).await;
    assert_eq!(derived_count, records, "every product's keys derived");
    print_case(
        "StreamFunction",
        &format!(
            "(e) {records} product MODIFYs of {} KB images (old and new), {:.2} MiB payload",
            ITEM_LIMIT / 1024 - 1,
            payload.len() as f64 / MIB
        ),
        &peak,
    );
    peak.mib()
}

/// (f): 250 brands and 250 categories deleted (images padded to 6 MiB
/// with nested maps),
/// `products` products each in one deleted brand and one deleted category;
/// `reference`, the peak of the same batch without products (f0), gives
/// the cascade's cost per product.
async fn stream_cascade(stream: &Path, products: usize, reference: Option<f64>) -> f64 {
    let half = BATCH_SIZE / 2;
    let t = now().timestamp() - 365 * 86_400;
    let deleted = |n: usize, pad_by: usize| {
        let (key, name) = if n.is_multiple_of(2) {
            (ItemKey::Brand(id(1, n / 2)), "Brand")
        } else {
            (ItemKey::Category(id(2, n / 2)), "Category")
        };
        let named = Named {
            key,
            name: Some(format!("{name} {n}")),
            stamps: stamps(t, t),
        };
        pad(named.to_item(), pad_by, Shape::Nested)
    };
    let (payload, _) = fill(|pad_by| {
        (0..BATCH_SIZE)
            .map(|n| change(n, ChangeKind::Remove, Some(deleted(n, pad_by)), None))
            .collect()
    });
    // Product i = q·250 + r: brand r, category (r + q) mod 250, so each
    // deleted reference has products / 250 of them.
    let items = (0..products)
        .map(|i| {
            let (q, r) = (i / half, i % half);
            derived(product(i, id(1, r), id(2, (r + q) % half)))
        })
        .collect();
    let (_local, table) = seeded(items).await;
    let peak = deliver_twice(stream, &stream_env(&table), &payload).await;
    let both = json!([keys::BRAND_ID, keys::CATEGORY_ID]);
    let flagged = table
        .snapshot()
        .await
        .iter()
        .filter(|item| match item.get(keys::MISSING_REFS) {
            Some(AttributeValue::Ss(set)) => {
                let mut set = set.clone();
                set.sort();
                json!(set) == both
            }
            _ => false,
        })
        .count();
    assert_eq!(flagged, products, "every product flagged for both");
    let input = format!(
        "{half} brand and {half} category REMOVEs, {:.2} MiB payload",
        payload.len() as f64 / MIB
    );
    let input = match reference {
        None => format!("(f0) {input}, no product (the reference of (f))"),
        Some(d0) => format!(
            "(f) {input}, {products} products found twice ({} per deleted reference), {} flag \
             writes a delivery: {:.1} MiB per 1,000 products over (f0)",
            products / half,
            2 * products,
            (peak.mib() - d0) / products as f64 * 1000.0
        ),
    };
    print_case("StreamFunction", &input, &peak);
    peak.mib()
}

/// Every stream case; the largest peak.
async fn stream_cases(stream: &Path, products: usize) -> f64 {
    let peaks = [
        stream_padded_products(stream, "(0)", None, false).await,
        stream_padded_products(stream, "(a)", Some(Shape::Flat), false).await,
        stream_padded_products(stream, "(b)", Some(Shape::Flat), true).await,
        stream_padded_products(stream, "(c)", Some(Shape::Nested), false).await,
        stream_padded_products(stream, "(d)", Some(Shape::Nested), true).await,
        stream_largest_images(stream).await,
    ];
    let f0 = stream_cascade(stream, 0, None).await;
    let f = stream_cascade(stream, products, Some(f0)).await;
    peaks.into_iter().chain([f0, f]).fold(0.0, f64::max)
}

/// `audit`: `references` brands and as many categories, 4,000 products
/// each needing its flag set, changed or removed.
async fn audit(schedule: &Path, references: usize) -> f64 {
    const PRODUCTS: usize = 4_000;
    let t = now().timestamp() - 365 * 86_400;
    let named = |key| {
        Named {
            key,
            name: Some("A name".into()),
            stamps: stamps(t, t),
        }
        .to_item()
    };
    let mut items: Vec<Item> = (0..references)
        .flat_map(|n| {
            [
                named(ItemKey::Brand(id(1, n))),
                named(ItemKey::Category(id(2, n))),
            ]
        })
        .collect();
    // Each fourth: brand missing; category missing; both there but a stale
    // flag; both missing.
    let want = |i: usize| -> Vec<&str> {
        match i % 4 {
            0 => vec![keys::BRAND_ID],
            1 => vec![keys::CATEGORY_ID],
            2 => vec![],
            _ => vec![keys::BRAND_ID, keys::CATEGORY_ID],
        }
    };
    let mut wanted = HashMap::new();
    for i in 0..PRODUCTS {
        let missing = want(i);
        let brand = if missing.contains(&keys::BRAND_ID) {
            id(11, i)
        } else {
            id(1, i % references)
        };
        let category = if missing.contains(&keys::CATEGORY_ID) {
            id(12, i)
        } else {
            id(2, i % references)
        };
        let mut item = derived(product(i, brand, category));
        if missing.is_empty() {
            item.insert(
                keys::MISSING_REFS.into(),
                AttributeValue::Ss(vec![keys::BRAND_ID.into()]),
            );
        }
        wanted.insert(ItemKey::from_item(&item).expect("a key"), missing);
        items.push(item);
    }
    let (_local, table) = seeded(items).await;
    let (peak, report) = one_tick(schedule, &job_env(&table, "audit"), "audit").await;
    let d = &report["details"];
    assert_eq!(d["products"], json!(PRODUCTS), "{report}");
    assert_eq!(d["flags_changed"], json!(PRODUCTS), "{report}");
    assert_eq!(d["missing"], json!(PRODUCTS * 3 / 4), "{report}");
    let right = table
        .snapshot()
        .await
        .iter()
        .filter(|item| {
            let mut have = match item.get(keys::MISSING_REFS) {
                Some(AttributeValue::Ss(set)) => set.clone(),
                _ => Vec::new(),
            };
            have.sort();
            ItemKey::from_item(item)
                .ok()
                .and_then(|key| wanted.get(&key))
                .is_some_and(|want| have == *want)
        })
        .count();
    assert_eq!(right, PRODUCTS, "every product's flag as its references");
    print_case(
        "AuditFunction",
        &format!(
            "{references} brands and {references} categories read whole, {PRODUCTS} products in {} \
             pages, {PRODUCTS} flag writes",
            d["pages"]
        ),
        &peak,
    );
    peak.mib()
}

/// `stuck-orders`: 1,000 orders stuck in each of `PENDING` and `PAID`,
/// 2,000 that are not; each stuck order published to a bus on moto. With
/// `padded`, each order also carries a `name` (which `GSI1` projects) of
/// nested maps, so that a page of 100 is the 1 MB a Query returns at most.
async fn stuck_orders(schedule: &Path, case: &str, padded: bool) -> f64 {
    const STUCK: usize = 1_000;
    const PAGE: usize = 100;
    let h = 3_600;
    let order = |i: usize, status: &str, age: i64| {
        let updated = now().timestamp() - age;
        let mut item = Order {
            user: id(4, i % 500),
            id: id(5, i),
            status: Some(status.into()),
            total_price: Some(42.5),
            stamps: stamps(updated - 600, updated),
        }
        .to_item();
        if padded {
            let name = pad_to(Item::new(), SCAN_PAGE_BYTES / PAGE - 512, Shape::Nested);
            item.insert(keys::NAME.into(), AttributeValue::M(name));
        }
        derived(item)
    };
    let mut items = Vec::new();
    for i in 0..STUCK {
        let age = 49 * h + 60 * i as i64;
        items.push(order(4 * i, "PENDING", age));
        items.push(order(4 * i + 1, "PAID", age));
        // Not stuck: recent in a stuck status, or old in another.
        items.push(order(4 * i + 2, "PAID", (i % 47) as i64 * h));
        items.push(order(4 * i + 3, "SHIPPED", age));
    }
    let (_local, table) = seeded(items).await;
    let (moto, routed) = RoutedBus::of_events("shop-lambda", EVENT_SOURCE, EVENT_TYPE).await;
    let mut env = job_env(&table, "stuck-orders");
    env.extend([
        ("STUCK_STATUSES", "PENDING,PAID".to_owned()),
        ("STUCK_AFTER_HOURS", "48".to_owned()),
        ("NOTIFY_EVENT_BUS", routed.bus.clone()),
    ]);
    env.extend(moto.env());
    let (peak, report) = one_tick(schedule, &env, "stuck-orders").await;
    let d = &report["details"];
    assert_eq!(d["stuck"], json!(2 * STUCK), "{report}");
    assert_eq!(d["published"], json!(2 * STUCK), "{report}");
    assert_eq!(d["failed"], json!(0), "{report}");
    let events = routed
        .received(2 * STUCK, std::time::Duration::from_secs(300))
        .await;
    let by_status = events.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e["detail"]["status"].as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
        m
    });
    assert_eq!(
        by_status,
        BTreeMap::from([("PAID".to_owned(), STUCK), ("PENDING".to_owned(), STUCK)]),
        "the events on the bus"
    );
    let name = if padded {
        format!(
            ", each with a `name` of about {} bytes of maps nested 30 deep",
            SCAN_PAGE_BYTES / PAGE - 512
        )
    } else {
        String::new()
    };
    print_case(
        "StuckOrdersFunction",
        &format!(
            "{case} {} orders{name}, {} stuck (pages of {PAGE}), {} OrderStuck events published \
             to moto",
            4 * STUCK,
            2 * STUCK,
            events.len()
        ),
        &peak,
    );
    peak.mib()
}

/// `backfill`: 2,000 items of every entity without index attributes, each
/// padded in `shape` so that 200 of them make the 1 MB a Scan page returns
/// at most.
async fn backfill(schedule: &Path, case: &str, shape: Shape) -> f64 {
    const ITEMS: usize = 2_000;
    let t = now().timestamp() - 10 * 86_400;
    let entity = |i: usize| -> Item {
        match i % 5 {
            0 => product(i, id(1, i), id(2, i)),
            1 => Order {
                user: id(4, i),
                id: id(5, i),
                status: Some("PAID".into()),
                total_price: Some(42.5),
                stamps: stamps(t, t + 60),
            }
            .to_item(),
            2 => User {
                id: id(4, i),
                name: Some(format!("User {i}")),
                email: Some(format!("user{i}@example.com")),
                stamps: stamps(t, t),
            }
            .to_item(),
            3 => Named {
                key: ItemKey::Brand(id(1, i)),
                name: Some(format!("Brand {i}")),
                stamps: stamps(t, t),
            }
            .to_item(),
            _ => Named {
                key: ItemKey::Category(id(2, i)),
                name: Some(format!("Category {i}")),
                stamps: stamps(t, t),
            }
            .to_item(),
        }
    };
    let target = SCAN_PAGE_BYTES / SCAN_PAGE - 64;
    let items: Vec<Item> = (0..ITEMS)
        .map(|i| pad_to(entity(i), target, shape))
        .collect();
    let decoded = values(&items[0]);
    let (_local, table) = seeded(items).await;
    let (peak, report) = one_tick(schedule, &job_env(&table, "backfill"), "backfill").await;
    let d = &report["details"];
    assert_eq!(d["scanned"], json!(ITEMS), "{report}");
    assert_eq!(d["written"], json!(ITEMS), "{report}");
    let derived_count = derived_count(&table).await;
    assert_eq!(derived_count, ITEMS, "every item's keys derived");
    print_case(
        "BackfillFunction",
        &format!(
            "{case} {ITEMS} items of about {target} bytes padded with {} ({decoded} values an \
             item), in {} Scan pages, {ITEMS} derived-key writes",
            shape.name(),
            d["pages"]
        ),
        &peak,
    );
    peak.mib()
}

/// `--name N` among the arguments.
fn number_arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .map(|i| {
            args.get(i + 1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        })
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let run = |what: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|o| o == what))
    };
    let dir = process::build("shop-worker", &["shop-stream", "shop-schedule"], &[]);
    let (stream, schedule) = (dir.join("shop-stream"), dir.join("shop-schedule"));

    let mut peaks: Vec<(&str, f64)> = Vec::new();
    if run("stream") {
        let products = number_arg("--products", 10_000);
        peaks.push(("StreamFunction", stream_cases(&stream, products).await));
    }
    if run("audit") {
        let references = number_arg("--references", 20_000);
        peaks.push(("AuditFunction", audit(&schedule, references).await));
    }
    if run("stuck") {
        let a = stuck_orders(&schedule, "(a)", false).await;
        let b = stuck_orders(&schedule, "(b)", true).await;
        peaks.push(("StuckOrdersFunction", a.max(b)));
    }
    if run("backfill") {
        let a = backfill(&schedule, "(a)", Shape::Flat).await;
        let b = backfill(&schedule, "(b)", Shape::Nested).await;
        peaks.push(("BackfillFunction", a.max(b)));
    }
    for (function, peak) in peaks {
        println!(
            "memory shop: {function} peak {peak:.1} MiB -> MemorySize {} MB (50% margin)",
            process::memory_size(peak, 0.5)
        );
    }
}
