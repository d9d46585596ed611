//! What the shop worker's tests share: the worker on a test table, a
//! seeded shop history written the way a careless service writes it
//! (whole items, no index attribute), and the index queries of the seed's
//! access patterns.

#![allow(dead_code)] // each test binary uses a part

pub(crate) mod race;
pub(crate) mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use rand::Rng;
use shop_worker::app::{APP, SHARING};
use shop_worker::items::{Named, Order, Product, Stamps, User};
use shop_worker::keys::{Id, ItemKey, Job};
use shop_worker::stuck::StuckSettings;
use worker_engine::Worker;
use worker_engine::item::Item;
use worker_engine::store::{Expr, QuerySpec, Store};
use worker_testkit::app::TestApp;
use worker_testkit::workload::{Seeded, Write};

pub(crate) const NOW: &str = "2024-07-01T00:00:00Z";
/// Times of the history: the two weeks before [`NOW`].
pub(crate) const T0: i64 = 1_718_582_400;

pub(crate) fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// The shop worker as its tests run it, at [`NOW`]: `SHOP.worker(store)`
/// (the default settings, events recorded) or `SHOP.worker_with(..)`.
pub(crate) const SHOP: TestApp<Job, StuckSettings> = TestApp {
    app: &APP,
    sharing: SHARING,
    now: NOW,
};

/// `SHOP.worker(store)`.
pub(crate) fn app(store: Arc<dyn Store>) -> Worker<Job> {
    SHOP.worker(store)
}

pub(crate) const STATUSES: &[&str] = &["PENDING", "PAID", "SHIPPED", "DELIVERED"];

/// A reproducible id made at `t`.
pub(crate) fn id_at(rng: &mut Seeded, t: i64) -> Id {
    Id::at(t, rng.rng().random())
}

pub(crate) fn stamps(created_at: i64, updated_at: i64) -> Stamps {
    Stamps {
        created_at,
        updated_at,
    }
}

/// A shop's service: the entities it made, and the history of its writes
/// (whole-item Puts without index attributes, and Deletes).
pub(crate) struct History {
    pub writes: Vec<Write>,
    pub categories: Vec<Id>,
    pub brands: Vec<Id>,
    pub users: Vec<Id>,
    /// Orders: (user, order).
    pub orders: Vec<(Id, Id)>,
    pub products: Vec<Id>,
}

/// `n` writes over a small shop: categories, brands and users first, then
/// random new versions of any entity (renames, new e-mail addresses,
/// products moved to another brand or category, order status changes) and
/// a few deletes of products and orders.
pub(crate) fn history(rng: &mut Seeded, n: usize) -> History {
    let mut h = History {
        writes: Vec::new(),
        categories: Vec::new(),
        brands: Vec::new(),
        users: Vec::new(),
        orders: Vec::new(),
        products: Vec::new(),
    };
    let mut t = T0;
    let mut tick = |rng: &mut Seeded| {
        t += rng.rng().random_range(1..600);
        t
    };
    for i in 0..8 {
        let at = tick(rng);
        let id = id_at(rng, at);
        h.categories.push(id.clone());
        h.writes.push(Write::Put(named(
            ItemKey::Category(id),
            &format!("Cat{i}"),
            at,
            at,
        )));
        let at = tick(rng);
        let id = id_at(rng, at);
        h.brands.push(id.clone());
        h.writes.push(Write::Put(named(
            ItemKey::Brand(id),
            &format!("Br{i}"),
            at,
            at,
        )));
    }
    let mut created: BTreeMap<(String, String), i64> = BTreeMap::new();
    while h.writes.len() < n {
        let at = tick(rng);
        let roll = rng.rng().random_range(0..100);
        let pick = |rng: &mut Seeded, v: &Vec<Id>| v[rng.rng().random_range(0..v.len())].clone();
        let write = match roll {
            0..=9 => {
                let id = if h.users.is_empty() || roll < 5 {
                    let id = id_at(rng, at);
                    h.users.push(id.clone());
                    id
                } else {
                    pick(rng, &h.users)
                };
                let key = ItemKey::User(id.clone()).key();
                let c = *created.entry(worker_testkit::key_of(&key)).or_insert(at);
                Write::Put(
                    User {
                        id,
                        name: Some(format!("User {}", rng.rng().random_range(0..50))),
                        email: Some(format!("u{}@shop.test", rng.rng().random_range(0..1000))),
                        stamps: stamps(c, at),
                    }
                    .to_item(),
                )
            }
            10..=14 => {
                let (k, i) = if roll < 12 {
                    (ItemKey::Category(pick(rng, &h.categories)), "Cat")
                } else {
                    (ItemKey::Brand(pick(rng, &h.brands)), "Br")
                };
                let c = *created
                    .entry(worker_testkit::key_of(&k.key()))
                    .or_insert(at);
                let name = format!("{i}{}x", rng.rng().random_range(0..20));
                Write::Put(named(k, &name, c, at))
            }
            15..=54 => {
                let id = if h.products.is_empty() || roll < 30 {
                    let id = id_at(rng, at);
                    h.products.push(id.clone());
                    id
                } else {
                    pick(rng, &h.products)
                };
                let p = Product {
                    id: id.clone(),
                    name: Some(format!("Product {}", rng.rng().random_range(0..100))),
                    price: Some(f64::from(rng.rng().random_range(1..500)) / 4.0),
                    stock: Some(rng.rng().random_range(0..40)),
                    brand_id: Some(pick(rng, &h.brands)),
                    category_id: Some(pick(rng, &h.categories)),
                    stamps: stamps(0, at),
                };
                let c = *created
                    .entry(worker_testkit::key_of(&p.key()))
                    .or_insert(at);
                Write::Put(
                    Product {
                        stamps: stamps(c, at),
                        ..p
                    }
                    .to_item(),
                )
            }
            55..=94 if !h.users.is_empty() => {
                let (user, id) = if h.orders.is_empty() || roll < 70 {
                    let o = (pick(rng, &h.users), id_at(rng, at));
                    h.orders.push(o.clone());
                    o
                } else {
                    h.orders[rng.rng().random_range(0..h.orders.len())].clone()
                };
                let o = Order {
                    user,
                    id,
                    status: Some(STATUSES[rng.rng().random_range(0..STATUSES.len())].to_owned()),
                    total_price: Some(f64::from(rng.rng().random_range(1..900)) / 2.0),
                    stamps: stamps(0, at),
                };
                let c = *created
                    .entry(worker_testkit::key_of(&o.key()))
                    .or_insert(at);
                Write::Put(
                    Order {
                        stamps: stamps(c, at),
                        ..o
                    }
                    .to_item(),
                )
            }
            _ if !h.products.is_empty() && !h.orders.is_empty() => {
                if roll % 2 == 0 {
                    Write::Delete(ItemKey::Product(pick(rng, &h.products)).key())
                } else {
                    let (u, o) = h.orders[rng.rng().random_range(0..h.orders.len())].clone();
                    Write::Delete(ItemKey::Order { user: u, order: o }.key())
                }
            }
            _ => continue,
        };
        h.writes.push(write);
    }
    h
}

