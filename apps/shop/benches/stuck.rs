//! Load driver for `stuck-orders` (`cargo bench -p shop-worker --bench
//! stuck`).
//!
//! For tables of 10,000 and 100,000 orders (`-- --sizes a,b` overrides),
//! each holding the same stuck set: 150 `PENDING` and 150 `PAID` orders
//! last updated more than `STUCK_AFTER_HOURS` (48) ago, and otherwise
//! orders in those statuses updated recently and orders in other statuses
//! of any age, all with their derived `GSI1` keys, it seeds a table with
//! the shop schema (no stream) on a DynamoDB Local of its own and runs the
//! job once through the worker (fixed clock, no bus). It checks that
//! exactly the stuck orders are reported, and prints the read capacity
//! and the requests of the run (`DynamoStore::metrics()`). The bound: the
//! read capacity must not grow with the table (largest/smallest <= 1.1)
//! and no Scan may happen; otherwise the bench exits non-zero.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::json;
use shop_worker::config::Settings;
use shop_worker::derive::rules::Derivation;
use shop_worker::items::{Order, Stamps};
use shop_worker::keys::{Id, Job};
use shop_worker::schema::schema;
use worker_engine::RecordingPublisher;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::store::MetricsSnapshot;
use worker_testkit::bench::{self, Growth};

const H: i64 = 3600;
/// Stuck orders per stuck status.
const STUCK_PER_STATUS: usize = 150;
const USERS: usize = 1_000;
const SEED_TASKS: usize = 4;
const BOUND: f64 = 1.1;

fn now() -> DateTime<Utc> {
    "2024-07-01T00:00:00Z".parse().expect("a time")
}

fn payload(n: usize, salt: u8) -> [u8; 16] {
    let mut p = [salt; 16];
    p[..8].copy_from_slice(&(n as u64).to_be_bytes());
    p
}

/// Order `i` in `status`, last updated `age` seconds before now, with its
/// derived keys (as the worker leaves it).
fn order(i: usize, status: &str, age: i64) -> Item {
    let updated = now().timestamp() - age;
    let item = Order {
        user: Id::at(now().timestamp() - 400 * 86_400, payload(i % USERS, 1)),
        id: Id::at(updated - 60, payload(i, 2)),
        status: Some(status.into()),
        total_price: Some(25.0),
        stamps: Stamps {
            created_at: updated - 60,
            updated_at: updated,
        },
    }
    .to_item();
    Derivation::of(&item)
        .expect("a well-formed order")
        .expect("an entity")
        .apply(&item)
}

/// The table: the stuck set, then `orders` in all minus it.
fn items(orders: usize) -> Vec<Item> {
    let stuck = 2 * STUCK_PER_STATUS;
    let mut out = Vec::with_capacity(orders);
    for i in 0..STUCK_PER_STATUS {
        out.push(order(i, "PENDING", 49 * H + 60 * i as i64));
        out.push(order(STUCK_PER_STATUS + i, "PAID", 49 * H + 60 * i as i64));
    }
    for i in stuck..orders {
        let item = match i % 4 {
            // Recent, in a stuck status: under the cutoff's other side.
            0 => order(i, "PENDING", (i % 47) as i64 * H),
            1 => order(i, "PAID", (i % 47) as i64 * H),
            // Old, in statuses that are never stuck.
            2 => order(i, "SHIPPED", 50 * H + (i as i64) * 30),
            _ => order(i, "DELIVERED", 100 * H + (i as i64) * 30),
        };
        out.push(item);
    }
    out
}

struct Measured {
    orders: usize,
    stuck: u64,
    cost: MetricsSnapshot,
    seed_s: f64,
    run_ms: f64,
}

async fn measure(orders: usize) -> Measured {
    let own = bench::seeded(
        format!("stuck-bench-{orders}"),
        &schema().without_stream(),
        items(orders),
        SEED_TASKS,
    )
    .await;
    let (table, seed_s) = (&own.table, own.seed_s);
    eprintln!("seeded {orders} orders in {seed_s:.1} s");

    let worker = shop_worker::app::APP.table_worker(
        table.store.clone(),
        Settings::for_table(&table.name),
        Arc::new(RecordingPublisher::default()),
        Arc::new(ManualClock::new(now())),
        shop_worker::app::SHARING,
    );
    let run = bench::metered(&table.store, worker.run_job(Job::StuckOrders, None)).await;
    let report = run.value.expect("stuck-orders runs");
    assert!(report.complete, "one run completes: {report:?}");
    assert_eq!(
        report.details["by_status"],
        json!({"PENDING": STUCK_PER_STATUS, "PAID": STUCK_PER_STATUS}),
        "exactly the stuck orders at {orders} orders"
    );
    Measured {
        orders,
        stuck: report.details["stuck"].as_u64().expect("a count"),
        cost: run.cost,
        seed_s,
        run_ms: run.run_ms,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = bench::sizes_at_least(&[10_000, 100_000], 4 * STUCK_PER_STATUS, "orders");
    println!(
        "stuck-orders: {STUCK_PER_STATUS} stuck PENDING + {STUCK_PER_STATUS} stuck PAID orders per table, the rest recent or in other statuses (DynamoDB Local)"
    );
    let mut results = Vec::new();
    for &orders in &sizes {
        results.push(measure(orders).await);
    }
    println!();
    println!(
        "{:>8} {:>6} {:>7} {:>8} {:>6} {:>8} {:>8}",
        "orders", "stuck", "RCU", "queries", "scans", "seed s", "run ms"
    );
    for m in &results {
        println!(
            "{:>8} {:>6} {:>7.1} {:>8} {:>6} {:>8.1} {:>8.1}",
            m.orders, m.stuck, m.cost.read_capacity, m.cost.query, m.cost.scan, m.seed_s, m.run_ms
        );
    }
    println!("RCU and requests: DynamoStore::metrics() over the run");
    let growth = Growth::of(&results, |m| m.orders, |m| &m.cost);
    let scans: u64 = results.iter().map(|m| m.cost.scan).sum();
    let ok = growth.verdict(BOUND, "scans", scans);
    let line = json!({
        "bench": "shop-stuck-orders",
        "stuck": 2 * STUCK_PER_STATUS,
        "sizes": results.iter().map(|m| json!({
            "orders": m.orders,
            "stuck": m.stuck,
            "rcu": m.cost.read_capacity,
            "query": m.cost.query,
            "scan": m.cost.scan,
            "seed_s": m.seed_s,
            "run_ms": m.run_ms,
        })).collect::<Vec<_>>(),
    });
    bench::finish(line, &growth, BOUND, ok);
}
