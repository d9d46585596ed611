//! The workload generator against DynamoDB Local, and the bulk-delete bound
//! of the group cascade.
//!
//! - A generated population seeds a table and every item decodes and reads
//!   back identical; the generated service calls, applied the way the
//!   service does (operation after operation, the calls of one operation in
//!   parallel), succeed, and after draining the stream through the worker
//!   the relationship invariants the stream side guarantees hold: every
//!   membership has its user and group, every container link its group and
//!   container, every invitation link its group, every container a link.
//! - A group cascade deleting `n` items, each delete guarded by the group's
//!   absence, uses `ceil(n / 99)` TransactWriteItems requests plus one for
//!   the invitation, and its write capacity is measured beside the same
//!   deletes sent unguarded.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::support::workload::{self, ServiceCall, Workload, WorkloadSpec};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::{Entity, Item};
use nishiki_worker::jobs::relationships::cascade_group;
use nishiki_worker::keys::{ItemKey, ItemKind};
use support::{Drain, TestTable};
use worker_engine::store::{
    BatchWriter, DynamoStore, ItemWriter, Store, WriteOp, WriteOutcome, local_client,
};

async fn seed(store: &DynamoStore, items: &[Item]) {
    let ops = items.iter().cloned().map(WriteOp::Put).collect();
    store.batch_write(ops).await.expect("seed");
}

async fn apply(store: &Arc<DynamoStore>, w: &Workload) {
    for op in &w.operations {
        let calls = w.calls_of(op).iter().map(|c| {
            let store = store.clone();
            async move {
                let out = match c {
                    ServiceCall::Put(item) => store.put(item.clone(), None).await,
                    ServiceCall::Delete(key) => store.delete(&key.to_attributes(), None).await,
                };
                assert_eq!(out.expect("service write"), WriteOutcome::Applied);
            }
        });
        futures::future::join_all(calls).await;
    }
}

fn keyed(items: &[Item]) -> BTreeMap<ItemKey, Item> {
    items
        .iter()
        .map(|i| (ItemKey::from_attributes(i).expect("key"), i.clone()))
        .collect()
}

#[tokio::test]
async fn population_seeds_and_reads_back_identical() {
    let table = support::nishiki_table().await;
    let w = workload::generate(&WorkloadSpec::small(11));
    seed(&table.store, &w.population).await;
    let read = keyed(&table.snapshot().await);
    assert_eq!(read, keyed(&w.population));
    for item in read.into_values() {
        Entity::from_item(item).expect("every item decodes");
    }
}

/// Applying a workload and draining the stream leaves no relationship drift
/// that the stream side repairs.
#[tokio::test]
async fn drained_workload_keeps_relationships_consistent() {
    for seed in [1u64, 2, 3] {
        let table = support::nishiki_table().await;
        let mut spec = WorkloadSpec::small(seed);
        spec.operations = 40;
        spec.leftover_rate = 0.5;
        let w = workload::generate(&spec);
        assert!(w.operations.iter().any(|o| o.leftover), "seed {seed}");
        seed_and_drain(&table, &w, &spec).await;

        let items = keyed(&table.snapshot().await);
        let has = |k: &ItemKey| items.contains_key(k);
        let mut linked = BTreeSet::new();
        for key in items.keys() {
            match key {
                ItemKey::Membership { user, group } => {
                    assert!(
                        has(&ItemKey::User(*user)),
                        "seed {seed}: {key:?} without user"
                    );
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    );
                }
                ItemKey::ContainerLink { group, container } => {
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    );
                    assert!(
                        has(&ItemKey::Container(*container)),
                        "seed {seed}: {key:?} without container"
                    );
                    linked.insert(*container);
                }
                ItemKey::InvitationLink(group) => {
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    )
                }
                _ => {}
            }
        }
        for key in items.keys() {
            if let ItemKey::Container(c) = key {
                assert!(
                    linked.contains(c),
                    "seed {seed}: container {c} without a link"
                );
            }
        }
        // The worker never deleted a live relationship: every membership
        // the service believes in (created in the population or by a Put,
        // not deleted by the service, its user and group live) is there.
        let service_view = service_view(&w);
        for key in &service_view {
            if let ItemKey::Membership { user, group } = key
                && service_view.contains(&ItemKey::User(*user))
                && service_view.contains(&ItemKey::Group(*group))
            {
                assert!(has(key), "seed {seed}: live membership {key:?} deleted");
            }
        }
    }
}

