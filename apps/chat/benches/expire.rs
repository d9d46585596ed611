//! Load driver for `expire-requests` (`cargo bench -p chat-worker --bench
//! expire`).
//!
//! For ChatRequests tables of 10,000 and 100,000 requests (two copies
//! each; `-- --sizes a,b` overrides), each holding the same pending set
//! (200 pending requests past `REQUEST_EXPIRY_DAYS`, due, and 300 recent
//! ones) and the rest decided (no `PendingId`, so not in the sparse
//! index), it seeds the table (no stream) on a DynamoDB Local of its own,
//! runs the job once through the worker (fixed clock) and checks that
//! exactly the due copies expired. It prints the read capacity and the
//! requests of the run (`DynamoStore::metrics()`). The bound: the read
//! capacity must not grow with the table (largest/smallest <= 1.1) and
//! every read must be of the index; otherwise the bench exits non-zero.

use std::sync::Arc;

use chat_worker::app::{Stores, worker};
use chat_worker::config::for_tables;
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, Job, RequestKey};
use chat_worker::schema::Table;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use worker_engine::TableNames;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::store::MetricsSnapshot;
use worker_testkit::bench::{self, Growth};

const DUE: usize = 200;
const RECENT: usize = 300;
const SEED_TASKS: usize = 4;
const BOUND: f64 = 1.1;
const DECIDED: [Status; 4] = [
    Status::Accepted,
    Status::Rejected,
    Status::Cancelled,
    Status::Expired,
];

fn now() -> DateTime<Utc> {
    "2024-06-01T00:00:00Z".parse().expect("a time")
}

/// Both copies of request `i`, created at `created`, with `status`.
fn copies(i: usize, created: DateTime<Utc>, status: Status) -> [Item; 2] {
    let id = format!("r{i}");
    let (user, chat) = (format!("u{}", i % 5_000), format!("g{}", i % 700));
    RequestKey::copies(&user, &chat, created, &id).map(|k| {
        RequestCopy {
            key: Some(k),
            id: id.clone(),
            user_id: user.clone(),
            chat_id: chat.clone(),
            created_at: keys::format_time(created),
            status,
            seen: false,
            pending_id: (status == Status::Pending).then(|| format!("pid-{i}")),
            status_reason: None,
            joined_at: None,
        }
        .to_item()
    })
}

fn items(requests: usize) -> Vec<Item> {
    let mut out = Vec::with_capacity(2 * requests);
    for i in 0..requests {
        let (created, status) = if i < DUE {
            (
                now() - Duration::days(40) - Duration::minutes(i as i64),
                Status::Pending,
            )
        } else if i < DUE + RECENT {
            (
                now() - Duration::days(2) - Duration::minutes(i as i64),
                Status::Pending,
            )
        } else {
            (
                now() - Duration::days(60) + Duration::minutes(i as i64 % 80_000),
                DECIDED[i % 4],
            )
        };
        out.extend(copies(i, created, status));
    }
    out
}

struct Measured {
    requests: usize,
    read: u64,
    expired: u64,
    cost: MetricsSnapshot,
    seed_s: f64,
    run_ms: f64,
}

async fn measure(requests: usize) -> Measured {
    let own = bench::seeded(
        format!("chat-expire-{requests}"),
        &Table::ChatRequests.schema().without_stream(),
        items(requests),
        SEED_TASKS,
    )
    .await;
    let (table, seed_s) = (&own.table, own.seed_s);
    eprintln!("seeded {} copies in {seed_s:.1} s", 2 * requests);

    // The job reads and writes the ChatRequests table only; the other
    // tables' stores are never called.
    let settings = for_tables(TableNames::new(|_| table.name.clone()));
    let stores = Stores::same(table.store.clone());
    let worker = worker(
        stores,
        table.store.clone(),
        settings,
        Arc::new(ManualClock::new(now())),
    );
    let run = bench::metered(&table.store, worker.run_job(Job::ExpireRequests, None)).await;
    let report = run.value.expect("expire-requests runs");
    assert!(report.complete, "{report:?}");
    let figure = |name: &str| report.details[name].as_u64().expect("a count");
    assert!(
        table
            .store
            .metrics()
            .indexes()
            .iter()
            .all(|(_, i)| i == keys::PENDING_REQUESTS_INDEX),
        "reads of the index only"
    );
    Measured {
        requests,
        read: figure("entries_read"),
        expired: figure("expired"),
        cost: run.cost,
        seed_s,
        run_ms: run.run_ms,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = bench::sizes_at_least(&[10_000, 100_000], DUE + RECENT, "requests");
    println!(
        "expire-requests: {DUE} due + {RECENT} recent pending requests per table, the rest decided (DynamoDB Local)"
    );
    let mut results = Vec::new();
    for &requests in &sizes {
        let m = measure(requests).await;
        assert_eq!(
            (m.read, m.expired),
            (2 * (DUE + RECENT) as u64, 2 * DUE as u64),
            "at {requests} requests"
        );
        results.push(m);
    }
    println!();
    println!(
        "{:>9} {:>8} {:>8} {:>8} {:>7} {:>6} {:>7} {:>8} {:>8}",
        "requests", "copies", "read", "expired", "RCU", "scans", "other", "WCU", "run ms"
    );
    for m in &results {
        println!(
            "{:>9} {:>8} {:>8} {:>8} {:>7.1} {:>6} {:>7} {:>8.1} {:>8.1}",
            m.requests,
            2 * m.requests,
            m.read,
            m.expired,
            m.cost.read_capacity,
            m.cost.scan,
            m.cost.read_requests() - m.cost.scan,
            m.cost.write_capacity,
            m.run_ms
        );
    }
    let growth = Growth::of(&results, |m| m.requests, |m| &m.cost);
    let other_reads: u64 = results
        .iter()
        .map(|m| m.cost.read_requests() - m.cost.scan)
        .sum();
    let ok = growth.verdict(BOUND, "reads other than the index scan", other_reads);
    let line = json!({
        "bench": "chat-expire-requests",
        "due": DUE,
        "recent": RECENT,
        "sizes": results.iter().map(|m| json!({
            "requests": m.requests,
            "entries_read": m.read,
            "expired": m.expired,
            "rcu": m.cost.read_capacity,
            "wcu": m.cost.write_capacity,
            "scan": m.cost.scan,
            "seed_s": m.seed_s,
            "run_ms": m.run_ms,
        })).collect::<Vec<_>>(),
    });
    bench::finish(line, &growth, BOUND, ok);
}
