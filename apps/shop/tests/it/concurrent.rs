//! The shop service and the worker at the same time, on DynamoDB Local.
//!
//! A seeded model of the service ([`Service`]) issues requests from
//! [`TASKS`] tasks at once: products created, rewritten from a copy just
//! read (price, stock, moved to another brand or category) and deleted;
//! orders placed, their status changed from a copy just read, deleted;
//! brands and categories renamed, deleted, created again; users given
//! another e-mail address. Among them, bursts that conflict on purpose: a
//! brand (or category) deleted while products naming it are added; a brand
//! written again while it is being deleted, one to three times in a row; a
//! brand deleted and, as soon as the service sees the worker flag one of
//! its products, half its other products moved to another brand (from
//! copies read then) and the brand written again, so that the worker is
//! between its read ("the brand is gone", "the product names it") and the
//! flags of the rest; a product rewritten from two copies read before, at
//! once, and deleted at the same time in a third of them; an order's
//! status changed from two copies at once. Every write is a plain Put or
//! Delete, as a careless service writes (whole items; a copy read before
//! carries the index keys and the flag it was read with).
//!
//! Meanwhile the worker follows the stream in real time ([`Followers`]: its
//! batches split by partition key into up to `factor` concurrent
//! invocations, as a `ParallelizationFactor` of 1 or 10 does), and the
//! `audit` and the `backfill` run again and again. Then the stream is
//! drained to quiet, the jobs run across their grace periods (the
//! injected clock moved on: the audit an hour and a day later,
//! `stuck-orders` before and after its 48 hours), and every invariant the
//! app documents is checked ([`state`], [`flags`], [`stuck`],
//! [`worker_writes`]):
//!
//! - **nothing the service still shows as live was deleted or changed by
//!   the worker**: the model keeps its own log of writes, each with the
//!   time it was in flight; every key ends as one of the service's last
//!   writes left it (present with the fields the service wrote, or absent),
//!   the worker's attributes aside;
//! - **every write the worker landed held at the time it landed**, checked
//!   against that log: a flag never names a brand or category that was
//!   live for the whole time the write was in flight, a flag is never
//!   cleared while the reference was gone the whole time, derived keys are
//!   never those of another version of the item, and no worker write lands
//!   on an item the service had deleted (an update creates it again);
//! - **derived keys** (`SKU`, `GSI1*`, `GSI2*`) are what each item's fields
//!   say, once the stream is quiet; the `backfill` then writes nothing;
//! - **flags** (`worker_missing_refs`) are, after the audit, exactly the
//!   references that name no existing brand or category; another audit
//!   changes nothing;
//! - **stuck orders**: `stuck-orders` publishes exactly the orders whose
//!   status is `PENDING` or `PAID` and whose `updated_at` is older than 48
//!   hours, before and after the clock moves past them;
//! - no record is rejected, and no checkpoint is left.
//!
//! Seed 1 in `scripts/test`, at factor 1 and at factor 10. The soak, in
//! the long run, runs seeds 2 and 3 (`SOAK_SEEDS=<n>`: 2 to n) at each
//! factor: `SOAK_SEEDS=<n> cargo test -p shop-worker --test it concurrent::
//! -- --include-ignored`; each seed prints its counts and timings
//! (`--nocapture`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shop_worker::config::Settings;
use shop_worker::derive::rules::Derivation;
use shop_worker::items::{Order, Product, ProductRefs, User};
use shop_worker::keys::{self, Id, ItemKey, Job};
use shop_worker::refs::rules;
use shop_worker::schema::schema;
use support::{STATUSES, named, now, stamps};
use worker_engine::RecordingPublisher;
use worker_engine::Worker;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::store::GuardedOp;
use worker_engine::store::{Expr, Key, Store, WriteOp, WriteOutcome};
use worker_testkit::TestTable;
use worker_testkit::follow::{Followers, Mapping, Tail, assert_no_problems, quiet, service_tasks};
use worker_toolkit::layers::{Answer, Asked, Call, RecordingStore};

/// Service tasks in flight.
const TASKS: usize = 8;
/// Requests per task.
const OPS_PER_TASK: usize = 10;
const BRANDS: usize = 5;
const CATEGORIES: usize = 4;
const USERS: usize = 5;
/// Products and orders made before the tasks start.
const FIRST_PRODUCTS: usize = 8;
const FIRST_ORDERS: usize = 6;
/// Products of a deleted parent the service watches for the worker's flag
/// (the last made), and how long at most it waits for one before writing
/// the parent again.
const WATCHED: usize = 8;
const RESTORE_AFTER: Duration = Duration::from_secs(2);
/// The `stuck-orders` bus (events recorded, not sent).
const BUS: &str = "shop-events";
/// The attributes the worker writes; every other one is the service's.
const WORKER_ATTRS: &[&str] = &[
    keys::SKU,
    keys::GSI1PK,
    keys::GSI1SK,
    keys::GSI2PK,
    keys::GSI2SK,
    keys::MISSING_REFS,
];

/// `(PK, SK)`.
type K = (String, String);

fn k(key: &Key) -> K {
    worker_testkit::key_of(key)
}

fn t_now() -> i64 {
    now().timestamp()
}

// ---------------------------------------------------------------------------
// The service's log and the worker's writes, on one clock
// ---------------------------------------------------------------------------

/// A write of the service: the item put (`None`: a delete), and when it
/// was in flight (from its first attempt to its reply).
#[derive(Debug, Clone)]
struct Written {
    item: Option<Item>,
    start: Instant,
    end: Instant,
}

/// What a key certainly was for a whole span of time, by the service's
/// writes.
enum Known<'a> {
    Live(&'a Item),
    Absent,
    Unknown,
}