async fn seed_and_drain(table: &TestTable, w: &Workload, spec: &WorkloadSpec) {
    seed(&table.store, &w.population).await;
    let mut drain = Drain::new(table).await;
    drain.skip_existing().await;
    apply(&table.store, w).await;
    let store: Arc<dyn Store> = table.store.clone();
    let app = App::new(
        store,
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(spec.now)),
    );
    let handled = drain.run(&app).await;
    assert!(handled >= w.calls.len(), "every call makes a record");
    for b in &drain.batches {
        assert_eq!(b.failed + b.malformed, 0, "{b:?}");
        assert!(b.batch_item_failures.is_empty(), "{b:?}");
    }
}

/// The keys that exist after the calls if every write lands in call order
/// (the service's own view; renewals end with the link present or absent,
/// both are fine here).
fn service_view(w: &Workload) -> BTreeSet<ItemKey> {
    let mut keys: BTreeSet<ItemKey> = keyed(&w.population).into_keys().collect();
    for c in &w.calls {
        match c {
            ServiceCall::Put(_) => keys.insert(c.key()),
            ServiceCall::Delete(k) => keys.remove(k),
        };
    }
    keys
}

/// A group cascade deleting n >= 60 dependents, every delete guarded by the
/// group's absence: ceil(n / 99) TransactWriteItems requests for the
/// unconditional deletes plus one for the invitation (its own condition),
/// and what that costs beside the same deletes sent unguarded in
/// BatchWriteItem requests (the cascade before guards), on two tables
/// seeded alike. `cargo test --test it workload::group_cascade -- --nocapture`
/// prints both (BENCHMARKS.md quotes them).
#[tokio::test]
async fn group_cascade_guarded_deletes_and_their_cost() {
    let table = support::nishiki_table().await;
    let baseline = support::nishiki_table().await;
    let now = WorkloadSpec::small(0).now;
    let big = workload::big_group(99, 60, 4, now);
    assert!(big.dependents >= 60);
    for t in [&table, &baseline] {
        seed(&t.store, &big.items).await;
        t.store
            .delete(&ItemKey::Group(big.group).to_attributes(), None)
            .await
            .expect("delete the group");
    }

    // A store of its own: its metrics count only the cascade.
    let store = DynamoStore::new(local_client(&table.endpoint), &table.name);
    let report = cascade_group(&store, big.group).await.expect("cascade");
    let m = store.metrics().snapshot();
    let n = report.memberships + report.links + report.containers + report.invitations;
    assert_eq!(n, big.dependents, "{report:?}");
    assert_eq!(report.withheld, 0);
    assert_eq!(
        m.batch_write_item + m.delete_item + m.put_item + m.update_item,
        0,
        "every delete is guarded: {m:?}"
    );
    let bound = (n - report.invitations).div_ceil(99) + report.invitations;
    assert!(
        m.transact_write_items <= bound as u64,
        "{} TransactWriteItems for {n} deletes (bound {bound}): {report:?}",
        m.transact_write_items
    );

    // The same deletes, unguarded, as the cascade sent them before.
    let keys: Vec<WriteOp> = big
        .items
        .iter()
        .filter_map(|i| ItemKey::from_attributes(i).ok())
        .filter(|k| k.kind() != ItemKind::User && k.kind() != ItemKind::Group)
        .map(|k| WriteOp::Delete(k.to_attributes()))
        .collect();
    assert_eq!(keys.len(), n);
    let plain = DynamoStore::new(local_client(&baseline.endpoint), &baseline.name);
    plain.batch_write(keys).await.expect("baseline deletes");
    let b = plain.metrics().snapshot();
    println!(
        "group cascade of {n} deletes: guarded {} TransactWriteItems, {:.1} WCU; \
         unguarded {} BatchWriteItem, {:.1} WCU; ratio {:.2}x WCU, {:.2}x write requests",
        m.transact_write_items,
        m.write_capacity,
        b.batch_write_item,
        b.write_capacity,
        m.write_capacity / b.write_capacity.max(f64::MIN_POSITIVE),
        m.write_requests() as f64 / b.write_requests() as f64
    );
    // DynamoDB Local's figures, as reported (its transactional capacity is
    // not DynamoDB's: DynamoDB charges 2 WCU per transactional write of up
    // to 1 KB and 2 per check, BENCHMARKS.md gives both).
    assert!(
        b.write_capacity > 0.0 && m.write_capacity > 0.0,
        "{m:?} {b:?}"
    );

    // Nothing of the group is left; the users stay.
    let left = keyed(&table.snapshot().await);
    assert!(
        left.keys().all(|k| k.kind() == ItemKind::User),
        "{:?}",
        left.keys().collect::<Vec<_>>()
    );
    assert_eq!(left.len(), 60);
}