pub(crate) fn named(key: ItemKey, name: &str, created: i64, updated: i64) -> Item {
    Named {
        key,
        name: Some(name.to_owned()),
        stamps: stamps(created, updated),
    }
    .to_item()
}

/// The table a history leaves: the last write of each key.
pub(crate) fn final_state(writes: &[Write]) -> BTreeMap<(String, String), Item> {
    let mut state = BTreeMap::new();
    for w in writes {
        match w {
            Write::Put(item) => {
                state.insert(worker_testkit::key_of(item), item.clone());
            }
            Write::Delete(key) => {
                state.remove(&worker_testkit::key_of(key));
            }
        }
    }
    state
}

pub(crate) fn s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

pub(crate) fn num(item: &Item, name: &str) -> i64 {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().expect("a whole number"),
        other => panic!("{name} is not a number: {other:?}"),
    }
}

/// A Query of `pk_attr = pk`, with an optional sort key condition
/// (`=`, `<`, `>=` or `begins_with`), on the table or an index; every page.
pub(crate) async fn query(
    store: &dyn Store,
    index: Option<&str>,
    (pk_attr, pk): (&str, &str),
    sk: Option<(&str, &str, &str)>,
) -> Vec<Item> {
    let mut cond = Expr::new("#pk = :pk")
        .name("#pk", pk_attr)
        .string(":pk", pk);
    if let Some((attr, op, value)) = sk {
        let text = if op == "begins_with" {
            "begins_with(#sk, :sk)".to_owned()
        } else {
            format!("#sk {op} :sk")
        };
        cond = Expr::new(format!("#pk = :pk AND {text}"))
            .name("#pk", pk_attr)
            .name("#sk", attr)
            .string(":pk", pk)
            .string(":sk", value);
    }
    let mut spec = QuerySpec {
        key_condition: cond,
        forward: true,
        limit: Some(100),
        ..Default::default()
    };
    if let Some(i) = index {
        spec = spec.on_index(i);
    }
    store.query_all(&spec).await.expect("query")
}

/// The `(PK, SK)` of items, in order.
pub(crate) fn keys_of(items: &[Item]) -> Vec<(String, String)> {
    items.iter().map(worker_testkit::key_of).collect()
}

/// The `(PK, SK)` sets of a list, and a check that it is sorted by `attr`.
pub(crate) fn sorted_keys(items: &[Item], attr: &str) -> BTreeSet<(String, String)> {
    let values: Vec<&str> = items
        .iter()
        .map(|i| s(i, attr).expect("index key"))
        .collect();
    let mut sorted = values.clone();
    sorted.sort();
    assert_eq!(values, sorted, "ordered by {attr}");
    keys_of(items).into_iter().collect()
}
