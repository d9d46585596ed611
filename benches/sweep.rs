//! Load driver for the invitation-link sweep (`cargo bench --bench sweep`).
//!
//! For tables of 10,000 and 100,000 items, each holding the same 1,000
//! invitation links of which the same 100 are expired (in every stored
//! datetime form), it seeds a table with the full schema on DynamoDB Local
//! and runs one sweep tick (index path); then it drops the
//! `InvitationLinkExpiry` index (the table before the migration), puts the
//! same 100 expired links back and runs one tick again (fallback Scan). It
//! prints the read capacity each tick consumed (Query/Scan pages, from the
//! job report and from `DynamoStore::metrics()`), its pages, requests, write
//! capacity and wall time. It then checks the bounds: the index sweep's read
//! capacity must not grow with the table (100k/10k <= 1.1) and must be at
//! least 50 times below the fallback Scan's at 100,000 items.
//!
//! `BENCH_SIZES=2000,5000` or `cargo bench --bench sweep -- --sizes
//! 2000,5000,10000` overrides the table sizes (at least 2,000: the 1,000
//! groups and their links; the bound checks need exactly two sizes). With
//! `--sizes` the points (RCU of the index sweep and of the fallback scan per
//! table size) go to `docs/plots/read-capacity-sweep.csv` and the plot
//! `docs/plots/read-capacity.svg` is redrawn (with the expiry bench's points
//! if present). Each size runs on a DynamoDB Local of its own: a second large
//! table in the same instance seeds far slower.

#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/capacity.rs"]
mod capacity;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use nishiki_worker::datetime;
use nishiki_worker::items::{Item, attr};
use nishiki_worker::jobs::invitations::{SweepInvitations, SweepReport};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, Job, UserId};
use nishiki_worker::schema::INVITATION_EXPIRY_INDEX;
use support::TestTable;
use uuid::Uuid;
use worker_engine::schedule::{JobRun, Tick, TickSource};
use worker_engine::store::DynamoStore;

const LINKS: usize = 1_000;
const EXPIRED: usize = 100;
/// Concurrent BatchWriteItem tasks while seeding.
const SEED_TASKS: usize = 8;

fn now() -> DateTime<Utc> {
    datetime::parse("2024-03-25T00:00:00.000Z").expect("valid")
}