/// The generator's own properties (pure, no database).
mod generator {
    use crate::support::workload::*;
    use nishiki_worker::items::{Entity, Item};
    use nishiki_worker::keys::{ContainerId, GroupId, ItemKey};
    use std::collections::HashSet;
    use std::collections::{BTreeMap, BTreeSet};

    fn keys(items: &[Item]) -> Vec<ItemKey> {
        items
            .iter()
            .map(|i| ItemKey::from_attributes(i).expect("key"))
            .collect()
    }

    #[test]
    fn same_seed_same_workload_other_seed_other_ids() {
        let spec = WorkloadSpec::small(42);
        assert_eq!(generate(&spec), generate(&spec));
        let other = generate(&WorkloadSpec::small(43));
        let a: HashSet<ItemKey> = keys(&generate(&spec).population).into_iter().collect();
        assert!(
            keys(&other.population)
                .iter()
                .all(|k| !a.contains(k) || *k == ItemKey::Category)
        );
    }

    /// Population: unique keys, every item decodes, every relationship
    /// resolves, every group has a member, every container one link.
    #[test]
    fn population_is_consistent() {
        for seed in 0..50 {
            let mut spec = WorkloadSpec::small(seed);
            spec.users = 1 + (seed as usize % 7);
            let w = generate(&spec);
            let keys = keys(&w.population);
            let set: HashSet<&ItemKey> = keys.iter().collect();
            assert_eq!(set.len(), keys.len(), "duplicate keys");
            let mut members: BTreeMap<GroupId, usize> = BTreeMap::new();
            let mut links: BTreeMap<ContainerId, usize> = BTreeMap::new();
            let (mut users, mut groups, mut containers, mut invitations) = (0, 0, 0, 0);
            for item in &w.population {
                match Entity::from_item(item.clone()).expect("decodes") {
                    Entity::User(u) => {
                        users += 1;
                        assert!(u.email_address.ends_with("@example.invalid"));
                        assert!(u.user_name.starts_with("user-"));
                    }
                    Entity::Group(_) => groups += 1,
                    Entity::Membership(x) => {
                        assert!(set.contains(&ItemKey::User(x.user)));
                        assert!(set.contains(&ItemKey::Group(x.group)));
                        *members.entry(x.group).or_default() += 1;
                    }
                    Entity::ContainerLink(l) => {
                        assert!(set.contains(&ItemKey::Group(l.group)));
                        assert!(set.contains(&ItemKey::Container(l.container)));
                        *links.entry(l.container).or_default() += 1;
                    }
                    Entity::InvitationLink(l) => {
                        invitations += 1;
                        assert!(set.contains(&ItemKey::Group(l.group)));
                        assert_eq!(l.invitation_link_hash.len(), 32);
                    }
                    Entity::Container(c) => {
                        containers += 1;
                        assert_eq!(c.foods.len(), spec.foods_per_container);
                    }
                    other => panic!("unexpected {other:?}"),
                }
                // Round-trips exactly (canonical datetimes, NULLs).
                let e = Entity::from_item(item.clone()).unwrap();
                assert_eq!(&e.to_item(), item);
            }
            assert_eq!(users, spec.users);
            assert_eq!(groups, spec.groups);
            assert_eq!(members.len(), spec.groups, "every group has a member");
            assert_eq!(containers, spec.groups * spec.containers_per_group);
            assert_eq!(links.len(), containers);
            assert!(links.values().all(|n| *n == 1));
            assert_eq!(invitations, spec.invitations.min(spec.groups));
        }
    }

