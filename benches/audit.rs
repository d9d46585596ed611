//! Load driver for the relationship audit on DynamoDB Local.
//!
//! Seeds tables of realistic shape (sign-up families: user, group,
//! membership, container with foods, link; invitations on half the groups;
//! a second member on a third of them) with a known number of drift cases,
//! then runs the audit twice: detect (records suspects) and, 25 h later on
//! the injected clock, re-check and repair. Prints, per run: wall time,
//! pages, items scanned, consumed read capacity, GetItem/Query counts,
//! write requests (items) and BatchWriteItem/DeleteItem calls, and the
//! found / new / repaired counts per violation kind.
//!
//! `cargo bench --bench audit` (sizes 10000 and 100000), or
//! `cargo bench --bench audit -- 20000` for other sizes.

#[path = "../tests/it/service.rs"]
mod service;
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use nishiki_worker::config::Config;
use nishiki_worker::items::Item;
use nishiki_worker::jobs::JobDeps;
use nishiki_worker::jobs::relationships::{AuditJob, AuditReport};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, Job, UserId};
use service::*;
use support::TestTable;
use worker_engine::RecordingPublisher;
use worker_engine::schedule::{JobRun, Tick, TickSource};
use worker_engine::store::{BatchWriter, Store, WriteOp};

/// One family in this many carries a drift case (cycling through 7 kinds).
const DRIFT_EVERY: usize = 100;

fn t0() -> DateTime<Utc> {
    "2024-03-25T00:00:00Z".parse().unwrap()
}

/// The items of family `i`, and the violations it carries.
fn family(i: usize) -> (Vec<Item>, Vec<&'static str>) {
    let (u, g, c) = (UserId::random(), GroupId::random(), ContainerId::random());
    let mut items = vec![
        user(u),
        group(g),
        membership(u, g),
        container(c, 5),
        link(g, c),
    ];
    if i.is_multiple_of(2) {
        items.push(invitation(g, &new_hash(), t0()));
    }
    if i.is_multiple_of(3) {
        let u2 = UserId::random();
        items.extend([user(u2), membership(u2, g)]);
    }
    if !i.is_multiple_of(DRIFT_EVERY) {
        return (items, vec![]);
    }
    let key = |item: &Item| ItemKey::from_attributes(item).unwrap();
    let drift = match (i / DRIFT_EVERY) % 7 {
        0 => {
            // Deleted group: group, container, invitation gone.
            items.retain(|it| {
                !matches!(
                    key(it),
                    ItemKey::Group(_) | ItemKey::Container(_) | ItemKey::InvitationLink(_)
                )
            });
            let members = items
                .iter()
                .filter(|it| matches!(key(it), ItemKey::Membership { .. }))
                .count();
            let mut v = vec!["LinkWithoutGroup"];
            v.extend(std::iter::repeat_n("MembershipWithoutGroup", members));
            v
        }
        1 => {
            // Deleted user who shared the group with a live member.
            let u2 = UserId::random();
            items.push(membership(u2, g));
            vec!["MembershipWithoutUser"]
        }
        2 => {
            items.push(link(g, ContainerId::random()));
            vec!["LinkWithoutContainer"]
        }
        3 => {
            items.push(container(ContainerId::random(), 5));
            vec!["OrphanContainer"]
        }
        4 => {
            // Every member left.
            items.retain(|it| !matches!(key(it), ItemKey::Membership { .. }));
            vec!["EmptyGroup"]
        }
        5 => {
            items.push(invitation(GroupId::random(), &new_hash(), t0()));
            vec!["InvitationWithoutGroup"]
        }
        _ => {
            items.push(flag(g, ContainerId::random(), FoodId::random()));
            vec!["OrphanWorkerItem"]
        }
    };
    (items, drift)
}