/// What `writes` (of one key) say the key was for the whole of `[start,
/// end]`: the last write completed before `start`, when no other write
/// may have taken effect after it and before `end`; never written before
/// and none in flight: absent.
fn known(writes: &[Written], start: Instant, end: Instant) -> Known<'_> {
    let last = writes
        .iter()
        .enumerate()
        .filter(|(_, w)| w.end < start)
        .max_by_key(|(_, w)| w.end);
    match last {
        None if writes.iter().any(|w| w.start < end) => Known::Unknown,
        None => Known::Absent,
        Some((i, last)) => {
            let overlapped = writes
                .iter()
                .enumerate()
                .any(|(j, w)| j != i && w.start < end && w.end > last.start);
            match (&last.item, overlapped) {
                (_, true) => Known::Unknown,
                (Some(item), false) => Known::Live(item),
                (None, false) => Known::Absent,
            }
        }
    }
}

/// What a landed write of the worker says about the item it wrote.
#[derive(Debug, Clone, PartialEq)]
enum Claim {
    /// Derived attributes set (`Some`) or removed (`None`).
    Derived(BTreeMap<String, Option<String>>),
    /// A field added to the product's flag: its reference is gone.
    FlagAdded(Vec<String>),
    /// The flag set to these fields (empty: removed): these references
    /// are gone, the product's others exist.
    FlagSet(Vec<String>),
    /// Anything else (a checkpoint's put or delete; on a service item, a
    /// bug).
    Other(String),
}

#[derive(Debug, Clone)]
struct WorkerWrite {
    key: K,
    claim: Claim,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Log {
    service: Mutex<BTreeMap<K, Vec<Written>>>,
    worker: Mutex<Vec<WorkerWrite>>,
    /// Guarded writes withheld (a reference changed), refused (the item
    /// changed), conditional updates refused.
    withheld: AtomicUsize,
    refused: AtomicUsize,
    conditions_failed: AtomicUsize,
    /// Guarded writes with several ops, one refused: which landed is not
    /// known (the shop sends one op per guarded write).
    ambiguous: AtomicUsize,
    /// DynamoDB requests of the worker and of the service.
    worker_requests: AtomicUsize,
    service_requests: AtomicUsize,
}

/// The clauses of a simple update expression (`SET a = :v, ...`, `REMOVE
/// a, ...`, `ADD a :v`), names and values resolved.
fn clauses(e: &Expr) -> Vec<(String, String, Option<AttributeValue>)> {
    let mut out = Vec::new();
    let mut mode = String::new();
    let mut text = String::new();
    let mut flush = |mode: &str, text: &mut String| {
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = match mode {
                "SET" => {
                    let (n, v) = part.split_once('=').unwrap_or((part, ""));
                    (n.trim(), Some(v.trim()))
                }
                "ADD" | "DELETE" => {
                    let (n, v) = part.split_once(' ').unwrap_or((part, ""));
                    (n.trim(), Some(v.trim()))
                }
                _ => (part, None),
            };
            let attr = e
                .names
                .get(name)
                .cloned()
                .unwrap_or_else(|| name.to_owned());
            let value = value.and_then(|v| e.values.get(v).cloned());
            out.push((mode.to_owned(), attr, value));
        }
        text.clear();
    };
    for token in e.text.split_whitespace() {
        if ["SET", "REMOVE", "ADD", "DELETE"].contains(&token) {
            flush(&mode, &mut text);
            mode = token.to_owned();
        } else {
            text.push(' ');
            text.push_str(token);
        }
    }
    flush(&mode, &mut text);
    out
}

fn claim_of(update: &Expr) -> Claim {
    let clauses = clauses(update);
    let fields = |v: &Option<AttributeValue>| -> Vec<String> {
        let mut f = match v {
            Some(AttributeValue::Ss(s)) => s.clone(),
            _ => Vec::new(),
        };
        f.sort();
        f
    };
    if clauses.iter().all(|(_, a, _)| a == keys::MISSING_REFS) && clauses.len() == 1 {
        let (mode, _, value) = &clauses[0];
        return match mode.as_str() {
            "ADD" => Claim::FlagAdded(fields(value)),
            "SET" => Claim::FlagSet(fields(value)),
            "REMOVE" => Claim::FlagSet(Vec::new()),
            _ => Claim::Other(format!("flag update {}", update.text)),
        };
    }
    let derived = clauses.iter().all(|(mode, attr, value)| {
        WORKER_ATTRS[..5].contains(&attr.as_str())
            && match mode.as_str() {
                "SET" => matches!(value, Some(AttributeValue::S(_))),
                "REMOVE" => true,
                _ => false,
            }
    });
    if !derived || clauses.is_empty() {
        return Claim::Other(format!("update {}", update.text));
    }
    Claim::Derived(
        clauses
            .into_iter()
            .map(|(_, attr, value)| (attr, value.and_then(|v| v.as_s().ok().cloned())))
            .collect(),
    )
}