    #[test]
    fn some_foods_expire_near_now() {
        let spec = WorkloadSpec::sized(1, 200);
        let w = generate(&spec);
        let near = w
            .population
            .iter()
            .filter_map(|i| match Entity::from_item(i.clone()).unwrap() {
                Entity::Container(c) => Some(c.foods),
                _ => None,
            })
            .flatten()
            .filter(|f| {
                f.expiry
                    .is_some_and(|e| (e - spec.now).num_days().abs() <= 4)
            })
            .count();
        assert!(near > 0);
    }

    /// Every Delete targets a key that existed (population or an earlier
    /// Put); every relationship Put refers to items that existed; operation
    /// ranges cover the calls.
    #[test]
    fn calls_reference_existing_items() {
        for seed in 0..50 {
            let spec = WorkloadSpec::small(seed);
            let w = generate(&spec);
            assert_eq!(w.operations.len(), spec.operations);
            let mut next = 0;
            for op in &w.operations {
                assert_eq!(op.calls.start, next);
                assert!(!op.calls.is_empty());
                next = op.calls.end;
            }
            assert_eq!(next, w.calls.len());
            let mut existed: HashSet<ItemKey> = keys(&w.population).into_iter().collect();
            for op in &w.operations {
                let calls = w.calls_of(op);
                // Puts of the same operation come first: parents and children
                // are written together.
                for c in calls {
                    if let ServiceCall::Put(item) = c {
                        existed.insert(ItemKey::from_attributes(item).unwrap());
                    }
                }
                for c in calls {
                    match c {
                        ServiceCall::Delete(k) => {
                            assert!(existed.contains(k), "{op:?} deletes unknown {k:?}")
                        }
                        ServiceCall::Put(item) => {
                            match Entity::from_item(item.clone()).expect("decodes") {
                                Entity::Membership(x) => {
                                    assert!(existed.contains(&ItemKey::User(x.user)));
                                    assert!(existed.contains(&ItemKey::Group(x.group)));
                                }
                                Entity::ContainerLink(l) => {
                                    assert!(existed.contains(&ItemKey::Group(l.group)));
                                    assert!(existed.contains(&ItemKey::Container(l.container)));
                                }
                                Entity::InvitationLink(l) => {
                                    assert!(existed.contains(&ItemKey::Group(l.group)))
                                }
                                Entity::User(_) | Entity::Group(_) | Entity::Container(_) => {}
                                other => panic!("service never writes {other:?}"),
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn big_group_counts_its_dependents() {
        let b = big_group(5, 60, 4, default_now());
        assert_eq!(b, big_group(5, 60, 4, default_now()));
        let keys = keys(&b.items);
        let dependents = keys
            .iter()
            .filter(|k| match k {
                ItemKey::Membership { group, .. }
                | ItemKey::ContainerLink { group, .. }
                | ItemKey::InvitationLink(group) => *group == b.group,
                ItemKey::Container(_) => true,
                _ => false,
            })
            .count();
        assert_eq!(dependents, b.dependents);
        assert_eq!(b.dependents, 60 + 8 + 1);
    }

    #[test]
    fn leftovers_follow_the_rate() {
        let mut spec = WorkloadSpec::sized(3, 400);
        spec.leftover_rate = 0.0;
        assert!(generate(&spec).operations.iter().all(|o| !o.leftover));
        spec.leftover_rate = 1.0;
        let w = generate(&spec);
        assert!(w.operations.iter().any(|o| o.leftover));
        assert!(
            w.operations
                .iter()
                .filter(|o| o.leftover)
                .all(|o| o.kind != OpKind::RenewInvitation)
        );
        // A leftover container deletion keeps its Container delete (primary).
        for op in w
            .operations
            .iter()
            .filter(|o| o.kind == OpKind::DeleteContainer)
        {
            assert!(op.leftover);
            assert!(matches!(
                w.calls_of(op),
                [ServiceCall::Delete(ItemKey::Container(_))]
            ));
        }
        let kinds: BTreeSet<OpKind> = w.operations.iter().map(|o| o.kind).collect();
        assert!(kinds.len() >= 8, "{kinds:?}");
    }
}
