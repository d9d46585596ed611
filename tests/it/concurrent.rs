//! The worker beside a service that writes at the same time, on DynamoDB
//! Local: a seeded model of the Nishiki service runs several requests at
//! once (with bursts that conflict on purpose: a group deleted while a
//! container is added to it, which puts the Group item again; a user
//! deleted while renamed; a container deleted while rewritten from a copy
//! read before), while the worker follows the stream in real time, its
//! batches split by partition key into `factor` concurrent streams as a
//! `ParallelizationFactor` does. Then the stream is drained, the audit runs
//! across its grace periods, and:
//!
//! - **no live data deleted**: every delete the worker landed is checked
//!   against the service's own log of writes: a membership, link or
//!   container is never deleted while the service's writes say it and the
//!   parents it depends on were live for the whole time the delete was in
//!   flight;
//! - **the invariants the job documents** hold at the end (memberships,
//!   links, invitations and flags only under live parents; every container
//!   linked from a live group; no group without a member).
//!
//! Seed 0 at factors 1 and 10 in `scripts/test`; the soak, in the long run,
//! runs seeds 1..n at both factors (`SOAK_SEEDS=<n>`, 3 by default:
//! `SOAK_SEEDS=50 cargo test --test it concurrent:: -- --include-ignored
//! --nocapture` prints each run's counts).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::{
    Container, ContainerLink, Entity, Food, Group, Item, Membership, User,
};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, Job, UserId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::Drain;
use worker_engine::EventFunction;
use worker_engine::store::{GuardedOp, Key, Store, WriteOutcome};
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};
use worker_testkit::written::{Kind, Landed, definitely_live};
use worker_toolkit::layers::{Answer, Call, RecordingStore};

fn t0() -> DateTime<Utc> {
    "2024-03-25T09:00:00Z".parse().unwrap()
}

// ---------------------------------------------------------------------------
// The service's log and the worker's deletes, on one clock
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Write {
    key: ItemKey,
    kind: Kind,
    start: Instant,
    end: Instant,
}

impl Landed for Write {
    fn span(&self) -> (Kind, Instant, Instant) {
        (self.kind, self.start, self.end)
    }
}

/// The service's writes, logged as made, and the worker's deletes that
/// landed (read off its recorded calls once the run is over).
#[derive(Default)]
struct Log {
    service: Mutex<Vec<Write>>,
    worker: Mutex<Vec<Write>>,
}

impl Log {
    /// Whether the writes say `key` was live for the whole of `[start,
    /// end]`: its last write completed before `start` is a Put, and no
    /// Delete of it was in flight or made between that Put and `end`. The
    /// writes are the service's and the worker's own deletes (a group the
    /// audit deleted as empty is not live after; that delete is checked on
    /// its own).
    fn definitely_live(&self, key: &ItemKey, start: Instant, end: Instant) -> bool {
        let service = self.service.lock().unwrap();
        let worker = self.worker.lock().unwrap();
        let writes: Vec<&Write> = service
            .iter()
            .chain(worker.iter())
            .filter(|w| &w.key == key)
            .collect();
        definitely_live(&writes, start, end)
    }
}

fn key_of(k: &Key) -> Option<ItemKey> {
    ItemKey::from_attributes(k).ok()
}