async fn seed(table: &TestTable, target: usize) -> (usize, BTreeMap<&'static str, u64>) {
    let mut items = Vec::with_capacity(target + 16);
    let mut expected: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut i = 0;
    while items.len() < target {
        let (its, drift) = family(i);
        items.extend(its);
        for d in drift {
            *expected.entry(d).or_default() += 1;
        }
        i += 1;
    }
    let n = items.len();
    let chunks: Vec<Vec<WriteOp>> = items
        .chunks(500)
        .map(|c| c.iter().cloned().map(WriteOp::Put).collect())
        .collect();
    futures::stream::iter(chunks)
        .for_each_concurrent(8, |ops| {
            let store = table.store.clone();
            async move {
                store.batch_write(ops).await.expect("seed");
            }
        })
        .await;
    (n, expected)
}

fn run_at(now: DateTime<Utc>) -> JobRun<Job> {
    JobRun {
        now,
        tick: Tick {
            job: Job::Audit,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline: None,
        margin: std::time::Duration::from_secs(2),
    }
}

async fn audit(table: &TestTable, job: &AuditJob, label: &str, now: DateTime<Utc>) -> AuditReport {
    let before = table.store.metrics().snapshot();
    let started = Instant::now();
    let r = job.audit(&run_at(now)).await.expect("audit");
    let wall = started.elapsed();
    let m = table.store.metrics().snapshot().since(&before);
    println!("  {label}:");
    println!(
        "    wall {:.2} s | pages {} | items scanned {} | read capacity {:.1} RCU (scan+query pages), store total {:.1} RCU",
        wall.as_secs_f64(),
        r.pages,
        r.items_scanned,
        r.read_capacity,
        m.read_capacity
    );
    println!(
        "    requests: scan {} query {} get {} | writes: {} items ({} repairs, {} bookkeeping) in {} BatchWriteItem + {} DeleteItem + {} PutItem calls, {:.1} WCU",
        m.scan,
        m.query,
        m.get_item,
        r.write_requests,
        r.repair_writes,
        r.bookkeeping_writes,
        m.batch_write_item,
        m.delete_item,
        m.put_item,
        m.write_capacity
    );
    for (kind, c) in &r.violations {
        if c.found + c.new_suspects + c.repaired + c.healed + c.still_suspect + c.reported > 0 {
            println!(
                "    {kind:<24} found {:>5} new {:>5} repaired {:>5} healed {:>3} still {:>5} reported {:>3}",
                c.found, c.new_suspects, c.repaired, c.healed, c.still_suspect, c.reported
            );
        }
    }
    r
}

async fn bench(target: usize) {
    // No stream: the audit does not read it, and DynamoDB Local slows down
    // badly when 100,000 writes also fill a stream.
    let schema = nishiki_worker::schema::nishiki().without_stream();
    let table = TestTable::with_schema(&schema).await;
    let started = Instant::now();
    let (n, expected) = seed(&table, target).await;
    println!(
        "\n{n} items seeded in {:.1} s; drift cases: {expected:?}",
        started.elapsed().as_secs_f64()
    );
    let store: Arc<dyn Store> = table.store.clone();
    let deps = JobDeps::new(
        store,
        Config::for_table(&table.name),
        Arc::new(RecordingPublisher::default()),
    );
    let job = AuditJob::new(&deps);
    let r1 = audit(&table, &job, "audit 1 (detect)", t0()).await;
    for (kind, n) in &expected {
        assert_eq!(r1.violations[*kind].found, *n, "{kind}");
    }
    let r2 = audit(
        &table,
        &job,
        "audit 2 (+25 h: re-check and repair)",
        t0() + chrono::Duration::hours(25),
    )
    .await;
    let repaired: u64 = r2.violations.values().map(|c| c.repaired).sum();
    let found: u64 = expected.values().sum();
    assert_eq!(repaired, found, "every drift case repaired");
    let r3 = audit(
        &table,
        &job,
        "audit 3 (+49 h: converged)",
        t0() + chrono::Duration::hours(49),
    )
    .await;
    assert_eq!(r3.violations.values().map(|c| c.found).sum::<u64>(), 0);
    assert_eq!(r3.write_requests, 0);
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000]
    } else {
        sizes
    };
    println!("relationship audit on DynamoDB Local (4 segments, 1 MB pages)");
    for size in sizes {
        bench(size).await;
    }
}