/// The writes a worker's request asks for, each with what it claims.
fn claims(asked: &Asked) -> Vec<(K, Claim)> {
    match asked {
        Asked::Write(GuardedOp::Put { item, .. }) => vec![(k(item), Claim::Other("put".into()))],
        Asked::Write(GuardedOp::Delete { key, .. }) => {
            vec![(k(key), Claim::Other("delete".into()))]
        }
        Asked::Write(GuardedOp::Update { key, update, .. }) => vec![(k(key), claim_of(update))],
        Asked::BatchWrite { ops } => ops
            .iter()
            .map(|op| match op {
                WriteOp::Put(item) => (k(item), Claim::Other("batch put".into())),
                WriteOp::Delete(key) => (k(key), Claim::Other("batch delete".into())),
            })
            .collect(),
        Asked::WriteGuarded { ops, .. } => ops
            .iter()
            .map(|op| match op {
                GuardedOp::Put { item, .. } => (k(item), Claim::Other("guarded put".into())),
                GuardedOp::Delete { key, .. } => (k(key), Claim::Other("guarded delete".into())),
                GuardedOp::Update { key, update, .. } => (k(key), claim_of(update)),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Log {
    /// Log the worker's recorded `calls` (every request, reads too): the
    /// writes that landed with what they claim and the time they were in
    /// flight.
    fn add_worker(&self, calls: &[Call]) {
        for call in calls {
            self.worker_requests.fetch_add(1, Ordering::Relaxed);
            let Ok(answer) = &call.answer else {
                continue;
            };
            let planned = claims(&call.asked);
            let landed = match answer {
                Answer::Written(WriteOutcome::Applied) | Answer::Batch(_) => planned.len(),
                Answer::Written(WriteOutcome::ConditionFailed) => {
                    self.conditions_failed.fetch_add(1, Ordering::Relaxed);
                    0
                }
                Answer::Guarded(r) => {
                    self.withheld.fetch_add(r.withheld, Ordering::Relaxed);
                    self.refused.fetch_add(r.refused, Ordering::Relaxed);
                    if r.refused == 0 || planned.len() == 1 {
                        // Applied in order, up to the first withheld.
                        r.applied.min(planned.len())
                    } else {
                        self.ambiguous.fetch_add(1, Ordering::Relaxed);
                        0
                    }
                }
                Answer::Read => 0,
            };
            let mut log = self.worker.lock().unwrap();
            for (key, claim) in planned.into_iter().take(landed) {
                log.push(WorkerWrite {
                    key,
                    claim,
                    start: call.sent,
                    end: call.answered,
                });
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The service model
// ---------------------------------------------------------------------------

struct Service {
    store: Arc<dyn Store>,
    log: Arc<Log>,
    brands: Vec<Id>,
    categories: Vec<Id>,
    users: Vec<Id>,
    /// Every product and order made (some deleted since).
    products: Mutex<Vec<Id>>,
    orders: Mutex<Vec<(Id, Id)>>,
    /// The products made naming each brand and category.
    children: Mutex<BTreeMap<K, Vec<Id>>>,
    ops: Mutex<BTreeMap<&'static str, usize>>,
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn id(rng: &mut StdRng, t: i64) -> Id {
    Id::at(t, rng.random())
}

fn pick<T: Clone>(rng: &mut StdRng, v: &[T]) -> T {
    v[rng.random_range(0..v.len())].clone()
}

/// A moment the service writes at (epoch seconds): within the last days.
fn recent(rng: &mut StdRng, hours: i64) -> i64 {
    t_now() - rng.random_range(0..hours * 3600)
}

impl Service {
    fn new(store: Arc<dyn Store>, log: Arc<Log>, rng: &mut StdRng) -> Self {
        let t0 = t_now() - 30 * 86_400;
        Service {
            store,
            log,
            brands: (0..BRANDS).map(|_| id(rng, t0)).collect(),
            categories: (0..CATEGORIES).map(|_| id(rng, t0)).collect(),
            users: (0..USERS).map(|_| id(rng, t0)).collect(),
            products: Mutex::default(),
            orders: Mutex::default(),
            children: Mutex::default(),
            ops: Mutex::default(),
        }
    }

    fn count(&self, op: &'static str) {
        *self.ops.lock().unwrap().entry(op).or_default() += 1;
    }

    /// A plain Put (`Some`) or Delete, retried while DynamoDB refuses it
    /// (a transaction of the worker's in flight on the item), then logged.
    async fn write(&self, key: Key, item: Option<Item>) {
        let start = Instant::now();
        for attempt in 0.. {
            self.log.service_requests.fetch_add(1, Ordering::Relaxed);
            let r = match &item {
                Some(i) => self.store.put(i.clone(), None).await,
                None => self.store.delete(&key, None).await,
            };
            match r {
                Ok(_) => break,
                Err(e) if e.is_retryable() && attempt < 30 => {
                    self.count("(a write retried)");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("service write: {e}"),
            }
        }
        let end = Instant::now();
        self.log
            .service
            .lock()
            .unwrap()
            .entry(k(&key))
            .or_default()
            .push(Written { item, start, end });
    }

    async fn put(&self, item: Item) {
        let key = item
            .iter()
            .filter(|(a, _)| *a == keys::PK || *a == keys::SK)
            .map(|(a, v)| (a.clone(), v.clone()))
            .collect();
        self.write(key, Some(item)).await
    }

    async fn delete(&self, key: Key) {
        self.write(key, None).await
    }

    /// A consistent read, as a client reads before it writes back.
    async fn read(&self, key: &Key) -> Option<Item> {
        self.log.service_requests.fetch_add(1, Ordering::Relaxed);
        self.store.get(key, true).await.expect("service read")
    }

    fn parent(&self, rng: &mut StdRng) -> ItemKey {
        if rng.random_bool(0.6) {
            ItemKey::Brand(pick(rng, &self.brands))
        } else {
            ItemKey::Category(pick(rng, &self.categories))
        }
    }

    fn parent_item(&self, rng: &mut StdRng, key: &ItemKey) -> Item {
        let name = match key {
            ItemKey::Brand(_) => format!("Brand{}", rng.random_range(0..50)),
            _ => format!("Cat{}", rng.random_range(0..50)),
        };
        named(key.clone(), &name, t_now() - 30 * 86_400, recent(rng, 24))
    }

    /// A new product, of `parent` when given (else of any brand and
    /// category), written as a careless service does: no index attribute.
    fn new_product(&self, rng: &mut StdRng, parent: Option<&ItemKey>) -> Product {
        let created = recent(rng, 24 * 14);
        let mut brand = pick(rng, &self.brands);
        let mut category = pick(rng, &self.categories);
        match parent {
            Some(ItemKey::Brand(b)) => brand = b.clone(),
            Some(ItemKey::Category(c)) => category = c.clone(),
            _ => {}
        }
        let p = Product {
            id: id(rng, created),
            name: Some(format!("Product {}", rng.random_range(0..100))),
            price: Some(f64::from(rng.random_range(1..400)) / 4.0),
            stock: Some(rng.random_range(0..40)),
            brand_id: Some(brand),
            category_id: Some(category),
            stamps: stamps(created, created),
        };
        self.products.lock().unwrap().push(p.id.clone());
        let mut children = self.children.lock().unwrap();
        for parent in [
            ItemKey::Brand(p.brand_id.clone().unwrap()),
            ItemKey::Category(p.category_id.clone().unwrap()),
        ] {
            children
                .entry(parent.parts())
                .or_default()
                .push(p.id.clone());
        }
        p
    }

    /// The parent deleted; as soon as the service sees the worker flag one
    /// of its products (or after [`RESTORE_AFTER`]), half its other
    /// products moved to another parent and the parent written again. The
    /// worker is then between its reads ("the parent is gone", "the product
    /// names it") and the flags of the parent's other products. Whether a
    /// flag was seen.
    async fn restore_while_flagged(&self, rng: &mut StdRng, parent: &ItemKey) -> bool {
        let field = match parent {
            ItemKey::Brand(_) => keys::BRAND_ID,
            _ => keys::CATEGORY_ID,
        };
        let watched: Vec<Key> = {
            let children = self.children.lock().unwrap();
            let all = children.get(&parent.parts()).cloned().unwrap_or_default();
            all.iter()
                .rev()
                .take(WATCHED)
                .map(|p| ItemKey::Product(p.clone()).key())
                .collect()
        };
        let flagged = |items: &[Option<Item>]| -> BTreeSet<K> {
            items
                .iter()
                .flatten()
                .filter_map(|i| ProductRefs::from_item(i).ok().flatten().map(|p| (i, p)))
                .filter(|(_, p)| p.missing.iter().any(|m| m == field))
                .map(|(i, _)| worker_testkit::key_of(i))
                .collect()
        };
        let get = |keys: Vec<Key>| async move {
            if keys.is_empty() {
                return Vec::new();
            }
            self.log.service_requests.fetch_add(1, Ordering::Relaxed);
            self.store
                .get_many(&keys, true)
                .await
                .expect("service read")
        };
        // Those flagged already (a deletion before) tell nothing.
        let before = flagged(&get(watched.clone()).await);
        let watched: Vec<Key> = watched
            .into_iter()
            .filter(|key| !before.contains(&k(key)))
            .collect();
        self.delete(parent.key()).await;
        let deleted = Instant::now();
        let mut seen = false;
        while !watched.is_empty() && !seen && deleted.elapsed() < RESTORE_AFTER {
            tokio::time::sleep(Duration::from_millis(80)).await;
            seen = !flagged(&get(watched.clone()).await).is_empty();
        }
        if seen {
            // Half the products not flagged yet moved to another parent
            // first, from copies read now: the worker read them naming
            // this one.
            let others: Vec<Id> = match parent {
                ItemKey::Brand(b) => self.brands.iter().filter(|o| *o != b).cloned().collect(),
                ItemKey::Category(c) => self
                    .categories
                    .iter()
                    .filter(|o| *o != c)
                    .cloned()
                    .collect(),
                _ => unreachable!("a brand or a category"),
            };
            let other = pick(rng, &others).to_string();
            let moved: Vec<Item> = get(watched)
                .await
                .into_iter()
                .flatten()
                .filter(|i| flagged(&[Some(i.clone())]).is_empty())
                .filter(|_| rng.random_bool(0.5))
                .map(|mut i| {
                    i.insert(field.into(), AttributeValue::S(other.clone()));
                    i.insert(keys::UPDATED_AT.into(), n(t_now()));
                    i
                })
                .collect();
            *self
                .ops
                .lock()
                .unwrap()
                .entry("(products moved while flagged)")
                .or_default() += moved.len();
            futures::future::join_all(moved.into_iter().map(|i| self.put(i))).await;
        }
        let item = self.parent_item(rng, parent);
        self.put(item).await;
        seen
    }

    /// A copy of a product read before, changed: price and stock, and now
    /// and then another brand or category.
    fn changed_product(&self, rng: &mut StdRng, copy: &Item) -> Item {
        let mut item = copy.clone();
        item.insert(
            keys::PRICE.into(),
            AttributeValue::N((f64::from(rng.random_range(1..400)) / 4.0).to_string()),
        );
        item.insert(keys::STOCK.into(), n(rng.random_range(0..40)));
        match rng.random_range(0..10) {
            0..=3 => {
                let b = pick(rng, &self.brands);
                item.insert(keys::BRAND_ID.into(), AttributeValue::S(b.to_string()));
            }
            4..=5 => {
                let c = pick(rng, &self.categories);
                item.insert(keys::CATEGORY_ID.into(), AttributeValue::S(c.to_string()));
            }
            _ => {}
        }
        item.insert(keys::UPDATED_AT.into(), n(recent(rng, 24)));
        item
    }

    fn new_order(&self, rng: &mut StdRng) -> Order {
        let updated = recent(rng, 100);
        let o = Order {
            user: pick(rng, &self.users),
            id: id(rng, updated),
            status: Some(pick(rng, &STATUSES[..2]).to_owned()),
            total_price: Some(f64::from(rng.random_range(1..900)) / 2.0),
            stamps: stamps(updated, updated),
        };
        self.orders
            .lock()
            .unwrap()
            .push((o.user.clone(), o.id.clone()));
        o
    }

    /// A copy of an order read before, moved to another status.
    fn changed_order(rng: &mut StdRng, copy: &Item) -> Item {
        let mut item = copy.clone();
        item.insert(
            keys::STATUS.into(),
            AttributeValue::S(pick(rng, STATUSES).to_owned()),
        );
        item.insert(keys::UPDATED_AT.into(), n(recent(rng, 100)));
        item
    }

    fn some_product(&self, rng: &mut StdRng) -> Key {
        let all = self.products.lock().unwrap();
        ItemKey::Product(pick(rng, &all)).key()
    }

    fn some_order(&self, rng: &mut StdRng) -> Key {
        let all = self.orders.lock().unwrap();
        let (user, order) = pick(rng, &all);
        ItemKey::Order { user, order }.key()
    }

    /// Client think time between a read and the write of its copy.
    async fn think(rng: &mut StdRng) {
        let ms = rng.random_range(0..20);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Brands, categories and users, and a first few products and orders.
    async fn open(&self, rng: &mut StdRng) {
        for key in self
            .brands
            .iter()
            .map(|b| ItemKey::Brand(b.clone()))
            .chain(self.categories.iter().map(|c| ItemKey::Category(c.clone())))
            .collect::<Vec<_>>()
        {
            let item = self.parent_item(rng, &key);
            self.put(item).await;
        }
        for u in self.users.clone() {
            self.put(user(rng, u)).await;
        }
        for _ in 0..FIRST_PRODUCTS {
            let p = self.new_product(rng, None);
            self.put(p.to_item()).await;
        }
        for _ in 0..FIRST_ORDERS {
            let o = self.new_order(rng);
            self.put(o.to_item()).await;
        }
    }

    /// One service request (or burst), chosen by `rng`.
    async fn step(&self, rng: &mut StdRng) {
        let parent = self.parent(rng);
        match rng.random_range(0..100) {
            0..=13 => {
                let p = self.new_product(rng, None);
                self.put(p.to_item()).await;
                self.count("create product");
            }
            14..=25 => {
                // Rewrite a product just read.
                let key = self.some_product(rng);
                let Some(copy) = self.read(&key).await else {
                    return self.count("(product gone when read)");
                };
                let item = self.changed_product(rng, &copy);
                Self::think(rng).await;
                self.put(item).await;
                self.count("rewrite product read");
            }
            26..=28 => {
                let key = self.some_product(rng);
                self.delete(key).await;
                self.count("delete product");
            }
            29..=35 => {
                let o = self.new_order(rng);
                self.put(o.to_item()).await;
                self.count("place order");
            }
            36..=43 => {
                let key = self.some_order(rng);
                let Some(copy) = self.read(&key).await else {
                    return self.count("(order gone when read)");
                };
                let item = Self::changed_order(rng, &copy);
                Self::think(rng).await;
                self.put(item).await;
                self.count("order status changed");
            }
            44..=45 => {
                let key = self.some_order(rng);
                self.delete(key).await;
                self.count("delete order");
            }
            46..=50 => {
                // Renamed (a deleted one is created again).
                let item = self.parent_item(rng, &parent);
                self.put(item).await;
                self.count("rename brand/category");
            }
            51..=53 => {
                let u = pick(rng, &self.users);
                self.put(user(rng, u)).await;
                self.count("new e-mail address");
            }
            54..=61 => {
                // Burst: the parent deleted while products naming it are
                // added; in half the cases created again after a pause.
                let p1 = self.new_product(rng, Some(&parent)).to_item();
                let p2 = self.new_product(rng, Some(&parent)).to_item();
                futures::join!(self.delete(parent.key()), self.put(p1), self.put(p2));
                if rng.random_bool(0.5) {
                    let ms = rng.random_range(20..200);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let item = self.parent_item(rng, &parent);
                    self.put(item).await;
                }
                self.count("burst: delete parent while children added");
            }
            62..=69 => {
                // Burst: the parent written again while it is deleted, one
                // to three times in a row.
                for _ in 0..rng.random_range(1..=3) {
                    let ms = rng.random_range(0..80);
                    let item = self.parent_item(rng, &parent);
                    futures::join!(self.delete(parent.key()), async {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        self.put(item).await
                    });
                }
                self.count("burst: update parent while deleted");
            }
            70..=79 => {
                // Burst: the parent deleted, and written again while the
                // worker flags its products.
                if self.restore_while_flagged(rng, &parent).await {
                    self.count("burst: parent restored while its products are flagged");
                } else {
                    self.count("burst: parent restored (no flag seen)");
                }
            }
            80..=87 => {
                // Burst: a product rewritten from two copies read before,
                // at once; deleted at the same time in a third of them.
                let key = self.some_product(rng);
                let Some(copy) = self.read(&key).await else {
                    return self.count("(product gone when read)");
                };
                let (c1, c2) = (
                    self.changed_product(rng, &copy),
                    self.changed_product(rng, &copy),
                );
                Self::think(rng).await;
                if rng.random_bool(0.33) {
                    futures::join!(self.put(c1), self.put(c2), self.delete(key));
                    self.count("burst: rewrite read copies while deleted");
                } else {
                    futures::join!(self.put(c1), self.put(c2));
                    self.count("burst: rewrite read copies");
                }
            }
            88..=93 => {
                // Burst: an order's status changed from two copies at once.
                let key = self.some_order(rng);
                let Some(copy) = self.read(&key).await else {
                    return self.count("(order gone when read)");
                };
                let (c1, c2) = (
                    Self::changed_order(rng, &copy),
                    Self::changed_order(rng, &copy),
                );
                Self::think(rng).await;
                futures::join!(self.put(c1), self.put(c2));
                self.count("burst: order changed from two copies");
            }
            _ => {
                // Deleted; gone until renamed again.
                self.delete(parent.key()).await;
                self.count("delete brand/category");
            }
        }
    }
}

fn user(rng: &mut StdRng, id: Id) -> Item {
    let created = t_now() - 30 * 86_400;
    User {
        id,
        name: Some(format!("User {}", rng.random_range(0..50))),
        email: Some(format!("u{}@shop.test", rng.random_range(0..1000))),
        stamps: stamps(created, recent(rng, 24)),
    }
    .to_item()
}

// ---------------------------------------------------------------------------
// The scheduled jobs beside the service
// ---------------------------------------------------------------------------

/// The scheduled jobs, run again and again while the service writes (as a
/// schedule would, only more often): the audit, and now and then the
/// backfill. A tick may fail on a transaction conflict (the next tick
/// decides again); counted.
struct Ticker {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<BTreeMap<String, usize>>,
}

impl Ticker {
    fn start(app: Arc<Worker<Job>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            let mut tick = 0;
            while !flag.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(80)).await;
                tick += 1;
                let job = if tick % 4 == 0 {
                    Job::Backfill
                } else {
                    Job::Audit
                };
                match app.run_job(job, None).await {
                    Ok(r) => {
                        *counts.entry(format!("{job}")).or_default() += 1;
                        for f in [
                            "flags_changed",
                            "flags_refused",
                            "flags_withheld",
                            "written",
                        ] {
                            if let Some(v) = r.details[f].as_u64() {
                                *counts.entry(format!("{job} {f}")).or_default() += v as usize;
                            }
                        }
                    }
                    Err(e) => {
                        assert!(e.is_retryable(), "{job} failed for good: {e}");
                        *counts.entry(format!("{job} failed")).or_default() += 1;
                    }
                }
            }
            counts
        });
        Ticker { stop, task }
    }

    async fn stop(self) -> BTreeMap<String, usize> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the ticker")
    }
}

// ---------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------

/// An item's service-owned attributes (the worker's left out).
fn service_fields(item: &Item) -> BTreeMap<String, AttributeValue> {
    item.iter()
        .filter(|(a, _)| !WORKER_ATTRS.contains(&a.as_str()))
        .map(|(a, v)| (a.clone(), v.clone()))
        .collect()
}

/// The table against the service's own view, and the derived keys against
/// each item's fields.
fn state(snapshot: &BTreeMap<K, Item>, log: &Log, after_jobs: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let service = log.service.lock().unwrap();
    // 1. Every key as one of the service's last writes left it: a write
    // no other write certainly followed.
    for (key, writes) in service.iter() {
        let finals: Vec<&Written> = writes
            .iter()
            .filter(|w| !writes.iter().any(|o| o.start > w.end))
            .collect();
        match snapshot.get(key) {
            None if finals.iter().any(|w| w.item.is_none()) => {}
            None => problems.push(format!("live item deleted: {key:?}")),
            Some(item) => {
                let have = service_fields(item);
                if !finals
                    .iter()
                    .any(|w| w.item.as_ref().is_some_and(|i| service_fields(i) == have))
                {
                    let what = if finals.iter().all(|w| w.item.is_none()) {
                        "an item the service deleted is there again"
                    } else {
                        "the service's fields changed"
                    };
                    problems.push(format!("{what}: {key:?} {have:?}"));
                }
            }
        }
    }
    for (key, item) in snapshot {
        if service.contains_key(key) {
            // 2. Derived keys as the fields say.
            match Derivation::of(item) {
                Ok(Some(d)) if !d.satisfied_by(item) => problems.push(format!(
                    "derived attributes not what the fields say: {key:?} (want {:?})",
                    d.derived
                )),
                Ok(_) => {}
                Err(e) => problems.push(format!("{e}")),
            }
        } else if key.0 != "WORKER" || after_jobs {
            problems.push(format!("an item the service never wrote: {item:?}"));
        }
    }
    problems
}

/// The ids of a partition's items in the snapshot.
fn ids(snapshot: &BTreeMap<K, Item>, of: fn(&ItemKey) -> Option<&Id>) -> BTreeSet<Id> {
    snapshot
        .values()
        .filter_map(|i| ItemKey::from_item(i).ok())
        .filter_map(|k| of(&k).cloned())
        .collect()
}

/// After the audit: every product's flag is exactly its references that
/// name nothing.
fn flags(snapshot: &BTreeMap<K, Item>) -> Vec<String> {
    let brands = ids(snapshot, |k| match k {
        ItemKey::Brand(id) => Some(id),
        _ => None,
    });
    let categories = ids(snapshot, |k| match k {
        ItemKey::Category(id) => Some(id),
        _ => None,
    });
    let mut problems = Vec::new();
    for item in snapshot.values() {
        let Ok(Some(p)) = ProductRefs::from_item(item) else {
            continue;
        };
        let want = rules::missing(&p, &brands, &categories);
        if p.missing != want {
            problems.push(format!(
                "product {} flagged {:?}, its missing references are {want:?}",
                p.id, p.missing
            ));
        }
    }
    problems
}

/// Every landed worker write against the service's log: what it claims
/// held for the whole time it was in flight, where the log knows.
/// Returns the problems and how many writes the log could not decide.
fn worker_writes(log: &Log) -> (Vec<String>, usize) {
    let service = log.service.lock().unwrap();
    let none = Vec::new();
    let at = |key: &Key, w: &WorkerWrite| -> Known<'_> {
        known(service.get(&k(key)).unwrap_or(&none), w.start, w.end)
    };
    let mut problems = Vec::new();
    let mut unknown = 0;
    for w in log.worker.lock().unwrap().iter() {
        if w.key.0 == "WORKER" {
            continue; // a checkpoint
        }
        let writes = service.get(&w.key).unwrap_or(&none);
        let item = match (&w.claim, known(writes, w.start, w.end)) {
            (Claim::Other(what), _) => {
                problems.push(format!("the worker's {what} of {:?}", w.key));
                continue;
            }
            (_, Known::Unknown) => {
                unknown += 1;
                continue;
            }
            (claim, Known::Absent) => {
                problems.push(format!(
                    "{claim:?} written to {:?} while the service had deleted it",
                    w.key
                ));
                continue;
            }
            (_, Known::Live(item)) => item,
        };
        match &w.claim {
            Claim::Derived(set) => {
                let want: BTreeMap<String, Option<String>> = match Derivation::of(item) {
                    Ok(Some(d)) => d
                        .derived
                        .into_iter()
                        .map(|(a, v)| (a.to_owned(), v))
                        .collect(),
                    other => {
                        problems.push(format!("derived keys on {:?} ({other:?})", w.key));
                        continue;
                    }
                };
                if *set != want {
                    problems.push(format!(
                        "stale derived keys on {:?}: wrote {set:?}, its fields say {want:?}",
                        w.key
                    ));
                }
            }
            Claim::FlagAdded(_) | Claim::FlagSet(_) => {
                let Ok(Some(p)) = ProductRefs::from_item(item) else {
                    problems.push(format!("a flag on {:?}, not a product", w.key));
                    continue;
                };
                for (field, reference) in [
                    (keys::BRAND_ID, p.brand_id.clone().map(ItemKey::Brand)),
                    (
                        keys::CATEGORY_ID,
                        p.category_id.clone().map(ItemKey::Category),
                    ),
                ] {
                    let gone = match &w.claim {
                        Claim::FlagAdded(f) if f.iter().any(|f| f == field) => Some(true),
                        Claim::FlagAdded(_) => None,
                        Claim::FlagSet(f) => Some(f.iter().any(|f| f == field)),
                        _ => unreachable!(),
                    };
                    let (Some(gone), Some(reference)) = (gone, &reference) else {
                        if gone == Some(true) {
                            problems
                                .push(format!("{:?} flags {field}, which it does not have", w.key));
                        }
                        continue;
                    };
                    match (gone, at(&reference.key(), w)) {
                        (true, Known::Live(_)) => problems.push(format!(
                            "product {} flagged missing {reference} while it was live ({:?})",
                            p.id, w.claim
                        )),
                        (false, Known::Absent) => problems.push(format!(
                            "product {} flag cleared of {field} while {reference} was gone ({:?})",
                            p.id, w.claim
                        )),
                        (_, Known::Unknown) => unknown += 1,
                        _ => {}
                    }
                }
            }
            Claim::Other(_) => unreachable!(),
        }
    }
    (problems, unknown)
}

/// `stuck-orders` at `at`: exactly the orders of the table in `PENDING`
/// or `PAID` unchanged for 48 hours are published.
async fn stuck(
    app: &Worker<Job>,
    clock: &ManualClock,
    publisher: &RecordingPublisher,
    at: chrono::DateTime<chrono::Utc>,
    snapshot: &BTreeMap<K, Item>,
) -> (Vec<String>, usize) {
    clock.set(at);
    let before = publisher.sent().len();
    let report = app
        .run_job(Job::StuckOrders, None)
        .await
        .expect("stuck-orders");
    let mut problems = Vec::new();
    if !report.complete {
        problems.push(format!("stuck-orders incomplete: {}", report.summary));
    }
    let cutoff = at.timestamp() - 48 * 3600;
    let want: BTreeSet<(String, String)> = snapshot
        .values()
        .filter_map(|i| {
            let Ok(ItemKey::Order { user, order }) = ItemKey::from_item(i) else {
                return None;
            };
            let status = shop_worker::items::text(i, keys::STATUS).ok()??;
            let updated = shop_worker::items::number(i, keys::UPDATED_AT).ok()??;
            (["PENDING", "PAID"].contains(&status) && updated < cutoff)
                .then(|| (user.to_string(), order.to_string()))
        })
        .collect();
    let got: BTreeSet<(String, String)> = publisher.sent()[before..]
        .iter()
        .map(|e| {
            let d: serde_json::Value = serde_json::from_str(&e.detail).expect("event detail");
            (
                d["user_id"].as_str().unwrap().to_owned(),
                d["order_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    if got != want {
        problems.push(format!(
            "stuck-orders at {at}: published {} order(s), {} stuck; not published {:?}, published but not stuck {:?}",
            got.len(),
            want.len(),
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        ));
    }
    (problems, want.len())
}

async fn snapshot(table: &TestTable) -> BTreeMap<K, Item> {
    table
        .snapshot()
        .await
        .into_iter()
        .map(|i| (worker_testkit::key_of(&i), i))
        .collect()
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/// One seed at one parallelization factor.
async fn run(seed: u64, factor: usize) {
    let started = Instant::now();
    let table = TestTable::with_schema(&schema()).await;
    let log = Arc::new(Log::default());
    let recording = Arc::new(RecordingStore::new(table.store.clone()).with_reads());
    let clock = ManualClock::new(now());
    let publisher = Arc::new(RecordingPublisher::default());
    let mut settings = Settings::for_table(&table.name);
    settings.event_bus = Some(BUS.into());
    let app = Arc::new(shop_worker::app::APP.table_worker(
        recording.clone(),
        settings,
        publisher.clone(),
        Arc::new(clock.clone()),
        shop_worker::app::SHARING,
    ));
    let mut rng = StdRng::seed_from_u64(seed);
    let service = Arc::new(Service::new(table.store.clone(), log.clone(), &mut rng));
    service.open(&mut rng).await;

    let mapping = Mapping::new(factor).idle(Duration::from_millis(100));
    let followers = Followers::start(vec![Tail::new(&table).await], app.clone(), mapping.clone());
    let ticker = Ticker::start(app.clone());
    let service_time = service_tasks(TASKS, seed, |_, mut rng| {
        let service = service.clone();
        async move {
            for _ in 0..OPS_PER_TASK {
                service.step(&mut rng).await;
            }
        }
    })
    .await;
    let ticks = ticker.stop().await;
    let (mut tails, mut stats) = followers.stop().await;
    stats.add(quiet(&mut tails, app.as_ref(), &mapping).await);
    let drained = started.elapsed();

    let table_then = snapshot(&table).await;
    let mut problems = state(&table_then, &log, false);

    // The jobs across their grace periods, the stream quiet after each.
    clock.set(now() + chrono::Duration::hours(1));
    let audit = app.run_job(Job::Audit, None).await.expect("audit");
    stats.add(quiet(&mut tails, app.as_ref(), &mapping).await);
    let again = app.run_job(Job::Audit, None).await.expect("audit");
    let backfill = app.run_job(Job::Backfill, None).await.expect("backfill");
    stats.add(quiet(&mut tails, app.as_ref(), &mapping).await);
    for (r, changed) in [
        (&audit, None),
        (&again, Some("flags_changed")),
        (&backfill, Some("written")),
    ] {
        if !r.complete {
            problems.push(format!("{} incomplete: {}", r.job, r.summary));
        }
        if let Some(f) = changed
            && r.details[f] != 0
        {
            problems.push(format!("{} again changed something: {}", r.job, r.details));
        }
    }
    if backfill.details["malformed"] != 0 {
        problems.push(format!("backfill: {}", backfill.details));
    }
    let table_now = snapshot(&table).await;
    problems.extend(flags(&table_now));
    let mut stuck_counts = Vec::new();
    for hours in [1, 50] {
        let (p, n) = stuck(
            &app,
            &clock,
            &publisher,
            now() + chrono::Duration::hours(hours),
            &table_now,
        )
        .await;
        problems.extend(p);
        stuck_counts.push(n);
    }
    clock.set(now() + chrono::Duration::hours(25));
    let day_later = app.run_job(Job::Audit, None).await.expect("audit");
    if day_later.details["flags_changed"] != 0 {
        problems.push(format!(
            "the audit a day later changed flags: {}",
            day_later.details
        ));
    }
    stats.add(quiet(&mut tails, app.as_ref(), &mapping).await);
    let table_end = snapshot(&table).await;
    problems.extend(state(&table_end, &log, true));
    problems.extend(flags(&table_end));
    log.add_worker(&recording.take());
    let (wrong, undecided) = worker_writes(&log);
    problems.extend(wrong);
    if stats.rejected + stats.malformed > 0 {
        problems.push(format!(
            "{} record(s) rejected",
            stats.rejected + stats.malformed
        ));
    }

    let ops = service.ops.lock().unwrap().clone();
    let requests: usize = ops
        .iter()
        .filter(|(op, _)| !op.starts_with('('))
        .map(|(_, n)| n)
        .sum();
    let service_writes: usize = log.service.lock().unwrap().values().map(Vec::len).sum();
    let mut landed: BTreeMap<&str, usize> = BTreeMap::new();
    for w in log.worker.lock().unwrap().iter() {
        let kind = match w.claim {
            Claim::Derived(_) => "derived",
            Claim::FlagAdded(_) => "flag added",
            Claim::FlagSet(_) => "flag set",
            Claim::Other(_) => "other",
        };
        *landed.entry(kind).or_default() += 1;
    }
    println!(
        "seed {seed} factor {factor}: {requests} service requests {ops:?}, {service_writes} service writes; \
         {} records, {} invocations, {} retries, {} stream reads again; \
         DynamoDB requests: service {}, worker {}; worker writes landed {landed:?}, \
         {} withheld, {} refused, {} conditions failed, {} ambiguous, {undecided} not decidable from the log; \
         jobs meanwhile {ticks:?}; stuck {stuck_counts:?}; audit {}; \
         service {:.1}s, drained at {:.1}s, done {:.1}s",
        stats.records,
        stats.invocations,
        stats.retries,
        tails[0].failed_reads,
        log.service_requests.load(Ordering::Relaxed),
        log.worker_requests.load(Ordering::Relaxed),
        log.withheld.load(Ordering::Relaxed),
        log.refused.load(Ordering::Relaxed),
        log.conditions_failed.load(Ordering::Relaxed),
        log.ambiguous.load(Ordering::Relaxed),
        audit.summary,
        service_time.as_secs_f64(),
        drained.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
    assert_no_problems(seed, factor, &problems);
}

worker_testkit::soak_tests!(run);