fn id(kind: u128, n: usize) -> Uuid {
    Uuid::from_u128((kind << 96) | n as u128)
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn with(key: ItemKey, attrs: &[(&str, AttributeValue)]) -> Item {
    let mut item = key.to_attributes();
    for (name, value) in attrs {
        item.insert((*name).to_owned(), value.clone());
    }
    item
}

/// The stored form of link `i`'s expiry: expired links (i < 100) one
/// minute apart before `now`, valid ones spread over the next 24 h, both in
/// every form the service's data holds.
fn expiry(i: usize) -> String {
    let at = if i < EXPIRED {
        now() - TimeDelta::minutes(i as i64 + 1) - TimeDelta::milliseconds(123)
    } else {
        now() + TimeDelta::seconds(86_400 * (i - EXPIRED + 1) as i64 / (LINKS - EXPIRED) as i64)
    };
    let base = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    match i % 5 {
        0 => datetime::format(at),
        1 => format!("{base}Z"),
        2 => base,
        3 => format!("{base}.1"),
        _ => format!("{base}.123456789"),
    }
}

fn food(n: usize) -> AttributeValue {
    AttributeValue::M(
        [
            ("FoodId", s(FoodId(id(5, n)).to_string())),
            ("Name", s("Milk")),
            ("Unit", AttributeValue::Null(true)),
            ("Quantity", AttributeValue::N("1".into())),
            ("Category", s("dairy")),
            ("Expiry", s("2024-04-01T00:00:00.000Z")),
            ("CreatedAt", s("2024-03-01T00:00:00.000Z")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    )
}

/// `size` items: 1,000 groups with their invitation link, then the rest of
/// a realistic table (users, memberships, containers with foods, container
/// links, more groups).
fn items(size: usize) -> Vec<Item> {
    let mut out = Vec::with_capacity(size);
    for i in 0..LINKS {
        let g = GroupId(id(1, i));
        out.push(with(ItemKey::Group(g), &[("GroupName", s("Home"))]));
        out.push(with(
            ItemKey::InvitationLink(g),
            &[
                (
                    attr::INVITATION_LINK_HASH,
                    s(format!("{:032x}", id(9, i).as_u128())),
                ),
                (attr::LINK_EXPIRY_DATETIME, s(expiry(i))),
            ],
        ));
    }
    let mut n = 0;
    while out.len() < size {
        let g = GroupId(id(1, n % LINKS));
        let item = match n % 5 {
            0 => with(
                ItemKey::User(UserId(id(2, n))),
                &[
                    ("UserName", s("user")),
                    (attr::EMAIL_ADDRESS, s(format!("u{n}@example.invalid"))),
                ],
            ),
            1 => with(
                ItemKey::Membership {
                    user: UserId(id(2, n - 1)),
                    group: g,
                },
                &[(attr::GROUP_ID, s(g.to_string()))],
            ),
            2 => with(
                ItemKey::ContainerLink {
                    group: g,
                    container: ContainerId(id(3, n)),
                },
                &[(attr::CONTAINER_ID, s(ContainerId(id(3, n)).to_string()))],
            ),
            3 => with(
                ItemKey::Container(ContainerId(id(3, n - 1))),
                &[
                    ("ContainerName", s("Fridge")),
                    (
                        "Foods",
                        AttributeValue::L((0..3).map(|f| food(n * 3 + f)).collect()),
                    ),
                ],
            ),
            _ => with(
                ItemKey::Group(GroupId(id(4, n))),
                &[("GroupName", s("Other"))],
            ),
        };
        out.push(item);
        n += 1;
    }
    out
}

/// Remove the `InvitationLinkExpiry` index (UpdateTable) and wait until it
/// is gone: the table as it is before the worker's migration.
async fn drop_expiry_index(table: &TestTable) {
    use aws_sdk_dynamodb::types::{DeleteGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
    let client = table.store.client();
    client
        .update_table()
        .table_name(&table.name)
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .delete(
                    DeleteGlobalSecondaryIndexAction::builder()
                        .index_name(INVITATION_EXPIRY_INDEX)
                        .build()
                        .expect("index name is set"),
                )
                .build(),
        )
        .send()
        .await
        .expect("drop the index");
    for _ in 0..600 {
        let d = client
            .describe_table()
            .table_name(&table.name)
            .send()
            .await
            .expect("describe table");
        let present = d.table().is_some_and(|t| {
            t.global_secondary_indexes()
                .iter()
                .any(|i| i.index_name() == Some(INVITATION_EXPIRY_INDEX))
        });
        if !present {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("index {INVITATION_EXPIRY_INDEX} still present after 60 s");
}

struct Measured {
    report: SweepReport,
    metrics_read: f64,
    metrics_write: f64,
    requests: u64,
    wall: Duration,
}

async fn sweep(store: &Arc<DynamoStore>) -> Measured {
    let job = SweepInvitations::with_store(store.clone());
    let run = JobRun {
        now: now(),
        tick: Tick {
            job: Job::SweepInvitations,
            scheduled_time: Some(now()),
            source: TickSource::Manual,
        },
        deadline: None,
        margin: Duration::ZERO,
    };
    let before = store.metrics().snapshot();
    let started = Instant::now();
    let report = job.sweep(&run).await.expect("sweep");
    let wall = started.elapsed();
    let d = store.metrics().snapshot().since(&before);
    Measured {
        report,
        metrics_read: d.read_capacity,
        metrics_write: d.write_capacity,
        requests: d.requests(),
        wall,
    }
}

fn row(size: usize, how: &str, m: &Measured) {
    let r = &m.report;
    println!(
        "{size:>8} {how:<6} {:>9.1} {:>9.1} {:>6} {:>9} {:>8} {:>8} {:>9.1} {:>10.1}",
        r.consumed_read_capacity,
        m.metrics_read,
        r.pages,
        r.expired_found,
        r.deleted,
        m.requests,
        m.metrics_write,
        m.wall.as_secs_f64() * 1000.0,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let plot_sizes = capacity::sizes_arg();
    let sizes: Vec<usize> = plot_sizes
        .clone()
        .or_else(|| {
            std::env::var("BENCH_SIZES").ok().map(|v| {
                v.split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .expect("BENCH_SIZES: comma-separated sizes")
                    })
                    .collect()
            })
        })
        .unwrap_or_else(|| vec![10_000, 100_000]);
    assert!(
        sizes.iter().all(|&n| n >= 2 * LINKS),
        "sizes must be at least {} items",
        2 * LINKS
    );

    println!("invitation sweep: {LINKS} links, {EXPIRED} expired, per table (DynamoDB Local)");
    let mut results = Vec::new();
    for &size in &sizes {
        let (_local, table) = TestTable::on_own_local(
            format!("sweep-bench-{size}"),
            &nishiki_worker::schema::nishiki(),
        )
        .await;
        let started = Instant::now();
        let seeded = items(size);
        let expired_links: Vec<Item> = seeded
            .iter()
            .filter(|i| {
                matches!(i.get(attr::LINK_EXPIRY_DATETIME),
                    Some(AttributeValue::S(e)) if datetime::parse(e).is_ok_and(|at| at < now()))
            })
            .cloned()
            .collect();
        assert_eq!(expired_links.len(), EXPIRED);
        support::seed_concurrently(&table.store, seeded, SEED_TASKS).await;
        eprintln!(
            "seeded {size} items in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let idx = sweep(&table.store).await;

        // The same table before the migration: drop the index, put the
        // same expired links back, sweep again (fallback Scan).
        drop_expiry_index(&table).await;
        support::seed_concurrently(&table.store, expired_links, SEED_TASKS).await;
        let scan = sweep(&table.store).await;
        for (m, used_index) in [(&idx, true), (&scan, false)] {
            assert_eq!(m.report.used_index, used_index);
            assert!(m.report.complete);
            assert_eq!(m.report.expired_found, EXPIRED as u64, "{:?}", m.report);
            assert_eq!(m.report.deleted, EXPIRED as u64, "{:?}", m.report);
        }
        let left = table.snapshot().await.len();
        assert_eq!(left, size - EXPIRED, "exactly the expired links are gone");
        results.push((size, idx, scan));
    }

    println!();
    println!(
        "{:>8} {:<6} {:>9} {:>9} {:>6} {:>9} {:>8} {:>8} {:>9} {:>10}",
        "items",
        "path",
        "RCU",
        "RCU(m)",
        "pages",
        "expired",
        "deleted",
        "requests",
        "WCU(m)",
        "wall ms"
    );
    for (size, idx, scan) in &results {
        row(*size, "index", idx);
        row(*size, "scan", scan);
    }
    println!(
        "RCU = report.consumed_read_capacity (Query/Scan pages); (m) = DynamoStore::metrics()"
    );

    if plot_sizes.is_some() {
        let mut points = Vec::new();
        for (size, idx, scan) in &results {
            for (series, m) in [
                ("sweep, index (Query)", idx),
                ("sweep, fallback Scan", scan),
            ] {
                points.push(capacity::Point {
                    series: series.into(),
                    items: *size as u64,
                    rcu: m.report.consumed_read_capacity,
                });
            }
        }
        capacity::record(
            "sweep",
            &points,
            "one run per size; each job run once on a fresh DynamoDB Local; see BENCHMARKS.md",
        );
    }

    if let [(_, small, _), (big_size, big, big_scan)] = results.as_slice() {
        let growth = big.report.consumed_read_capacity / small.report.consumed_read_capacity;
        let below = big_scan.report.consumed_read_capacity / big.report.consumed_read_capacity;
        println!();
        println!(
            "index RCU growth {}/{}: {growth:.3} (bound <= 1.1): {}",
            big_size,
            results[0].0,
            if growth <= 1.1 { "ok" } else { "FAILED" }
        );
        println!(
            "scan / index RCU at {big_size}: {below:.1}x (bound >= 50): {}",
            if below >= 50.0 { "ok" } else { "FAILED" }
        );
        assert!(growth <= 1.1 && below >= 50.0, "bounds not met");
    }
}