/// The deletes of a worker's call that landed, with the time it was in
/// flight (a guarded write's applied deletes are its first ones).
fn deletes_landed(call: &Call) -> Vec<Write> {
    let deletes: Vec<ItemKey> = call
        .asked
        .ops()
        .iter()
        .filter_map(|op| match op {
            GuardedOp::Delete { key, .. } => key_of(key),
            _ => None,
        })
        .collect();
    let landed = match &call.answer {
        Ok(Answer::Written(WriteOutcome::Applied) | Answer::Batch(_)) => deletes.len(),
        // A guarded write's deletes land in order; the ops planned
        // before the first that did not are the applied ones (ops with
        // their own condition may have been refused: counted as landed,
        // which only makes the check stricter).
        Ok(Answer::Guarded(r)) => (r.applied + r.refused).min(deletes.len()),
        _ => 0,
    };
    deletes
        .into_iter()
        .take(landed)
        .map(|key| Write {
            key,
            kind: Kind::Delete,
            start: call.sent,
            end: call.answered,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The service model
// ---------------------------------------------------------------------------

struct Service {
    store: Arc<dyn Store>,
    log: Arc<Log>,
}

impl Service {
    async fn write(&self, calls: Vec<(ItemKey, Option<Item>)>) {
        // The service's calls of one request go in parallel, unordered.
        let writes = calls.into_iter().map(|(key, item)| async move {
            let start = Instant::now();
            let kind = match item {
                Some(item) => {
                    self.store.put(item, None).await.expect("service put");
                    Kind::Put
                }
                None => {
                    self.store
                        .delete(&key.to_attributes(), None)
                        .await
                        .expect("service delete");
                    Kind::Delete
                }
            };
            self.log.service.lock().unwrap().push(Write {
                key,
                kind,
                start,
                end: Instant::now(),
            });
        });
        futures::future::join_all(writes).await;
    }
}

fn put(e: Entity) -> (ItemKey, Option<Item>) {
    (e.key(), Some(e.to_item()))
}

fn del(k: ItemKey) -> (ItemKey, Option<Item>) {
    (k, None)
}

fn user(id: UserId) -> Entity {
    Entity::User(User {
        id,
        user_name: "Member".into(),
        email_address: format!("{id}@example.com"),
        extra: Item::new(),
    })
}

fn group(id: GroupId) -> Entity {
    Entity::Group(Group {
        id,
        group_name: "Home".into(),
        extra: Item::new(),
    })
}

fn membership(user: UserId, group: GroupId) -> Entity {
    Entity::Membership(Membership {
        user,
        group,
        extra: Item::new(),
    })
}

fn link(group: GroupId, container: ContainerId) -> Entity {
    Entity::ContainerLink(ContainerLink {
        group,
        container,
        extra: Item::new(),
    })
}

fn container(id: ContainerId, rng: &mut StdRng) -> Entity {
    let foods = (0..rng.random_range(0..4))
        .map(|i| Food {
            food_id: FoodId::random(),
            name: format!("Food {i}"),
            unit: None,
            quantity: Some(1.0),
            category: Some("unselected".into()),
            expiry: Some(t0() + chrono::Duration::hours(rng.random_range(-48..240))),
            created_at: t0(),
        })
        .collect();
    Entity::Container(Container {
        id,
        container_name: "Fridge".into(),
        foods,
        extra: Item::new(),
    })
}

/// One household the service works on: its users, groups and containers.
#[derive(Default, Clone)]
struct Household {
    users: Vec<UserId>,
    groups: Vec<(GroupId, Vec<ContainerId>)>,
}

/// One task of the service: `ops` requests on its own households, some of
/// them in conflicting pairs run at once.
async fn service_task(service: Arc<Service>, seed: u64, ops: usize) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut homes: Vec<Household> = Vec::new();
    let mut done = 0;
    for _ in 0..ops {
        if homes.is_empty() || rng.random_bool(0.2) {
            // Sign up: a user, their group, a container.
            let (u, g, c) = (UserId::random(), GroupId::random(), ContainerId::random());
            service
                .write(vec![
                    put(user(u)),
                    put(group(g)),
                    put(membership(u, g)),
                    put(container(c, &mut rng)),
                    put(link(g, c)),
                ])
                .await;
            homes.push(Household {
                users: vec![u],
                groups: vec![(g, vec![c])],
            });
            done += 1;
            continue;
        }
        let h = rng.random_range(0..homes.len());
        let home = homes[h].clone();
        let Some(&(g, ref cs)) = home.groups.first() else {
            homes.swap_remove(h);
            continue;
        };
        let u = home.users[0];
        match rng.random_range(0..7) {
            0 => {
                // Someone joins.
                let v = UserId::random();
                service
                    .write(vec![put(user(v)), put(membership(v, g))])
                    .await;
                homes[h].users.push(v);
            }
            1 => {
                // A container added (the service puts the Group item again).
                let c = ContainerId::random();
                service
                    .write(vec![
                        put(container(c, &mut rng)),
                        put(link(g, c)),
                        put(group(g)),
                    ])
                    .await;
                homes[h].groups[0].1.push(c);
            }
            2 if !cs.is_empty() => {
                // A container's foods changed: a whole rewrite.
                let c = cs[rng.random_range(0..cs.len())];
                service.write(vec![put(container(c, &mut rng))]).await;
            }
            3 => {
                // Burst: the group deleted (its containers, then the Group
                // item; memberships and links left behind, as the service
                // does) while a container is added to it.
                let c = ContainerId::random();
                let mut deletion: Vec<_> = cs.iter().map(|c| del(ItemKey::Container(*c))).collect();
                deletion.push(del(ItemKey::Group(g)));
                let added = vec![put(container(c, &mut rng)), put(link(g, c)), put(group(g))];
                futures::join!(service.write(deletion), service.write(added));
                homes.swap_remove(h);
                done += 1;
            }
            4 => {
                // Burst: the user deleted while renamed.
                futures::join!(
                    service.write(vec![del(ItemKey::User(u))]),
                    service.write(vec![put(user(u))])
                );
                homes.swap_remove(h);
                done += 1;
            }
            5 if !cs.is_empty() => {
                // Burst: a container deleted (item, then its link) while a
                // copy read before is written back.
                let c = cs[rng.random_range(0..cs.len())];
                let stale = container(c, &mut rng);
                futures::join!(
                    service.write(vec![
                        del(ItemKey::Container(c)),
                        del(ItemKey::ContainerLink {
                            group: g,
                            container: c
                        })
                    ]),
                    service.write(vec![put(stale)])
                );
                homes[h].groups[0].1.retain(|x| *x != c);
                done += 1;
            }
            _ => {
                // The last member leaves: an empty group for the audit.
                service
                    .write(vec![del(ItemKey::Membership { user: u, group: g })])
                    .await;
                homes.swap_remove(h);
            }
        }
        done += 1;
    }
    done
}

// ---------------------------------------------------------------------------
// The worker following the stream, `factor` batches of a shard at once
// ---------------------------------------------------------------------------

/// Run one batch like Lambda: retried from the first failed record.
async fn run_batch(app: &App, batch: Vec<StreamChange>) -> usize {
    let mut pending = batch;
    for _ in 0..10 {
        let report = app
            .invoke_stream(&encode_event(&pending, None))
            .await
            .expect("stream invocation");
        assert_eq!(report.failed, 0, "no record fails for good: {report:?}");
        assert_eq!(report.malformed + report.rejected, 0, "{report:?}");
        let Some(first) = report.batch_item_failures.first() else {
            return pending.len();
        };
        let first: SequenceNumber = first.parse().unwrap();
        pending.retain(|c| c.sequence_number.as_ref().is_some_and(|s| *s >= first));
    }
    panic!("a batch kept failing");
}

async fn follow(app: &App, drain: &mut Drain, factor: usize) -> usize {
    let records = drain.read().await;
    let mut n = 0;
    for chunk in records.chunks(100) {
        // Lanes by partition key, at most `factor` at once (how a
        // ParallelizationFactor spreads one shard), order kept per key.
        let lanes = worker_testkit::parallel::lanes(chunk.to_vec(), Some("PK"), factor);
        let lanes = lanes.into_iter().filter(|l| !l.is_empty());
        n += futures::future::join_all(lanes.map(|b| run_batch(app, b)))
            .await
            .into_iter()
            .sum::<usize>();
    }
    n
}

// ---------------------------------------------------------------------------
// The run and its checks
// ---------------------------------------------------------------------------

struct Run {
    service_requests: usize,
    service_writes: usize,
    records: usize,
    worker_deletes: usize,
}

async fn run(seed: u64, factor: usize) -> Run {
    let table = support::nishiki_table().await;
    let log = Arc::new(Log::default());
    let service = Arc::new(Service {
        store: table.store.clone(),
        log: log.clone(),
    });
    let recording = Arc::new(RecordingStore::new(table.store.clone()));
    let clock = ManualClock::new(t0());
    let app = App::new(
        recording.clone(),
        Config::for_table(&table.name),
        Arc::new(clock.clone()),
    );
    let mut drain = Drain::new(&table).await;

    // 8 service tasks in flight while the worker follows the stream.
    let tasks: Vec<_> = (0..8)
        .map(|i| tokio::spawn(service_task(service.clone(), seed * 100 + i, 12)))
        .collect();
    let mut records = 0;
    let service_done = futures::future::join_all(tasks);
    tokio::pin!(service_done);
    let requests = loop {
        tokio::select! {
            done = &mut service_done => break done.into_iter().map(|r| r.unwrap()).sum::<usize>(),
            n = follow(&app, &mut drain, factor) => records += n,
        }
    };
    // Drain to quiet (the worker's own writes make records too).
    loop {
        let n = follow(&app, &mut drain, factor).await;
        records += n;
        if n == 0 {
            break;
        }
    }
    // The audit, across its grace periods (a day for empty groups), with
    // the stream drained after each tick.
    for hours in [0, 2, 26, 50] {
        clock.set(t0() + chrono::Duration::hours(hours));
        let report = app.run_job(Job::Audit, None).await.expect("audit");
        assert!(report.complete, "{report:?}");
        loop {
            let n = follow(&app, &mut drain, factor).await;
            records += n;
            if n == 0 {
                break;
            }
        }
    }

    // No live data deleted.
    let calls = recording.take();
    log.worker
        .lock()
        .unwrap()
        .extend(calls.iter().flat_map(deletes_landed));
    let worker = log.worker.lock().unwrap().clone();
    for w in &worker {
        let live = |k: &ItemKey| log.definitely_live(k, w.start, w.end);
        let wrong = match &w.key {
            ItemKey::Membership { user, group } => {
                live(&w.key) && live(&ItemKey::User(*user)) && live(&ItemKey::Group(*group))
            }
            ItemKey::ContainerLink { group, container } => {
                live(&w.key)
                    && live(&ItemKey::Group(*group))
                    && live(&ItemKey::Container(*container))
            }
            ItemKey::Group(g) => {
                // Deleted as empty: never while a member and their user
                // were live.
                let memberships: Vec<ItemKey> = log
                    .service
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| matches!(s.key, ItemKey::Membership { group, .. } if group == *g))
                    .map(|s| s.key.clone())
                    .collect();
                live(&w.key)
                    && memberships.iter().any(|m| {
                        let ItemKey::Membership { user, .. } = m else {
                            unreachable!()
                        };
                        live(m) && live(&ItemKey::User(*user))
                    })
            }
            ItemKey::Container(_) | ItemKey::User(_) => {
                // The worker deletes a Group only when empty, a Container
                // only unlinked: a live link from a live group forbids it.
                let links: Vec<ItemKey> = log
                    .service
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| match (&s.key, &w.key) {
                        (ItemKey::ContainerLink { container, .. }, ItemKey::Container(c)) => {
                            container == c
                        }
                        _ => false,
                    })
                    .map(|s| s.key.clone())
                    .collect();
                links.iter().any(|l| {
                    let ItemKey::ContainerLink { group, .. } = l else {
                        unreachable!()
                    };
                    live(l) && live(&ItemKey::Group(*group))
                }) && matches!(w.key, ItemKey::Container(_))
                    && live(&w.key)
            }
            _ => false,
        };
        assert!(
            !wrong,
            "seed {seed}, factor {factor}: the worker deleted live {:?}",
            w.key
        );
    }

    // The invariants, at the end.
    let keys: BTreeSet<ItemKey> = table
        .keys()
        .await
        .iter()
        .filter_map(|(pk, sk)| ItemKey::decode(pk, sk).ok())
        .collect();
    let has = |k: ItemKey| keys.contains(&k);
    let mut members: BTreeMap<GroupId, usize> = BTreeMap::new();
    let mut linked: BTreeSet<ContainerId> = BTreeSet::new();
    for k in &keys {
        match *k {
            ItemKey::Membership { user, group } => {
                assert!(
                    has(ItemKey::User(user)) && has(ItemKey::Group(group)),
                    "{k:?}"
                );
                *members.entry(group).or_default() += 1;
            }
            ItemKey::ContainerLink { group, container } => {
                assert!(has(ItemKey::Group(group)), "{k:?}");
                assert!(has(ItemKey::Container(container)), "{k:?}");
                linked.insert(container);
            }
            ItemKey::InvitationLink(group) => assert!(has(ItemKey::Group(group)), "{k:?}"),
            ItemKey::ExpiringFood {
                group, container, ..
            } => {
                assert!(has(ItemKey::Group(group)), "{k:?}");
                assert!(
                    has(ItemKey::ContainerLink { group, container }),
                    "a flag only where its container is linked: {k:?}"
                );
            }
            _ => {}
        }
    }
    for k in &keys {
        match *k {
            ItemKey::Container(c) => assert!(linked.contains(&c), "unlinked {k:?}"),
            ItemKey::Group(g) => assert!(members.contains_key(&g), "empty {k:?}"),
            _ => {}
        }
    }
    Run {
        service_requests: requests,
        service_writes: log.service.lock().unwrap().len(),
        records,
        worker_deletes: worker.len(),
    }
}

async fn seeds(seeds: std::ops::Range<u64>) {
    for factor in [1, 10] {
        for seed in seeds.clone() {
            let r = run(seed, factor).await;
            println!(
                "seed {seed} factor {factor}: {} service requests, {} service writes, \
                 {} stream records, {} worker deletes",
                r.service_requests, r.service_writes, r.records, r.worker_deletes
            );
            assert!(r.records > 0 && r.worker_deletes > 0);
        }
    }
}

/// Seed 0 in `scripts/test`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_never_deletes_live_data_beside_a_writing_service() {
    seeds(0..1).await;
}

/// The soak: seeds 1 to n-1 (`SOAK_SEEDS=<n>`, 3 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "soak: SOAK_SEEDS=N cargo test --test it concurrent:: -- --include-ignored"]
async fn soak() {
    let n = std::env::var("SOAK_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    seeds(1..n).await;
}
